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
/// executor of another context is refused with operation_not_supported, with a closed socket
/// on it, and the next connection still goes to the next accept.
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

  std::string got(4, '\0');
  std::optional<std::size_t> read;
  bool read_handler_in_strand = false;
  asio::async_write(client, asio::buffer("ping", 4), [](error_code, std::size_t) {});
  asio::async_read(*accepted, asio::buffer(got), [&](error_code ec, std::size_t n) {
    read_handler_in_strand = strand.running_in_this_thread();
    read = ec ? 0 : n;
  });
  BOOST_REQUIRE(run_until([&] { return read.has_value(); }));
  BOOST_TEST(*read == 4u);
  BOOST_TEST(got == "ping");
  BOOST_TEST(read_handler_in_strand);

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

  std::optional<socket> second;
  listener.async_accept(io, [&](error_code ec, socket s) {
    if (!ec) second.emplace(std::move(s));
  });
  socket client2(io, options);
  std::optional<error_code> connected2;
  client2.async_connect(listener.local_endpoint(), [&](error_code ec) { connected2 = ec; });
  BOOST_REQUIRE(run_until([&] { return second && connected2; }));
  BOOST_TEST(!*connected2);
  BOOST_TEST(second->is_open());

  client.close();
  client2.close();
  accepted->close();
  second->close();
  listener.close();
  io.restart();
  io.run_for(std::chrono::seconds(3));
}

}  // namespace coverbs::test
