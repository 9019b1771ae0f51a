// The bodies declared in accept_executor_tests.hpp, compiled once for both transports' tests.

#include "accept_executor_tests.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <string>
#include <thread>

#include "connected_pair.hpp"

namespace coverbs::test {

/// Accepting onto a strand: the socket's executor is the strand (its operations' handlers run
/// there), the accept's handler runs on the acceptor's, and the connection works; likewise
/// into a socket on the strand, and onto another io_context, by its executor or into its
/// socket (the client's address reported by both).
void accept_onto_executor(transport kind) {
  namespace asio = boost::asio;
  asio::io_context io, other;
  const socket_options options{.kind = kind};
  acceptor listener(io, {test_address(), 0}, options);
  const auto strand = asio::make_strand(io);
  const auto run_until = [&](const auto& done) {  // drives both contexts, on this thread
    io.restart();
    other.restart();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      for (auto* context : {&io, &other}) {
        if (context->stopped()) context->restart();  // out of work now: not for good
      }
      if (io.poll() + other.poll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  };
  // The client's "ping" arrives on `s`, the read's handler running where `in_place` says.
  const auto echoes_in = [&](socket& from, socket& s, const auto& in_place) {
    std::string got(4, '\0');
    std::optional<std::size_t> n;
    bool placed = false;
    asio::async_write(from, asio::buffer("ping", 4), [](error_code, std::size_t) {});
    asio::async_read(s, asio::buffer(got), [&](error_code ec, std::size_t k) {
      placed = in_place();
      n = ec ? 0 : k;
    });
    return run_until([&] { return n.has_value(); }) && *n == 4 && got == "ping" && placed;
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

  // Into a socket of the acceptor's context: its strand.
  socket client2(io, options);
  std::optional<error_code> connected2;
  client2.async_connect(listener.local_endpoint(), [&](error_code ec) { connected2 = ec; });
  socket second(strand);
  accept_ec = asio::error::would_block;
  listener.async_accept(second, [&](error_code ec) { accept_ec = ec; });
  BOOST_REQUIRE(run_until([&] { return accept_ec != asio::error::would_block && connected2; }));
  BOOST_TEST(!accept_ec, accept_ec.message());
  BOOST_TEST(!*connected2);
  BOOST_TEST(second.is_open());
  BOOST_TEST(echoes_in(client2, second, [&] { return strand.running_in_this_thread(); }));

  // Onto another context (one per thread, say), by its executor and into its socket: the
  // connection runs there, the accept's handler still on the acceptor's.
  socket client3(io, options), client4(io, options);
  std::optional<error_code> connected3, connected4, accepted4;
  std::optional<socket> third;
  bool third_handler_on_io = false;
  asio::ip::tcp::endpoint third_peer;
  listener.async_accept(other, third_peer, [&](error_code ec, socket s) {
    third_handler_on_io = io.get_executor().running_in_this_thread();
    if (!ec) third.emplace(std::move(s));
  });
  socket fourth(other, options);
  asio::ip::tcp::endpoint fourth_peer;
  listener.async_accept(fourth, fourth_peer, [&](error_code ec) { accepted4 = ec; });
  client3.async_connect(listener.local_endpoint(), [&](error_code ec) { connected3 = ec; });
  BOOST_REQUIRE(run_until([&] { return third && connected3; }));
  client4.async_connect(listener.local_endpoint(), [&](error_code ec) { connected4 = ec; });
  BOOST_REQUIRE(run_until([&] { return accepted4 && connected4; }));
  BOOST_TEST(!*connected3);
  BOOST_TEST(!*connected4);
  BOOST_TEST(!*accepted4, accepted4->message());
  BOOST_TEST(third_handler_on_io);
  BOOST_TEST((third->get_executor() == asio::any_io_executor(other.get_executor())));
  BOOST_TEST((third_peer == client3.local_endpoint()));
  BOOST_TEST((fourth_peer == client4.local_endpoint()));
  const auto on_other = [&] { return other.get_executor().running_in_this_thread(); };
  BOOST_TEST(echoes_in(client3, *third, on_other));
  BOOST_TEST(echoes_in(client4, fourth, on_other));

  for (socket* s : {&client, &client2, &client3, &client4, &*accepted, &second, &*third, &fourth}) s->close();
  listener.close();
  io.restart();  // let the closes finish on both contexts
  other.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!(io.stopped() && other.stopped()) && std::chrono::steady_clock::now() < deadline) {
    if (io.poll() + other.poll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// A connection accepted onto another context needs nothing of the acceptor's any more: with
/// the acceptor and its context gone, it still carries data both ways, ends, and leaves no work
/// behind on its context (its rdma_cm events come through that context's event channel).
void accepted_connection_outlives_the_acceptors_context(transport kind) {
  namespace asio = boost::asio;
  using clock = std::chrono::steady_clock;
  std::optional<asio::io_context> io(std::in_place);
  asio::io_context other, client_io;
  const socket_options options{.kind = kind};
  std::optional<acceptor> listener(std::in_place, *io, asio::ip::tcp::endpoint(test_address(), 0), options);
  // Drives the contexts given on this thread, `restarting` one out of work for now; left
  // stopped, a context had nothing more to do.
  const auto drive = [](std::initializer_list<asio::io_context*> contexts, const auto& done,
                        bool restarting = true) {
    const auto deadline = clock::now() + std::chrono::seconds(20);
    while (!done() && clock::now() < deadline) {
      std::size_t ran = 0;
      for (auto* context : contexts) {
        if (restarting && context->stopped()) context->restart();
        ran += context->poll();
      }
      if (ran == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  };

  std::optional<socket> accepted;
  error_code accept_ec = asio::error::would_block;
  listener->async_accept(other, [&](error_code ec, socket s) {
    accept_ec = ec;
    if (!ec) accepted.emplace(std::move(s));
  });
  socket client(client_io, options);
  std::optional<error_code> connected;
  client.async_connect(listener->local_endpoint(), [&](error_code ec) { connected = ec; });
  BOOST_REQUIRE(
      drive({&*io, &other, &client_io}, [&] { return accept_ec != asio::error::would_block && connected; }));
  BOOST_REQUIRE_MESSAGE(!accept_ec, accept_ec.message());
  BOOST_REQUIRE_MESSAGE(!*connected, connected->message());
  BOOST_REQUIRE(accepted.has_value());
  BOOST_TEST((accepted->transport_in_use() == kind));
  listener->close();
  io->restart();
  BOOST_TEST(drive(
      {&*io}, [&] { return io->stopped(); }, false));
  listener.reset();
  io.reset();

  std::string ping(4, '\0'), pong(4, '\0');
  std::optional<std::size_t> pinged, ponged;
  asio::async_write(client, asio::buffer("ping", 4), [](error_code, std::size_t) {});
  asio::async_read(*accepted, asio::buffer(ping), [&](error_code ec, std::size_t n) { pinged = ec ? 0 : n; });
  asio::async_write(*accepted, asio::buffer("pong", 4), [](error_code, std::size_t) {});
  asio::async_read(client, asio::buffer(pong), [&](error_code ec, std::size_t n) { ponged = ec ? 0 : n; });
  BOOST_REQUIRE(drive({&other, &client_io}, [&] { return pinged && ponged; }));
  BOOST_TEST(*pinged == 4u);
  BOOST_TEST(ping == "ping");
  BOOST_TEST(*ponged == 4u);
  BOOST_TEST(pong == "pong");

  // The client leaves; the server side sees the end, closes, and its context runs dry.
  client.close();
  std::optional<error_code> ended;
  char byte = 0;
  accepted->async_read_some(asio::buffer(&byte, 1), [&](error_code ec, std::size_t) { ended = ec; });
  BOOST_REQUIRE(drive({&other, &client_io}, [&] { return ended.has_value(); }));
  BOOST_TEST((*ended == asio::error::eof), ended->message());
  accepted->close();
  other.restart();
  client_io.restart();
  drive(
      {&other, &client_io}, [&] { return other.stopped() && client_io.stopped(); }, false);
  BOOST_TEST(other.stopped(), "the server side's context still has work");
  BOOST_TEST(client_io.stopped(), "the client's context still has work");
}

}  // namespace coverbs::test
