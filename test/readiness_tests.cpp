// The bodies declared in readiness_tests.hpp, compiled once for both transports' tests.

#include "readiness_tests.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "connected_pair.hpp"

namespace coverbs::test {

namespace asio = boost::asio;
using asio::socket_base;
using namespace std::chrono_literals;

namespace {

template <class Predicate>
bool run_until(asio::io_context& io, Predicate done, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  io.restart();
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  return done();
}

// A callback that keeps its completion's error.
auto keep(std::optional<error_code>& out) {
  return [&out](error_code ec) { out = ec; };
}

// Whether `s` becomes ready for `what` (without error) within a minute: a bounded wait(), so
// that a wait that never completes fails the test instead of hanging it.
bool ready_soon(asio::io_context& io, socket& s, socket_base::wait_type what) {
  std::optional<error_code> ec;
  s.async_wait(what, keep(ec));
  if (run_until(io, [&] { return ec.has_value(); })) return !*ec;
  s.cancel();  // its handler refers to `ec`
  run_until(io, [&] { return ec.has_value(); });
  return false;
}

// The byte at `offset` of the stream the pipe test writes.
std::byte pattern(std::size_t offset) {
  return static_cast<std::byte>(offset * 7 % 251);
}

// The members an Asio program's default token reaches.
using awaitable_socket = asio::use_awaitable_t<>::as_default_on_t<socket>;
static_assert(requires(awaitable_socket & s, asio::mutable_buffer b) {
  s.async_wait(socket_base::wait_read);
  s.async_send(b, 0);
  s.async_receive(b, 0);
});

}  // namespace

void waits_as_asio(transport kind) {
  connected_pair p(kind);
  std::optional<error_code> readable, in_error, second, writable;
  p.b.async_wait(socket_base::wait_read, keep(readable));
  p.b.async_wait(socket_base::wait_error, keep(in_error));
  p.b.async_wait(socket_base::wait_read, keep(second));
  p.a.async_wait(socket_base::wait_write, keep(writable));
  BOOST_TEST(!second);  // never inside the call
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return second && writable; }));
  BOOST_TEST((*second == asio::error::in_progress), second->message());
  BOOST_TEST((*writable == error_code()), writable->message());
  p.a.wait(socket_base::wait_write);  // the blocking form
  p.io.restart();
  p.io.run_for(100ms);
  BOOST_TEST(!readable);  // nothing has come yet

  const std::string text = "ready";
  asio::write(p.a, asio::buffer(text));
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return readable.has_value(); }));
  BOOST_TEST((*readable == error_code()), readable->message());
  BOOST_TEST(p.b.available() == text.size());
  std::string got(text.size(), '\0');
  BOOST_TEST(asio::read(p.b, asio::buffer(got)) == text.size());
  BOOST_TEST(got == text);
  BOOST_TEST(!in_error);
  p.b.cancel();
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return in_error.has_value(); }));
  BOOST_TEST((*in_error == asio::error::operation_aborted), in_error->message());

  // A message makes the socket readable too, though available() counts stream bytes only.
  BOOST_TEST(p.a.send(asio::buffer(text, 3)) == 3u);
  BOOST_TEST_REQUIRE(ready_soon(p.io, p.b, socket_base::wait_read));
  BOOST_TEST(p.b.available() == 0u);
  BOOST_TEST(p.b.receive(asio::buffer(got)) == 3u);

  // The awaitable form, as an Asio coroutine writes it.
  std::optional<error_code> awaited;
  asio::co_spawn(
      p.io,
      [&]() -> asio::awaitable<void> {
        auto [ec] = co_await p.b.async_wait(socket_base::wait_read, asio::as_tuple(asio::use_awaitable));
        awaited = ec;
      },
      asio::detached);
  p.io.restart();
  p.io.run_for(50ms);
  BOOST_TEST(!awaited);
  asio::write(p.a, asio::buffer(text));
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return awaited.has_value(); }));
  BOOST_TEST((*awaited == error_code()), awaited->message());

  // Closed here: a pending wait is aborted. The peer's side is readable (what was sent, then eof).
  BOOST_TEST(asio::read(p.b, asio::buffer(got)) == text.size());
  std::optional<error_code> closed_here;
  p.a.async_wait(socket_base::wait_read, keep(closed_here));
  readable.reset();
  p.b.async_wait(socket_base::wait_read, keep(readable));
  p.a.close();
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return closed_here && readable; }));
  BOOST_TEST((*closed_here == asio::error::operation_aborted), closed_here->message());
  BOOST_TEST((*readable == error_code()), readable->message());
  error_code ec;
  p.b.read_some(asio::buffer(got), ec);
  BOOST_TEST((ec == asio::error::eof), ec.message());
  // The peer has gone, not only ended its stream: the connection has failed.
  in_error.reset();
  p.b.async_wait(socket_base::wait_error, keep(in_error));
  BOOST_TEST_REQUIRE(run_until(
      p.io, [&] { return in_error.has_value(); }, std::chrono::seconds(30)));
  BOOST_TEST((*in_error == error_code()), in_error->message());

  // A closed socket: refused, never inside the call.
  p.b.close();
  readable.reset();
  p.b.async_wait(socket_base::wait_read, keep(readable));
  BOOST_TEST(!readable);
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return readable.has_value(); }));
  BOOST_TEST((*readable == asio::error::bad_descriptor), readable->message());
  p.b.wait(socket_base::wait_write, ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  BOOST_CHECK_THROW(p.b.wait(socket_base::wait_read), boost::system::system_error);
}

void wait_for_greeting(transport kind) {
  asio::io_context io;
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), {.kind = kind});
  socket client(io, {.kind = kind});
  const std::string greeting = "220 ready\n";
  std::optional<error_code> greeted;
  std::string got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        socket peer = co_await server.async_accept(asio::use_awaitable);
        asio::steady_timer pause(io, 300ms);
        co_await pause.async_wait(asio::use_awaitable);
        co_await asio::async_write(peer, asio::buffer(greeting), asio::use_awaitable);
        asio::steady_timer linger(io, 30s);  // keeps `peer` open while the client reads
        co_await linger.async_wait(asio::as_tuple(asio::use_awaitable));
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await client.async_connect(server.local_endpoint(), asio::use_awaitable);
        auto [ec] = co_await client.async_wait(socket_base::wait_read, asio::as_tuple(asio::use_awaitable));
        greeted = ec;
        got.resize(client.available());
        client.non_blocking(true);
        got.resize(client.read_some(asio::buffer(got)));
      },
      asio::detached);
  BOOST_TEST_REQUIRE(run_until(
      io, [&] { return greeted.has_value(); }, std::chrono::seconds(30)));
  BOOST_TEST((*greeted == error_code()), greeted->message());
  BOOST_TEST(got == greeting);
  client.close();
  server.close();
  io.stop();
}

void full_pipe_then_reactor_style_reads(transport kind) {
  connected_pair p(kind);
  p.a.non_blocking(true);
  p.b.non_blocking(true);
  BOOST_TEST(p.a.non_blocking());
  // The peer reads nothing: its receive buffers (RDMA: our credits) and then our own fill.
  constexpr std::size_t chunk = 64 * 1024, most = std::size_t{512} << 20;
  std::vector<std::byte> out(chunk);
  std::size_t written = 0;
  // Until a pass after a pause takes nothing: over TCP the peer's library reads ahead (up to
  // a limit) and may lag the writes, so the first would_block can still be followed by room.
  for (std::size_t pass = 0, taken = 1; taken > 0 && pass < 50; ++pass) {
    error_code ec;
    taken = 0;
    while (!ec && written < most) {
      for (std::size_t i = 0; i < chunk; ++i) out[i] = pattern(written + i);
      const std::size_t n = p.a.write_some(asio::buffer(out), ec);
      written += n;
      taken += n;
    }
    BOOST_TEST_REQUIRE((ec == asio::error::would_block), ec.message());
    p.io.restart();
    p.io.run_for(200ms);
  }
  BOOST_TEST_MESSAGE(written << " bytes written before would_block");
  std::optional<error_code> writable;
  p.a.async_wait(socket_base::wait_write, keep(writable));
  p.io.restart();
  p.io.run_for(200ms);
  BOOST_TEST(!writable);  // nothing moves while the peer reads nothing

  std::size_t received = 0, mismatches = 0, would_blocks = 0;
  asio::co_spawn(
      p.io,
      [&]() -> asio::awaitable<void> {
        std::vector<std::byte> in(100'000);
        while (received < written) {
          co_await p.b.async_wait(socket_base::wait_read, asio::use_awaitable);
          for (;;) {
            error_code e;
            const std::size_t n = p.b.read_some(asio::buffer(in), e);  // on this thread: at once
            if (e == asio::error::would_block) {
              ++would_blocks;
              break;
            }
            if (e) throw boost::system::system_error(e);
            for (std::size_t i = 0; i < n; ++i) mismatches += in[i] != pattern(received + i);
            received += n;
          }
        }
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return received >= written && writable; }));
  BOOST_TEST(received == written);
  BOOST_TEST(mismatches == 0u);
  BOOST_TEST(would_blocks > 0u);
  BOOST_TEST((*writable == error_code()), writable->message());
  BOOST_TEST(p.a.write_some(asio::buffer(out)) > 0u);  // writable: it takes bytes at once
}

void non_blocking_as_asio(transport kind) {
  connected_pair p(kind);
  socket s(p.io, {.kind = kind});
  error_code ec;
  s.non_blocking(true, ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  BOOST_CHECK_THROW(s.non_blocking(true), boost::system::system_error);
  BOOST_TEST(!s.non_blocking());
  s.open(asio::ip::tcp::v4());
  s.non_blocking(true);
  BOOST_TEST(s.non_blocking());
  s.close();
  BOOST_TEST(!s.non_blocking());
  s.bind({p.a.local_endpoint().address(), 0});  // bind() alone: open() is implied, as for set_option
  s.non_blocking(true);
  BOOST_TEST(s.non_blocking());
  s.close();

  p.b.non_blocking(true);
  std::vector<char> in(64);
  const auto started = std::chrono::steady_clock::now();
  BOOST_TEST(p.b.read_some(asio::buffer(in), ec) == 0u);
  BOOST_TEST((ec == asio::error::would_block), ec.message());
  BOOST_TEST(p.b.receive(asio::buffer(in), ec) == 0u);
  BOOST_TEST((ec == asio::error::would_block), ec.message());
  BOOST_CHECK_THROW(p.b.read_some(asio::buffer(in)), boost::system::system_error);
  BOOST_TEST((std::chrono::steady_clock::now() - started < 5s));
  BOOST_TEST(p.b.read_some(asio::mutable_buffer(), ec) == 0u);  // nothing asked: done at once
  BOOST_TEST(!ec, ec.message());

  // Asynchronous operations still wait for bytes.
  std::optional<std::size_t> read;
  p.b.async_read_some(asio::buffer(in), [&](error_code, std::size_t n) { read = n; });
  p.io.restart();
  p.io.run_for(100ms);
  BOOST_TEST(!read);
  asio::write(p.a, asio::buffer("x", 1));
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return read.has_value(); }));
  BOOST_TEST(*read == 1u);

  // Messages: all or nothing, too large refused, too small a buffer leaves it queued.
  p.a.non_blocking(true);
  std::vector<char> big(p.a.options().buffer_size + 1);
  BOOST_TEST(p.a.send(asio::buffer(big), ec) == 0u);
  BOOST_TEST((ec == asio::error::message_size), ec.message());
  BOOST_TEST(p.a.send(asio::buffer("hello", 5), ec) == 5u);
  BOOST_TEST(!ec, ec.message());
  BOOST_TEST_REQUIRE(ready_soon(p.io, p.b, socket_base::wait_read));
  BOOST_TEST(p.b.receive(asio::buffer(in, 2), ec) == 0u);
  BOOST_TEST((ec == asio::error::message_size), ec.message());
  BOOST_TEST(p.b.receive(asio::buffer(in), ec) == 5u);
  BOOST_TEST(std::string(in.data(), 5) == "hello");

  // The peer's shutdown: eof after what was sent; writes after one's own: broken_pipe.
  BOOST_TEST(p.a.write_some(asio::buffer("tail", 4), ec) == 4u);
  p.a.shutdown(socket_base::shutdown_send);
  BOOST_TEST(p.a.write_some(asio::buffer("more", 4), ec) == 0u);
  BOOST_TEST((ec == asio::error::broken_pipe), ec.message());
  BOOST_TEST(ready_soon(p.io, p.a, socket_base::wait_write));  // a write fails at once
  std::size_t got = 0;
  while (got < 4) {
    BOOST_TEST_REQUIRE(ready_soon(p.io, p.b, socket_base::wait_read));
    got += p.b.read_some(asio::buffer(in.data() + got, in.size() - got), ec);
    BOOST_TEST_REQUIRE(!ec, ec.message());
  }
  BOOST_TEST(std::string(in.data(), 4) == "tail");
  BOOST_TEST_REQUIRE(ready_soon(p.io, p.b, socket_base::wait_read));
  BOOST_TEST(p.b.read_some(asio::buffer(in), ec) == 0u);
  BOOST_TEST((ec == asio::error::eof), ec.message());
  p.b.close();
  BOOST_TEST(!p.b.non_blocking());
}

void message_flags_as_asio(transport kind) {
  connected_pair p(kind);
  std::vector<char> in(16);
  error_code ec;
  BOOST_TEST(p.a.send(asio::buffer("m1", 2), 0) == 2u);
  BOOST_TEST(p.a.send(asio::buffer("no", 2), socket_base::message_out_of_band, ec) == 0u);
  BOOST_TEST((ec == asio::error::operation_not_supported), ec.message());
  BOOST_CHECK_THROW(p.a.send(asio::buffer("no", 2), socket_base::message_do_not_route),
                    boost::system::system_error);
  BOOST_TEST(p.b.receive(asio::buffer(in), socket_base::message_peek, ec) == 0u);
  BOOST_TEST((ec == asio::error::operation_not_supported), ec.message());
  BOOST_TEST(p.b.receive(asio::buffer(in), 0) == 2u);
  BOOST_TEST(std::string(in.data(), 2) == "m1");

  std::optional<error_code> peeked, sent, received;
  std::size_t sent_n = 0, received_n = 0;
  p.b.async_receive(asio::buffer(in), socket_base::message_peek,
                    [&](error_code e, std::size_t) { peeked = e; });
  BOOST_TEST(!peeked);  // never inside the call
  p.a.async_send(asio::buffer("m2", 2), 0, [&](error_code e, std::size_t n) {
    sent = e;
    sent_n = n;
  });
  p.b.async_receive(asio::buffer(in), 0, [&](error_code e, std::size_t n) {
    received = e;
    received_n = n;
  });
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return peeked && sent && received; }));
  BOOST_TEST((*peeked == asio::error::operation_not_supported), peeked->message());
  BOOST_TEST(!*sent, sent->message());
  BOOST_TEST(sent_n == 2u);
  BOOST_TEST(!*received, received->message());
  BOOST_TEST(received_n == 2u);
  BOOST_TEST(std::string(in.data(), 2) == "m2");

  // A closed socket: bad_descriptor first, as Asio's.
  p.b.close();
  BOOST_TEST(p.b.receive(asio::buffer(in), socket_base::message_peek, ec) == 0u);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  peeked.reset();
  p.b.async_receive(asio::buffer(in), socket_base::message_peek,
                    [&](error_code e, std::size_t) { peeked = e; });
  BOOST_TEST_REQUIRE(run_until(p.io, [&] { return peeked.has_value(); }));
  BOOST_TEST((*peeked == asio::error::bad_descriptor), peeked->message());
}

}  // namespace coverbs::test
