// acceptor::async_accept(executor or context, token): the accepted socket's executor is the one
// given, as Beast's servers accept onto a strand, over each transport.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <string>

#include "connected_pair.hpp"

namespace coverbs::test {

/// Accepting onto a strand: the socket's executor is the strand (its operations' handlers run
/// there), the accept's handler runs on the acceptor's, and the connection works. An
/// executor, or a socket, of another context is refused with operation_not_supported (the
/// socket closed), and the client already waiting goes to the next accept, here into a
/// socket on the strand.
inline void accept_onto_executor(transport kind) {
  namespace asio = boost::asio;
  asio::io_context io, other;
  const socket_options options{.kind = kind};
  acceptor listener(io, {test_address(), 0}, options);
  const auto strand = asio::make_strand(io);
  const auto run_until = [&](const auto& done) {
    io.restart();
    while (!done() && io.run_one_for(std::chrono::seconds(30)) > 0) {
    }
    return done();
  };

  std::optional<socket> accepted;
  error_code accept_ec = asio::error::would_block;
  bool accept_handler_in_strand = true;
  listener.async_accept(strand, [&](error_code ec, socket s) {
    accept_ec = ec;
    accept_handler_in_strand = strand.running_in_this_thread();
    accepted.emplace(std::move(s));
  });
  socket client(io, options);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  BOOST_REQUIRE(run_until([&] { return accepted && connected; }));
  BOOST_REQUIRE(!accept_ec);
  BOOST_REQUIRE(!*connected);
  BOOST_TEST(!accept_handler_in_strand);
  BOOST_TEST((accepted->get_executor() == asio::any_io_executor(strand)));
  BOOST_TEST((accepted->transport_in_use() == kind));

  // Each kind of operation completes in the strand: a read, a write and a message each way.
  std::string got(4, '\0');
  std::optional<std::size_t> read, written, sent, received;
  bool read_in_strand = false, write_in_strand = false, send_in_strand = false, receive_in_strand = false;
  std::string message(5, '\0');
  asio::async_write(client, asio::buffer("ping", 4), [](error_code, std::size_t) {});
  asio::async_read(*accepted, asio::buffer(got), [&](error_code ec, std::size_t n) {
    read_in_strand = strand.running_in_this_thread();
    read = ec ? 0 : n;
  });
  BOOST_REQUIRE(run_until([&] { return read.has_value(); }));
  asio::async_write(*accepted, asio::buffer("pong", 4), [&](error_code ec, std::size_t n) {
    write_in_strand = strand.running_in_this_thread();
    written = ec ? 0 : n;
  });
  accepted->async_send(asio::buffer("hello", 5), [&](error_code ec, std::size_t n) {
    send_in_strand = strand.running_in_this_thread();
    sent = ec ? 0 : n;
  });
  std::string pong(4, '\0');
  std::optional<std::size_t> pong_read;
  asio::async_read(client, asio::buffer(pong), [&](error_code ec, std::size_t n) { pong_read = ec ? 0 : n; });
  BOOST_REQUIRE(run_until([&] { return written && sent && pong_read; }));
  std::string hello(5, '\0');
  std::optional<std::size_t> hello_received;
  client.async_receive(asio::buffer(hello),
                       [&](error_code ec, std::size_t n) { hello_received = ec ? 0 : n; });
  client.async_send(asio::buffer("world", 5), [](error_code, std::size_t) {});
  accepted->async_receive(asio::buffer(message), [&](error_code ec, std::size_t n) {
    receive_in_strand = strand.running_in_this_thread();
    received = ec ? 0 : n;
  });
  BOOST_REQUIRE(run_until([&] { return received && hello_received; }));
  BOOST_TEST(*read == 4u);
  BOOST_TEST(got == "ping");
  BOOST_TEST(*written == 4u);
  BOOST_TEST(pong == "pong");
  BOOST_TEST(*sent == 5u);
  BOOST_TEST(*received == 5u);
  BOOST_TEST(message == "world");
  BOOST_TEST(hello == "hello");
  BOOST_TEST(read_in_strand);
  BOOST_TEST(write_in_strand);
  BOOST_TEST(send_in_strand);
  BOOST_TEST(receive_in_strand);

  // The next client connects first: a refused accept must not take its connection.
  socket client2(io, options);
  std::optional<error_code> connected2;
  client2.async_connect(listener.local_endpoint(), [&](error_code ec) { connected2 = ec; });
  std::optional<error_code> refused;
  std::optional<socket> refused_socket;
  listener.async_accept(other, [&](error_code ec, socket s) {
    refused = ec;
    refused_socket.emplace(std::move(s));
  });
  BOOST_TEST(!refused.has_value());  // never inside the initiating call
  BOOST_REQUIRE(run_until([&] { return refused.has_value(); }));
  BOOST_TEST((*refused == asio::error::operation_not_supported), refused->message());
  BOOST_TEST(!refused_socket->is_open());
  BOOST_TEST((refused_socket->get_executor() == asio::any_io_executor(other.get_executor())));

  // Nor an accept into a socket of another context.
  socket other_peer(other, options);
  std::optional<error_code> refused_peer;
  listener.async_accept(other_peer, [&](error_code ec) { refused_peer = ec; });
  BOOST_REQUIRE(run_until([&] { return refused_peer.has_value(); }));
  BOOST_TEST((*refused_peer == asio::error::operation_not_supported), refused_peer->message());

  socket second(strand);  // into a socket of the acceptor's context: its strand
  listener.async_accept(second, [&](error_code ec) { accept_ec = ec; });
  accept_ec = asio::error::would_block;
  BOOST_REQUIRE(run_until([&] { return accept_ec != asio::error::would_block && connected2; }));
  BOOST_TEST(!accept_ec, accept_ec.message());
  BOOST_TEST(!*connected2);
  BOOST_TEST(second.is_open());
  bool second_read_in_strand = false;
  std::optional<std::size_t> second_read;
  asio::async_write(client2, asio::buffer("ping", 4), [](error_code, std::size_t) {});
  asio::async_read(second, asio::buffer(got), [&](error_code ec, std::size_t n) {
    second_read_in_strand = strand.running_in_this_thread();
    second_read = ec ? 0 : n;
  });
  BOOST_REQUIRE(run_until([&] { return second_read.has_value(); }));
  BOOST_TEST(*second_read == 4u);
  BOOST_TEST(second_read_in_strand);

  client.close();
  client2.close();
  accepted->close();
  second.close();
  listener.close();
  io.restart();
  io.run_for(std::chrono::seconds(3));
}

}  // namespace coverbs::test
