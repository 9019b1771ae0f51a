#include "accept_cancellation_tests.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <optional>

#include "coverbs/acceptor.hpp"
#include "stream_tests.hpp"
#include "test_address.hpp"

namespace coverbs::test {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

// A client connects to `server` and `served` (an accept started already) completes with it:
// a byte goes through.
void client_reaches(asio::io_context& io, const acceptor& server, socket& served,
                    const std::optional<error_code>& accepted, transport kind) {
  socket client(io, {.kind = kind});
  std::optional<error_code> connected;
  client.async_connect(tcp::endpoint(test_address(), server.local_endpoint().port()),
                       [&](error_code ec) { connected = ec; });
  io.restart();
  run_until(
      io, [&] { return accepted && connected; }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE((accepted && connected));
  BOOST_TEST_REQUIRE((*accepted == error_code()), accepted->message());
  BOOST_TEST_REQUIRE((*connected == error_code()), connected->message());
  std::optional<error_code> wrote, read;
  char got = 0;
  asio::async_write(client, asio::buffer("x", 1), [&](error_code ec, std::size_t) { wrote = ec; });
  asio::async_read(served, asio::buffer(&got, 1), [&](error_code ec, std::size_t) { read = ec; });
  run_until(
      io, [&] { return wrote && read; }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE((wrote && read));
  BOOST_TEST((*read == error_code()), read->message());
  BOOST_TEST(got == 'x');
}

// The next accept into a fresh socket takes a client.
void next_accept_takes_a_client(asio::io_context& io, acceptor& server, transport kind) {
  std::optional<error_code> accepted;
  socket served(io, {.kind = kind});
  server.async_accept(served, [&](error_code ec) { accepted = ec; });
  client_reaches(io, server, served, accepted, kind);
}

// `async_accept(...) || timer` on `server`: the timer wins, and the context then runs out of work.
template <class Acceptor, class Accept>
void timer_wins(asio::io_context& io, Acceptor& server, Accept accept) {
  std::optional<std::size_t> winner;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(io, std::chrono::milliseconds(200));
        auto r = co_await (accept(server) || timer.async_wait(asio::use_awaitable));
        winner = r.index();
      },
      asio::detached);
  io.restart();
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST_REQUIRE(winner.has_value());
  BOOST_TEST(*winner == 1u);  // the timer
  BOOST_TEST(io.stopped(), "an accept cancelled, nothing else to do: run() returns");
}

}  // namespace

void accept_cancellation(transport kind) {
  asio::io_context io;
  acceptor server(io, tcp::endpoint(test_address(), 0), {.kind = kind});
  timer_wins(io, server, [](acceptor& a) { return a.async_accept(asio::use_awaitable); });
  next_accept_takes_a_client(io, server, kind);

  // The acceptor as_default_on yields: the same through its own async_accept.
  asio::use_awaitable_t<>::as_default_on_t<acceptor> awaiting(io, tcp::endpoint(test_address(), 0),
                                                              {.kind = kind});
  timer_wins(io, awaiting, [](auto& a) { return a.async_accept(); });
  next_accept_takes_a_client(io, awaiting, kind);

  // One of two accepts cancelled by its signal: the other takes the next client.
  asio::cancellation_signal signal;
  std::optional<error_code> aborted, accepted;
  socket served(io, {.kind = kind});
  server.async_accept(
      asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, socket) { aborted = ec; }));
  server.async_accept(served, [&](error_code ec) { accepted = ec; });
  asio::steady_timer soon(io, std::chrono::milliseconds(100));
  soon.async_wait([&](error_code) { signal.emit(asio::cancellation_type::terminal); });
  io.restart();
  run_until(
      io, [&] { return aborted.has_value(); }, std::chrono::seconds(20));
  BOOST_TEST_REQUIRE(aborted.has_value());
  BOOST_TEST((*aborted == asio::error::operation_aborted), aborted->message());
  BOOST_TEST(!accepted.has_value());
  client_reaches(io, server, served, accepted, kind);
  served.close();  // an open connection keeps its context busy

  // cancel(): the context runs out of work; then an accept started right after a cancel, before
  // the aborted accept's completion has run, still takes a client.
  aborted.reset();
  server.async_accept([&](error_code ec, socket) { aborted = ec; });
  soon.expires_after(std::chrono::milliseconds(100));
  soon.async_wait([&](error_code) { server.cancel(); });
  io.restart();
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST_REQUIRE(aborted.has_value());
  BOOST_TEST((*aborted == asio::error::operation_aborted), aborted->message());
  BOOST_TEST(io.stopped(), "after cancel() nothing listens: run() returns");
  aborted.reset();
  server.async_accept([&](error_code ec, socket) { aborted = ec; });
  server.cancel();
  next_accept_takes_a_client(io, server, kind);
  BOOST_TEST_REQUIRE(aborted.has_value());
  BOOST_TEST((*aborted == asio::error::operation_aborted), aborted->message());

  server.close();
  BOOST_CHECK_THROW(server.cancel(), boost::system::system_error);
}

}  // namespace coverbs::test
