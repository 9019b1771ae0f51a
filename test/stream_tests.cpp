// The bodies declared in stream_tests.hpp, compiled once for both transports' tests.

#include "stream_tests.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coverbs/socket.hpp"
#include "one_sided_tests.hpp"

namespace coverbs::test {

void bulk_both_ways(asio::io_context& io, socket& a, socket& b, std::size_t size) {
  const auto ab = random_bytes(size, 1), ba = random_bytes(size, 2);
  std::vector<std::byte> at_b(size), at_a(size);
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    auto [w1, r1, w2, r2] = co_await (asio::async_write(a, asio::buffer(ab), asio::use_awaitable) &&
                                      asio::async_read(b, asio::buffer(at_b), asio::use_awaitable) &&
                                      asio::async_write(b, asio::buffer(ba), asio::use_awaitable) &&
                                      asio::async_read(a, asio::buffer(at_a), asio::use_awaitable));
    BOOST_TEST(w1 == size);
    BOOST_TEST(r1 == size);
    BOOST_TEST(w2 == size);
    BOOST_TEST(r2 == size);
  });
  BOOST_TEST((at_b == ab));
  BOOST_TEST((at_a == ba));
}

void lines_then_eof(asio::io_context& io, socket& a, socket& b) {
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    const std::string text = "first line\nsecond line\nthird";
    co_await asio::async_write(a, asio::buffer(text), asio::use_awaitable);
    a.shutdown(asio::socket_base::shutdown_send);
    asio::streambuf buf;
    std::size_t n = co_await asio::async_read_until(b, buf, '\n', asio::use_awaitable);
    std::string line(asio::buffers_begin(buf.data()), asio::buffers_begin(buf.data()) + static_cast<long>(n));
    BOOST_TEST(line == "first line\n");
    buf.consume(n);
    n = co_await asio::async_read_until(b, buf, '\n', asio::use_awaitable);
    BOOST_TEST(n == 12u);
    buf.consume(n);
    auto [ec, m] = co_await asio::async_read_until(b, buf, '\n', asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((ec == asio::error::eof), ec.message());
    BOOST_TEST(std::string(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data())) == "third");
    // The other direction still works after a one-way shutdown.
    co_await asio::async_write(b, asio::buffer(std::string("reply")), asio::use_awaitable);
    std::array<char, 5> reply;
    co_await asio::async_read(a, asio::buffer(reply), asio::use_awaitable);
    BOOST_TEST(std::string(reply.data(), 5) == "reply");
  });
}

void end_of_stream_outlasts_the_connection(asio::io_context& io, socket& a, socket& b) {
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    co_await asio::async_write(b, asio::buffer(std::string("last")), asio::use_awaitable);
    b.close();
    std::array<char, 8> got{};
    auto [ec, n] = co_await asio::async_read(a, asio::buffer(got), asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((ec == asio::error::eof), ec.message());
    BOOST_TEST(std::string(got.data(), n) == "last");
    // Over RDMA a write fails once the QP has run out of retries (the peer's QP is gone), and
    // a write that finds no credit waits until then: each is bounded, so that a QP retrying
    // for ever fails the test here. Over TCP the peer's FIN has ended the connection already
    // (with eof), and the first write fails at once; raw_peer's reset case is in
    // tcp_stream_test.
    const std::vector<std::byte> block(4096);
    asio::steady_timer pause(a.get_executor());
    error_code write_ec;
    for (int i = 0; i < 500 && !write_ec; ++i) {
      asio::steady_timer limit(a.get_executor(), std::chrono::seconds(20));
      auto r = co_await (asio::async_write(a, asio::buffer(block), asio::as_tuple(asio::use_awaitable)) ||
                         limit.async_wait(asio::as_tuple(asio::use_awaitable)));
      BOOST_TEST_REQUIRE(r.index() == 0u, "a write into the closed peer neither completed nor failed");
      write_ec = std::get<0>(std::get<0>(r));
      pause.expires_after(std::chrono::milliseconds(10));
      co_await pause.async_wait(asio::use_awaitable);
    }
    BOOST_TEST_REQUIRE(static_cast<bool>(write_ec), "writes into the closed peer never failed");
    BOOST_TEST((write_ec == asio::error::broken_pipe), write_ec.message());
    auto [again_ec, again_n] =
        co_await a.async_read_some(asio::buffer(got), asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((again_ec == asio::error::eof), again_ec.message());
    BOOST_TEST(again_n == 0u);
  });
}

void messages_keep_boundaries(asio::io_context& io, socket& a, socket& b) {
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    for (std::size_t size : {1u, 100u, 3000u}) {
      co_await a.async_send(asio::buffer(std::string(size, 'x')), asio::use_awaitable);
    }
    co_await a.async_send(asio::buffer(std::string(10, 'y')), asio::use_awaitable);
    std::vector<char> buf(4096);
    for (std::size_t size : {1u, 100u, 3000u}) {
      const std::size_t n = co_await b.async_receive(asio::buffer(buf), asio::use_awaitable);
      BOOST_TEST(n == size);
    }
    std::array<char, 4> tiny;
    auto [ec, n] = co_await b.async_receive(asio::buffer(tiny), asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((ec == asio::error::message_size));
    n = co_await b.async_receive(asio::buffer(buf), asio::use_awaitable);
    BOOST_TEST(n == 10u);
    BOOST_TEST(std::string(buf.data(), n) == std::string(10, 'y'));
    auto [big_ec, big_n] = co_await a.async_send(asio::buffer(std::vector<char>(a.options().buffer_size + 1)),
                                                 asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((big_ec == asio::error::message_size));
    BOOST_TEST(big_n == 0u);
    // A socket takes 16 buffers per call: a write moves what they hold, but a message must go
    // whole, so one of 17 pieces (or a receive into 17) is refused, and nothing else changes.
    std::array<char, 17> pieces{};
    std::array<asio::const_buffer, 17> gathered;
    std::array<asio::mutable_buffer, 17> scattered;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      gathered[i] = asio::buffer(&pieces[i], 1);
      scattered[i] = asio::buffer(&pieces[i], 1);
    }
    auto [many_ec, many_n] = co_await a.async_send(gathered, asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((many_ec == asio::error::invalid_argument), many_ec.message());
    BOOST_TEST(many_n == 0u);
    auto [into_ec, into_n] = co_await b.async_receive(scattered, asio::as_tuple(asio::use_awaitable));
    BOOST_TEST((into_ec == asio::error::invalid_argument), into_ec.message());
    BOOST_TEST(into_n == 0u);
    co_await a.async_send(asio::buffer("after", 5), asio::use_awaitable);
    n = co_await b.async_receive(asio::buffer(buf), asio::use_awaitable);
    BOOST_TEST(std::string(buf.data(), n) == "after");
  });
}

/// A completion handler for a write that is to be cancelled: records what it reported, then
/// writes `cancel_marker` on `a`.
inline auto record_then_write_marker(socket& a, write_outcome& outcome) {
  return [&a, &outcome](error_code ec, std::size_t n) {
    outcome.emplace(ec, n);
    asio::async_write(a, asio::buffer(cancel_marker), [](error_code, std::size_t) {});
  };
}

/// Reads on `b` until the cancelled write has completed and the bytes it reported and the
/// marker have come, and checks that exactly those came: `data`'s first bytes, then the marker.
inline asio::awaitable<void> expect_reported_then_marker(socket& b, const std::vector<std::byte>& data,
                                                         const write_outcome& outcome) {
  std::vector<std::byte> got(data.size() + cancel_marker.size());
  std::size_t have = 0;
  while (!outcome || have < outcome->second + cancel_marker.size()) {
    have += co_await b.async_read_some(asio::buffer(got) + have, asio::use_awaitable);
  }
  BOOST_TEST_REQUIRE(have == outcome->second + cancel_marker.size());
  BOOST_TEST(
      std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(outcome->second), data.begin()));
  BOOST_TEST(std::memcmp(got.data() + outcome->second, cancel_marker.data(), cancel_marker.size()) == 0);
}

void throwing_read_handlers_leave_run_and_the_stream_goes_on(asio::io_context& io, socket& a, socket& b) {
  constexpr std::uint32_t rounds = 12;
  for (std::uint32_t i = 0; i < rounds; ++i) {
    BOOST_TEST_CONTEXT("round " << i) {
      std::optional<error_code> wrote;
      asio::async_write(a, asio::buffer(&i, sizeof i), [&](error_code ec, std::size_t) { wrote = ec; });
      std::uint32_t got = ~0u;
      bool read = false;
      asio::async_read(b, asio::buffer(&got, sizeof got), [&](error_code ec, std::size_t) {
        BOOST_TEST(!ec, ec.message());
        read = true;
        if (!ec) throw std::runtime_error("from a read handler");
      });
      const bool threw = run_catches_a_throw(io);
      BOOST_REQUIRE(read);
      BOOST_TEST(threw);
      BOOST_TEST(got == i);
      run_until(
          io, [&] { return wrote.has_value(); }, std::chrono::seconds(20));
      BOOST_REQUIRE(wrote.has_value());
      BOOST_TEST(!*wrote, wrote->message());
    }
  }
  for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    const std::uint32_t sent = 0x5eed;
    std::uint32_t got = 0;
    std::optional<error_code> wrote, read;
    asio::async_write(*from, asio::buffer(&sent, sizeof sent),
                      [&](error_code ec, std::size_t) { wrote = ec; });
    asio::async_read(*to, asio::buffer(&got, sizeof got), [&](error_code ec, std::size_t) { read = ec; });
    run_until(
        io, [&] { return wrote && read; }, std::chrono::seconds(20));
    BOOST_REQUIRE((wrote && read));
    BOOST_TEST(!*wrote, wrote->message());
    BOOST_TEST(!*read, read->message());
    BOOST_TEST(got == sent);
  }
}

void throwing_write_handlers_leave_run_and_the_stream_goes_on(asio::io_context& io, socket& a, socket& b,
                                                              std::size_t ahead) {
  const std::size_t write_size = 4 * detail::stream_core::min_direct_bytes;
  const std::size_t message_size =
      std::min(detail::stream_core::min_direct_bytes, a.impl()->max_message_size());
  const auto written = random_bytes(write_size, 11), message = random_bytes(message_size, 12);
  const std::size_t piece = detail::stream_core::min_direct_bytes - 1000;  // copied, not direct
  const std::vector<std::byte> small(ahead, std::byte{7});
  {  // a connection's first bytes wait for the peer's greeting: over TCP the small write
     // below would then hold the write slot
    std::uint32_t greeting = 0;
    run_coroutine(io, [&]() -> asio::awaitable<void> {
      co_await (asio::async_write(a, asio::buffer(&greeting, sizeof greeting), asio::use_awaitable) &&
                asio::async_read(b, asio::buffer(&greeting, sizeof greeting), asio::use_awaitable));
    });
  }
  constexpr std::uint32_t rounds = 8;
  for (std::uint32_t i = 0; i < rounds; ++i) {
    BOOST_TEST_CONTEXT("round " << i) {
      // Small writes in flight (copied; over TCP more than the kernel's small buffers take),
      // so that the large write and the message behind them go out together: over TCP both
      // from the callers' memory, in one write, ended by the same completion.
      std::vector<std::optional<std::pair<error_code, std::size_t>>> small_writes((ahead + piece - 1) /
                                                                                  piece);
      for (std::size_t k = 0; k < small_writes.size(); ++k) {
        const std::size_t at = k * piece, n = std::min(piece, ahead - at);
        a.async_write_some(asio::buffer(small.data() + at, n), [&, k](error_code ec, std::size_t taken) {
          small_writes[k] = {ec, taken};
        });
      }
      auto small_done = [&] {
        return std::all_of(small_writes.begin(), small_writes.end(),
                           [](const auto& w) { return w.has_value(); });
      };
      std::optional<error_code> sent;
      std::optional<std::size_t> wrote;
      a.async_write_some(asio::buffer(written), [&](error_code ec, std::size_t n) {
        BOOST_TEST(!ec, ec.message());
        wrote = n;
        if (!ec) throw std::runtime_error("from a write handler");
      });
      a.async_send(asio::buffer(message), [&](error_code ec, std::size_t) { sent = ec; });
      std::vector<std::byte> got(ahead), received(message_size);
      std::optional<error_code> read, receive;
      asio::async_read(b, asio::buffer(got), [&](error_code ec, std::size_t) { read = ec; });
      b.async_receive(asio::buffer(received), [&](error_code ec, std::size_t) { receive = ec; });
      const bool threw = run_catches_a_throw(io);
      BOOST_TEST(threw);
      run_until(
          io, [&] { return small_done() && wrote && sent && read && receive; }, std::chrono::seconds(20));
      BOOST_REQUIRE_MESSAGE(wrote.has_value(), "the write never completed");
      BOOST_REQUIRE_MESSAGE(sent.has_value(), "the message behind the throwing write never completed");
      BOOST_REQUIRE((small_done() && read && receive));
      for (std::size_t k = 0; k < small_writes.size(); ++k) {
        BOOST_TEST(!small_writes[k]->first, small_writes[k]->first.message());
        BOOST_REQUIRE_MESSAGE(small_writes[k]->second == std::min(piece, ahead - k * piece),
                              "a small write was taken in part");
      }
      BOOST_TEST(!*sent, sent->message());
      BOOST_TEST(!*read, read->message());
      BOOST_TEST(!*receive, receive->message());
      BOOST_TEST(std::all_of(got.begin(), got.end(), [](std::byte c) { return c == std::byte{7}; }));
      BOOST_TEST((received == message));
      std::vector<std::byte> rest(*wrote);
      std::optional<error_code> read_rest;
      asio::async_read(b, asio::buffer(rest), [&](error_code ec, std::size_t) { read_rest = ec; });
      run_until(
          io, [&] { return read_rest.has_value(); }, std::chrono::seconds(20));
      BOOST_REQUIRE(read_rest.has_value());
      BOOST_TEST(!*read_rest, read_rest->message());
      BOOST_TEST(std::equal(rest.begin(), rest.end(), written.begin()));
    }
  }
}

void large_messages_between_stream_writes(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t direct = detail::stream_core::min_direct_bytes;
  const std::size_t largest = a.impl()->max_message_size();
  const std::vector<std::size_t> sizes{direct - 1, direct, largest / 2 + 1, largest};
  const auto data = random_bytes(largest, 9), between = random_bytes(100, 10);
  const std::uint64_t direct_before = a.impl()->direct_bytes_written();
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    auto writer = [&]() -> asio::awaitable<void> {
      for (const std::size_t size : sizes) {
        const std::array<asio::const_buffer, 2> message{
            asio::buffer(data.data(), size / 3), asio::buffer(data.data() + size / 3, size - size / 3)};
        const std::size_t sent = co_await a.async_send(message, asio::use_awaitable);
        BOOST_TEST(sent == size);
        co_await asio::async_write(a, asio::buffer(between), asio::use_awaitable);
      }
    };
    auto reader = [&]() -> asio::awaitable<void> {
      std::vector<std::byte> got(largest), got_between(between.size());
      for (const std::size_t size : sizes) {
        const std::size_t n = co_await b.async_receive(asio::buffer(got), asio::use_awaitable);
        BOOST_TEST_REQUIRE(n == size);
        BOOST_TEST(std::equal(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n), data.begin()));
        co_await asio::async_read(b, asio::buffer(got_between), asio::use_awaitable);
        BOOST_TEST((got_between == between));
      }
    };
    co_await (writer() && reader());
  });
  const std::uint64_t direct_bytes = a.impl()->direct_bytes_written() - direct_before;
  if (a.transport_in_use() == transport::tcp) {
    BOOST_TEST(direct_bytes == direct + largest / 2 + 1 + largest);
  } else {
    BOOST_TEST(direct_bytes == 0u);
  }
}

void send_cancelled_at_once_is_all_or_nothing(asio::io_context& io, socket& a, socket& b) {
  const auto data = random_bytes(a.impl()->max_message_size(), 11);
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    std::vector<std::byte> got(data.size());
    // The peer's limits have come once a message has gone through: the send below starts at once.
    co_await a.async_send(asio::buffer(cancel_marker), asio::use_awaitable);
    co_await b.async_receive(asio::buffer(got), asio::use_awaitable);
    asio::cancellation_signal signal;
    write_outcome outcome;
    a.async_send(asio::buffer(data),
                 asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::size_t n) {
                   outcome.emplace(ec, n);
                   a.async_send(asio::buffer(cancel_marker), [](error_code, std::size_t) {});
                 }));
    signal.emit(asio::cancellation_type::terminal);
    std::size_t n = co_await b.async_receive(asio::buffer(got), asio::use_awaitable);
    // The send's handler is posted; the receive can complete first (a wake-up that ran the
    // handler of the marker's receive, which sent this message, polls its arrival too).
    while (!outcome) co_await asio::post(io, asio::use_awaitable);
    if (!outcome->first) {
      BOOST_TEST(outcome->second == data.size());
      BOOST_TEST_REQUIRE(n == data.size());
      BOOST_TEST((got == data));
      n = co_await b.async_receive(asio::buffer(got), asio::use_awaitable);
    } else {
      BOOST_TEST((outcome->first == asio::error::operation_aborted), outcome->first.message());
      BOOST_TEST(outcome->second == 0u);
    }
    BOOST_TEST_REQUIRE(n == cancel_marker.size());
    BOOST_TEST(std::memcmp(got.data(), cancel_marker.data(), n) == 0);
    if (a.transport_in_use() == transport::tcp) {
      BOOST_TEST(!outcome->first,
                 "a send from the caller's memory was recalled: " << outcome->first.message());
    }
  });
}

void read_cancelled_by_timer_leaves_connection_usable(asio::io_context& io, socket& a, socket& b) {
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    std::array<char, 16> buf;
    asio::steady_timer timer(io, std::chrono::milliseconds(100));
    auto result = co_await (b.async_read_some(asio::buffer(buf), asio::use_awaitable) ||
                            timer.async_wait(asio::use_awaitable));
    BOOST_TEST(result.index() == 1u);
    co_await asio::async_write(a, asio::buffer(std::string("still here")), asio::use_awaitable);
    std::array<char, 10> got;
    co_await asio::async_read(b, asio::buffer(got), asio::use_awaitable);
    BOOST_TEST(std::string(got.data(), 10) == "still here");
  });
}

void fast_peer_leaves_room_for_other_handlers(asio::io_context& io, socket& a, asio::io_context& peer_io,
                                              socket& b) {
  std::atomic<bool> stop{false}, writer_ended{false};
  std::thread writer([&] {
    std::vector<std::byte> chunk(256 * 1024);
    asio::co_spawn(
        peer_io,
        [&]() -> asio::awaitable<void> {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!stop && std::chrono::steady_clock::now() < deadline) {
            co_await asio::async_write(b, asio::buffer(chunk), asio::use_awaitable);
          }
        },
        [&](std::exception_ptr) { writer_ended = true; });
    run_until(peer_io, [&] { return writer_ended.load(); });
  });
  std::vector<std::byte> buffer(64 * 1024);
  std::uint64_t bytes_read = 0;
  bool read_pending = false, timer_pending = false, fired_while_writing = false, fired = false;
  asio::steady_timer timer(io);
  auto start_timer = [&] {  // once bytes flow, so that the reads compete with it
    timer_pending = true;
    timer.expires_after(std::chrono::milliseconds(10));
    timer.async_wait([&](error_code ec) {
      timer_pending = false;
      if (ec) return;
      fired = true;
      fired_while_writing = !writer_ended;
      stop = true;
    });
  };
  std::function<void()> read_next = [&] {
    read_pending = true;
    a.async_read_some(asio::buffer(buffer), [&](error_code ec, std::size_t n) {
      read_pending = false;
      if (bytes_read == 0 && n > 0) start_timer();
      bytes_read += n;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // slower than the writer
      if (!ec && !writer_ended) read_next();
    });
  };
  read_next();
  run_until(io, [&] { return writer_ended && (fired || bytes_read == 0); });
  writer.join();
  a.cancel();
  timer.cancel();
  run_until(io, [&] { return !read_pending && !timer_pending; });
  BOOST_TEST(fired);
  BOOST_TEST(fired_while_writing);
  BOOST_TEST(bytes_read > 0u);
}

void waiting_reads_of_random_sizes(asio::io_context& io, socket& a, socket& b) {
  const auto data = random_bytes(8 << 20, 12);
  std::vector<std::byte> got(data.size());
  const std::uint64_t direct_before = b.impl()->direct_bytes_read();
  std::size_t cancelled = 0, have = 0;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    auto writer = [&]() -> asio::awaitable<void> {
      std::mt19937 rng(13);
      for (std::size_t sent = 0; sent < data.size();) {
        const std::size_t n = std::min<std::size_t>(data.size() - sent, 1 + rng() % (512 << 10));
        sent += co_await asio::async_write(a, asio::buffer(data.data() + sent, n), asio::use_awaitable);
        // A writer no faster than its reader, so that reads wait for bytes.
        while (sent - have > (256 << 10)) co_await asio::post(io, asio::use_awaitable);
      }
    };
    auto reader = [&]() -> asio::awaitable<void> {
      std::mt19937 rng(14);
      while (have < data.size()) {
        const std::size_t size = std::min<std::size_t>(data.size() - have, 1 + rng() % (256 << 10));
        std::byte* at = got.data() + have;
        const std::size_t first = size / 3, second = rng() % 2 == 0 ? 0 : size / 3;
        const std::array<asio::mutable_buffer, 3> pieces{
            asio::buffer(at, first), asio::buffer(at + first, second),
            asio::buffer(at + first + second, size - first - second)};
        asio::cancellation_signal signal;
        std::optional<std::pair<error_code, std::size_t>> result;
        b.async_read_some(pieces,
                          asio::bind_cancellation_slot(
                              signal.slot(), [&](error_code ec, std::size_t n) { result.emplace(ec, n); }));
        const bool cancel = rng() % 5 == 0;
        for (unsigned turns = rng() % 4; !result;) {
          if (cancel && turns-- == 0) signal.emit(asio::cancellation_type::terminal);
          co_await asio::post(io, asio::use_awaitable);
        }
        if (result->first) {
          BOOST_TEST_REQUIRE((result->first == asio::error::operation_aborted), result->first.message());
          BOOST_TEST_REQUIRE(result->second == 0u);
          ++cancelled;
        }
        have += result->second;
      }
    };
    co_await (writer() && reader());
  });
  BOOST_TEST((got == data));
  BOOST_TEST(cancelled > 0u);
  const std::uint64_t direct_bytes = b.impl()->direct_bytes_read() - direct_before;
  if (a.transport_in_use() == transport::tcp) {
    BOOST_TEST(direct_bytes > data.size() / 4,
               direct_bytes << " of " << data.size() << " bytes read uncopied");
  } else {
    BOOST_TEST(direct_bytes == 0u);
  }
}

void write_cancelled_by_timer_moves_what_it_reports(asio::io_context& io, socket& a, socket& b,
                                                    std::size_t size) {
  const auto data = random_bytes(size, 3);
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::cancellation_signal signal;
    write_outcome outcome;
    asio::async_write(a, asio::buffer(data),
                      asio::bind_cancellation_slot(signal.slot(), record_then_write_marker(a, outcome)));
    asio::steady_timer timer(io, std::chrono::milliseconds(200));
    co_await timer.async_wait(asio::use_awaitable);
    BOOST_TEST_REQUIRE(!outcome.has_value(), "the write finished although the peer read nothing");
    signal.emit(asio::cancellation_type::terminal);
    co_await expect_reported_then_marker(b, data, outcome);
    BOOST_TEST((outcome->first == asio::error::operation_aborted), outcome->first.message());
    BOOST_TEST(outcome->second < size);
  });
}

void writes_from_registered_memory(asio::io_context& io, socket& a, socket& b, std::size_t size) {
  using detail::stream_core;
  const auto data = random_bytes(size, 4), middle = random_bytes(100 * 1024 + 3, 5);
  auto registered = random_bytes(size, 4);
  const registered_memory region = a.register_memory(registered, verbs::access::none);
  const std::size_t split = size / 3 + 17;
  const std::array<asio::const_buffer, 3> pieces{asio::buffer(registered.data(), split), asio::buffer(middle),
                                                 asio::buffer(registered.data() + split, size - split)};
  static const std::string tail = "tail";
  const auto unregistered = random_bytes(64 * 1024, 6);
  std::vector<std::byte> got(size + middle.size() + tail.size() + unregistered.size());
  const std::uint64_t at_start = a.impl()->direct_bytes_written();
  std::uint64_t after_registered = 0;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    auto writer = [&]() -> asio::awaitable<std::size_t> {
      // Not asio::async_write: it offers at most 64 KiB per async_write_some, too little to go
      // out uncopied over RDMA (see rdma_stream::transmit_direct).
      std::size_t n = 0;
      while (n < size + middle.size()) {
        std::vector<asio::const_buffer> rest;
        std::size_t skip = n;
        for (const auto& piece : pieces) {
          if (skip >= piece.size()) {
            skip -= piece.size();
          } else {
            rest.push_back(piece + skip);
            skip = 0;
          }
        }
        n += co_await a.async_write_some(rest, asio::use_awaitable);
      }
      after_registered = a.impl()->direct_bytes_written();
      n += co_await asio::async_write(a, asio::buffer(tail), asio::use_awaitable);
      n += co_await asio::async_write(a, asio::buffer(unregistered), asio::use_awaitable);
      co_return n;
    };
    auto [written, read] = co_await (writer() && asio::async_read(b, asio::buffer(got), asio::use_awaitable));
    BOOST_TEST(written == got.size());
    BOOST_TEST(read == got.size());
  });
  std::vector<std::byte> expected(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(split));
  expected.insert(expected.end(), middle.begin(), middle.end());
  expected.insert(expected.end(), data.begin() + static_cast<std::ptrdiff_t>(split), data.end());
  for (char c : tail) expected.push_back(static_cast<std::byte>(c));
  expected.insert(expected.end(), unregistered.begin(), unregistered.end());
  BOOST_TEST((got == expected));
  const std::uint64_t direct = after_registered - at_start;
  if (a.transport_in_use() == transport::rdma) {
    // All registered bytes but at most a tail too short to be worth the wait (four of the
    // default 64 KiB buffers: rdma_stream::direct_threshold).
    BOOST_TEST(direct >= size - 256 * 1024);
    BOOST_TEST(direct <= size);
    BOOST_TEST(a.impl()->direct_bytes_written() == after_registered, "unregistered memory went out uncopied");
  } else {
    BOOST_TEST(direct > 0u);
  }
}

void messages_from_registered_memory(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t direct = detail::stream_core::min_direct_bytes;
  const std::size_t largest = a.impl()->max_message_size();
  struct message_case {
    std::size_t size;
    bool gathered;
  };
  const std::vector<message_case> cases{{direct, false}, {largest, false}, {direct - 1, false},
                                        {largest, true}, {direct, false},  {largest, false}};
  std::vector<std::vector<std::byte>> contents;
  for (std::size_t i = 0; i < cases.size(); ++i)
    contents.push_back(random_bytes(cases[i].size, 30 + unsigned(i)));
  const bool tcp = a.transport_in_use() == transport::tcp;
  const auto uncopied = [&](const message_case& c) {
    return c.size >= direct && (tcp || (a.options().zero_copy_messages && !c.gathered));
  };
  std::vector<std::byte> source(largest);
  const registered_memory region = a.register_memory(source, verbs::access::none);
  const std::uint64_t direct_before = a.impl()->direct_bytes_written();
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    auto writer = [&]() -> asio::awaitable<void> {
      for (std::size_t i = 0; i + 1 < cases.size(); ++i) {
        const std::size_t size = cases[i].size, half = cases[i].gathered ? size / 2 : size;
        std::copy(contents[i].begin(), contents[i].end(), source.begin());
        const std::array<asio::const_buffer, 2> pieces{asio::buffer(source.data(), half),
                                                       asio::buffer(source.data() + half, size - half)};
        const std::size_t sent = co_await a.async_send(pieces, asio::use_awaitable);
        BOOST_TEST(sent == size);
        std::fill(source.begin(), source.end(), std::byte{0xee});  // the send no longer reads it
      }
      std::copy(contents.back().begin(), contents.back().end(), source.begin());
      asio::cancellation_signal signal;
      write_outcome outcome;
      a.async_send(asio::buffer(source.data(), cases.back().size),
                   asio::bind_cancellation_slot(
                       signal.slot(), [&](error_code ec, std::size_t n) { outcome.emplace(ec, n); }));
      signal.emit(asio::cancellation_type::terminal);
      while (!outcome) co_await asio::post(io, asio::use_awaitable);
      if (!outcome->first || uncopied(cases.back())) {
        BOOST_TEST(!outcome->first,
                   "a send from the caller's memory was recalled: " << outcome->first.message());
        BOOST_TEST(outcome->second == cases.back().size);
      } else {  // a copied send cancelled at once: nothing sent, as send_cancelled_at_once... says
        BOOST_TEST((outcome->first == asio::error::operation_aborted), outcome->first.message());
        contents.pop_back();
      }
    };
    auto reader = [&]() -> asio::awaitable<void> {
      std::vector<std::byte> got(largest);
      for (std::size_t i = 0; i + 1 < cases.size(); ++i) {
        const std::size_t n = co_await b.async_receive(asio::buffer(got), asio::use_awaitable);
        BOOST_TEST_REQUIRE(n == cases[i].size);
        BOOST_TEST(std::equal(contents[i].begin(), contents[i].end(), got.begin()), "message " << i);
      }
    };
    co_await (writer() && reader());
    // The last one, unless its cancel took it back.
    if (contents.size() == cases.size()) {
      std::vector<std::byte> got(largest);
      const std::size_t n = co_await b.async_receive(asio::buffer(got), asio::use_awaitable);
      BOOST_TEST_REQUIRE(n == cases.back().size);
      BOOST_TEST(std::equal(contents.back().begin(), contents.back().end(), got.begin()), "the last message");
    }
  });
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < contents.size(); ++i) {
    if (uncopied(cases[i])) expected += cases[i].size;
  }
  BOOST_TEST(a.impl()->direct_bytes_written() - direct_before == expected);
}

void uncopied_message_and_write_at_once(asio::io_context& io, socket& a, socket& b) {
  const std::size_t message_size = a.impl()->max_message_size(), write_size = std::size_t{512} << 10;
  const auto bytes = random_bytes(write_size, 41), message = random_bytes(message_size, 42);
  auto source_bytes = bytes, source_message = message;
  const registered_memory bytes_region = a.register_memory(source_bytes, verbs::access::none);
  std::optional<registered_memory> message_region(a.register_memory(source_message, verbs::access::none));
  const std::uint64_t direct_before = a.impl()->direct_bytes_written();
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    auto writer = [&]() -> asio::awaitable<void> {
      write_outcome sent;
      a.async_send(asio::buffer(source_message), [&](error_code ec, std::size_t n) { sent.emplace(ec, n); });
      message_region.reset();  // deferred until the device no longer reads it
      std::size_t n = 0;
      while (n < write_size)
        n += co_await a.async_write_some(asio::buffer(source_bytes) + n, asio::use_awaitable);
      while (!sent) co_await asio::post(io, asio::use_awaitable);
      BOOST_TEST(!sent->first, sent->first.message());
      BOOST_TEST(sent->second == message_size);
    };
    auto reader = [&]() -> asio::awaitable<void> {
      std::vector<std::byte> got_message(message_size), got_bytes(write_size);
      const std::size_t n = co_await b.async_receive(asio::buffer(got_message), asio::use_awaitable);
      BOOST_TEST(n == message_size);
      BOOST_TEST((got_message == message));
      co_await asio::async_read(b, asio::buffer(got_bytes), asio::use_awaitable);
      BOOST_TEST((got_bytes == bytes));
    };
    co_await (writer() && reader());
  });
  const std::uint64_t direct = a.impl()->direct_bytes_written() - direct_before;
  if (a.transport_in_use() == transport::rdma) {
    // All of both: the write's eight SENDs fit the credits the message left (at least 16 of
    // the 32: the peer reports re-posted buffers once half the pool is back).
    BOOST_TEST(direct == message_size + write_size);
  } else {
    BOOST_TEST(direct > message_size);  // the message, and the write but maybe a short tail
  }
}

void registered_write_cancelled_in_flight(asio::io_context& io, socket& a, socket& b, std::size_t size) {
  auto data = random_bytes(size, 7);
  const registered_memory region = a.register_memory(data, verbs::access::none);
  const std::uint64_t direct_before = a.impl()->direct_bytes_written();
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::cancellation_signal signal;
    write_outcome outcome;
    a.async_write_some(asio::buffer(data),
                       asio::bind_cancellation_slot(signal.slot(), record_then_write_marker(a, outcome)));
    signal.emit(asio::cancellation_type::terminal);
    co_await expect_reported_then_marker(b, data, outcome);
    if (outcome->first) {
      BOOST_TEST((outcome->first == asio::error::operation_aborted), outcome->first.message());
      BOOST_TEST(outcome->second == 0u);
    }
    if (a.transport_in_use() == transport::rdma) {
      BOOST_TEST(!outcome->first, "the direct write was recalled: " << outcome->first.message());
      BOOST_TEST(outcome->second > 0u);
      BOOST_TEST(a.impl()->direct_bytes_written() - direct_before == outcome->second);
    }
  });
}

void close_aborts_pending_and_peer_sees_eof(asio::io_context& io, socket& a, socket& b,
                                            bool peer_notified) {
  error_code pending = asio::error::would_block, peer = asio::error::would_block;
  std::array<char, 8> buf_a, buf_b;
  a.async_read_some(asio::buffer(buf_a), [&](error_code ec, std::size_t) { pending = ec; });
  b.async_read_some(asio::buffer(buf_b), [&](error_code ec, std::size_t) { peer = ec; });
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  a.close();
  BOOST_TEST(!a.is_open());
  run_until(io, [&] {
    return pending != asio::error::would_block && (!peer_notified || peer != asio::error::would_block);
  });
  BOOST_TEST((pending == asio::error::operation_aborted), pending.message());
  if (peer_notified) {
    BOOST_TEST((peer == asio::error::eof), peer.message());
  } else {
    b.close();
    run_until(io, [&] { return peer != asio::error::would_block; });
    BOOST_TEST((peer == asio::error::operation_aborted), peer.message());
  }
}

void close_delivers_what_was_written(asio::io_context& io, socket& a, socket& b) {
  std::vector<std::byte> sent;
  std::array<std::byte, 4096> chunk;
  error_code last = asio::error::would_block;
  std::size_t last_n = 0;
  for (;;) {
    for (auto& c : chunk) c = static_cast<std::byte>(sent.size() % 251 + (&c - chunk.data()) % 251);
    last = asio::error::would_block;
    a.async_write_some(asio::buffer(chunk), [&](error_code ec, std::size_t n) { last = ec, last_n = n; });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    io.restart();
    while (last == asio::error::would_block && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(std::chrono::milliseconds(10));
    }
    if (last == asio::error::would_block) break;  // waits for room
    BOOST_TEST_REQUIRE(!last, last.message());
    sent.insert(sent.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(last_n));
    BOOST_TEST_REQUIRE(sent.size() < (std::size_t{256} << 20), "no write ever waited");
  }
  a.close();
  run_until(io, [&] { return last != asio::error::would_block; });
  BOOST_TEST_REQUIRE((last != asio::error::would_block), "the write waiting at close() never ended");
  // Aborted, or done just before: either way it reports the bytes that left.
  BOOST_TEST((!last || last == asio::error::operation_aborted), last.message());
  sent.insert(sent.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(last_n));
  std::vector<std::byte> received;
  error_code read = asio::error::would_block;
  asio::async_read(b, asio::dynamic_buffer(received), [&](error_code ec, std::size_t) { read = ec; });
  run_until(io, [&] { return read != asio::error::would_block; });
  if (read == asio::error::would_block) {  // no handler may outlive these locals
    b.close();
    run_until(io, [&] { return read != asio::error::would_block; });
  }
  BOOST_TEST((read == asio::error::eof), read.message());
  BOOST_TEST(received.size() == sent.size());
  BOOST_TEST((received == sent));
}

void shutdown_receive_ends_reads(asio::io_context& io, socket& a, socket& b) {
  std::array<char, 16> in{}, at_b{};
  error_code pending = asio::error::would_block;
  outcome read, received, wrote, got, empty, one_byte;
  const std::string hello = "hello";
  const close_on_exit guard(a, &b, io);
  a.async_read_some(asio::buffer(in), [&](error_code ec, std::size_t) { pending = ec; });
  io.restart();
  io.run_for(std::chrono::milliseconds(20));
  BOOST_TEST_REQUIRE((pending == asio::error::would_block), pending.message());
  a.shutdown(asio::socket_base::shutdown_receive);
  run_until(io, [&] { return pending != asio::error::would_block; });
  BOOST_TEST_REQUIRE((pending == asio::error::eof), pending.message());
  a.async_read_some(asio::buffer(in), record(read));
  a.async_receive(asio::buffer(in), record(received));
  a.async_write_some(asio::buffer(hello), record(wrote));
  b.async_read_some(asio::buffer(at_b), record(got));
  run_until(io, [&] { return read.done && received.done && wrote.done && got.done; });
  BOOST_TEST((read.ec == asio::error::eof), read.ec.message());
  BOOST_TEST((received.ec == asio::error::eof), received.ec.message());
  BOOST_TEST(!wrote.ec, wrote.ec.message());
  BOOST_TEST(!got.ec, got.ec.message());
  BOOST_TEST(got.value > 0u);
  BOOST_TEST(std::string(at_b.data(), got.value) == hello.substr(0, got.value));

  // Writing no bytes does nothing, as on a TCP socket, even once sending is shut down.
  a.shutdown(asio::socket_base::shutdown_send);
  a.async_write_some(asio::const_buffer(), record(empty));
  run_until(io, [&] { return empty.done; });
  BOOST_TEST(!empty.ec, empty.ec.message());
  error_code ec = asio::error::would_block;
  BOOST_TEST(a.write_some(asio::const_buffer(), ec) == 0u);
  BOOST_TEST(!ec, ec.message());
  a.async_write_some(asio::buffer(hello, 1), record(one_byte));
  run_until(io, [&] { return one_byte.done; });
  BOOST_TEST((one_byte.ec == asio::error::broken_pipe), one_byte.ec.message());
}

void lazy_operation_acts_on_the_socket_when_started(asio::io_context& io, socket& a, socket& b) {
  const std::string hello = "hello";
  std::array<char, 16> in{};
  auto write = b.async_write_some(asio::buffer(hello), asio::deferred);
  auto read = a.async_read_some(asio::buffer(in), asio::deferred);
  error_code wrote = asio::error::would_block, got = asio::error::would_block;
  std::size_t n = 0;
  std::move(read)([&](error_code ec, std::size_t k) { got = ec, n = k; });
  std::move(write)([&](error_code ec, std::size_t) { wrote = ec; });
  run_until(io, [&] { return wrote != asio::error::would_block && got != asio::error::would_block; });
  BOOST_TEST(!wrote, wrote.message());
  BOOST_TEST(!got, got.message());
  BOOST_TEST(std::string(in.data(), n) == hello.substr(0, n));
  BOOST_TEST(n > 0u);

  auto late = a.async_read_some(asio::buffer(in), asio::deferred);
  a.close();
  got = asio::error::would_block;
  std::move(late)([&](error_code ec, std::size_t k) { got = ec, n = k; });
  run_until(io, [&] { return got != asio::error::would_block; });
  BOOST_TEST((got == asio::error::bad_descriptor), got.message());
  BOOST_TEST(n == 0u);
}

/// An allocator that counts what it allocates, to show that a handler's own is used.
template <class T>
struct counting_allocator {
  using value_type = T;
  std::size_t* count;
  explicit counting_allocator(std::size_t* c) noexcept : count(c) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& other) noexcept : count(other.count) {}
  T* allocate(std::size_t n) {
    ++*count;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const counting_allocator<U>& other) const noexcept {
    return count == other.count;
  }
};

void small_writes_keep_asio_rules(asio::io_context& io, socket& a, socket& b) {
  const std::string text = "small";
  std::size_t stream_writes = 0, messages = 0;
  auto each_kind = [&](auto message_tag) {
    constexpr bool message = decltype(message_tag)::value;
    auto start = [&](auto&& token) {
      ++(message ? messages : stream_writes);
      if constexpr (message) {
        return a.async_send(asio::buffer(text), std::forward<decltype(token)>(token));
      } else {
        return a.async_write_some(asio::buffer(text), std::forward<decltype(token)>(token));
      }
    };
    BOOST_TEST_CONTEXT((message ? "async_send" : "async_write_some")) {
      std::optional<std::size_t> plain;
      start([&](error_code ec, std::size_t n) {
        BOOST_TEST(!ec, ec.message());
        plain = n;
      });
      BOOST_TEST(!plain.has_value(), "the handler ran inside the initiating function");
      run_until(io, [&] { return plain.has_value(); });
      BOOST_TEST((plain == text.size()));

      asio::io_context other;
      bool ran = false, on_other = false;
      start(asio::bind_executor(other, [&](error_code ec, std::size_t) {
        BOOST_TEST(!ec, ec.message());
        ran = true;
        on_other = other.get_executor().running_in_this_thread();
      }));
      // Until the handler is handed over, it counts as work of its own executor's context, as
      // with Asio's I/O objects: a thread that runs only that context must wait for it.
      BOOST_TEST(other.poll() == 0u);
      BOOST_TEST(!other.stopped(), "the handler's executor had no work: its run() would return");
      io.restart();
      io.run_for(std::chrono::milliseconds(50));
      BOOST_TEST(!ran, "the handler ran outside its own executor");
      other.run();
      BOOST_TEST((ran && on_other));

      std::size_t allocated = 0;
      bool done = false;
      start(asio::bind_allocator(counting_allocator<void>(&allocated),
                                 [&](error_code ec, std::size_t) { done = !ec; }));
      run_until(io, [&] { return done; });
      BOOST_TEST(done);
      BOOST_TEST(allocated > 0u, "the handler's own allocator was not used");

      auto lazy = start(asio::deferred);
      std::optional<std::size_t> later;
      std::move(lazy)([&](error_code ec, std::size_t n) {
        BOOST_TEST(!ec, ec.message());
        later = n;
      });
      run_until(io, [&] { return later.has_value(); });
      BOOST_TEST((later == text.size()));

      auto work = asio::make_work_guard(io);
      io.restart();
      std::thread runner([&] { io.run_for(std::chrono::seconds(20)); });
      std::future<std::size_t> future = start(asio::use_future);
      BOOST_TEST((future.wait_for(std::chrono::seconds(20)) == std::future_status::ready));
      BOOST_TEST(future.get() == text.size());
      work.reset();
      io.stop();
      runner.join();
    }
  };
  each_kind(std::false_type());
  each_kind(std::true_type());
  // Everything arrived, in order.
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    std::string bytes(stream_writes * text.size(), '\0');
    co_await asio::async_read(b, asio::buffer(bytes), asio::use_awaitable);
    BOOST_TEST(bytes == [&] {
      std::string all;
      for (std::size_t i = 0; i < stream_writes; ++i) all += text;
      return all;
    }());
    for (std::size_t i = 0; i < messages; ++i) {
      std::array<char, 64> in{};
      const std::size_t n = co_await b.async_receive(asio::buffer(in), asio::use_awaitable);
      BOOST_TEST(std::string(in.data(), n) == text);
    }
  });
  // So does a read that waits for data: its handler's context runs until the handler has run.
  asio::io_context other;
  std::array<char, 16> in{};
  std::optional<std::size_t> got;
  error_code got_error;  // tested here: Boost.Test is not for other threads
  b.async_read_some(asio::buffer(in), asio::bind_executor(other, [&](error_code ec, std::size_t n) {
                      got_error = ec;
                      got = n;
                    }));
  BOOST_TEST(other.poll() == 0u);
  BOOST_TEST(!other.stopped(), "a pending read's handler's executor had no work");
  a.async_write_some(asio::buffer(text), [](error_code, std::size_t) {});
  io.restart();
  std::thread runner([&] { other.run_for(std::chrono::seconds(30)); });  // returns once the handler ran
  run_until(io, [&] { return other.stopped(); });
  runner.join();
  BOOST_TEST(!got_error, got_error.message());
  BOOST_TEST((got == text.size()));
}

}  // namespace coverbs::test
