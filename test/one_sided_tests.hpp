// One-sided operation bodies shared by every transport: each takes a connected pair of
// sockets (a, b) and the io_context running them, so RDMA and TCP must give the very same
// results, error codes and after-effects.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "stream_tests.hpp"

namespace coverbs::test {

inline constexpr auto all_remote_rights =
    verbs::access::remote_read | verbs::access::remote_write | verbs::access::remote_atomic;

/// What one operation completed with; `done` stays false until it has.
struct outcome {
  bool done = false;
  error_code ec;
  std::uint64_t value = 0;
};

/// A completion handler that records into `o` (size and value signatures alike).
inline auto record(outcome& o) {
  return [&o](error_code ec, auto value) { o = {true, ec, static_cast<std::uint64_t>(value)}; };
}

/// Whether every operation recorded into `outcomes` has completed.
inline bool all_done(const std::vector<outcome>& outcomes) {
  return std::all_of(outcomes.begin(), outcomes.end(), [](const outcome& o) { return o.done; });
}

/// Runs `io` until `done()` holds, failing the test if it does not within `limit`.
template <class Predicate>
void run_until_done(asio::io_context& io, Predicate done,
                    std::chrono::seconds limit = std::chrono::seconds(60)) {
  io.restart();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && io.run_one_until(deadline) > 0) {
  }
  BOOST_REQUIRE_MESSAGE(done(), "operations did not complete within the time limit");
}

/// Runs `io` until nothing is left to run, 8 s at most (a close() that finishes leaves nothing):
/// how long that took.
inline std::chrono::milliseconds time_to_run_out(boost::asio::io_context& io) {
  const auto start = std::chrono::steady_clock::now();
  io.restart();
  io.run_for(std::chrono::seconds(8));
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

inline bool all_bytes(std::span<const std::byte> bytes, std::byte value) {
  return std::all_of(bytes.begin(), bytes.end(), [value](std::byte x) { return x == value; });
}

/// Memory of which only the middle is registered for the peer: the guards must never change.
class guarded_region {
 public:
  static constexpr std::size_t guard = 4096;
  static constexpr std::byte fill{0xee};

  guarded_region(socket& owner, std::size_t size, verbs::access rights)
      : bytes_(size + 2 * guard, fill), registration_(owner.register_memory(region(), rights)) {}

  std::span<std::byte> region() { return std::span(bytes_).subspan(guard, bytes_.size() - 2 * guard); }
  std::span<const std::byte> region() const {
    return std::span(bytes_).subspan(guard, bytes_.size() - 2 * guard);
  }
  remote_buffer remote() const { return registration_.remote(); }
  remote_buffer remote(std::size_t offset, std::size_t length) const {
    return registration_.remote(offset, length);
  }
  void deregister() { registration_ = registered_memory(); }

  bool guards_untouched() const {
    const std::span<const std::byte> all(bytes_);
    return all_bytes(all.first(guard), fill) && all_bytes(all.last(guard), fill);
  }
  bool untouched() const { return all_bytes(bytes_, fill); }
  std::uint64_t word(std::size_t offset) const {
    std::uint64_t value = 0;
    std::memcpy(&value, region().data() + offset, sizeof value);
    return value;
  }
  void set_word(std::size_t offset, std::uint64_t value) {
    std::memcpy(region().data() + offset, &value, sizeof value);
  }

 private:
  std::vector<std::byte> bytes_;
  registered_memory registration_;
};

/// Registered memory for the local side of operations; the peer gets no rights to it.
struct local_memory {
  static constexpr std::byte fill{0x11};
  std::vector<std::byte> bytes;
  registered_memory registration;

  local_memory(socket& owner, std::size_t size)
      : bytes(size, fill), registration(owner.register_memory(bytes, verbs::access::none)) {}
  verbs::local_buffer slice(std::size_t offset, std::size_t length) const {
    return registration.slice(offset, length);
  }
  std::uint64_t word(std::size_t offset) const {
    std::uint64_t value = 0;
    std::memcpy(&value, bytes.data() + offset, sizeof value);
    return value;
  }
  bool untouched() const { return all_bytes(bytes, fill); }
};

/// RDMA WRITE then READ of the same bytes; 3 MiB is more than one TCP frame.
inline void write_then_read_back(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t largest = 3u << 20;
  guarded_region target(b, largest, all_remote_rights);
  local_memory source(a, largest), back(a, largest);
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, largest}) {
    BOOST_TEST_CONTEXT("size " << size) {
      const auto data = random_bytes(size, static_cast<unsigned>(size) + 1);
      std::copy(data.begin(), data.end(), source.bytes.begin());
      outcome wrote;
      a.async_write(source.slice(0, size), target.remote(0, size), record(wrote));
      BOOST_TEST(!wrote.done);  // never inside the initiating function
      run_until_done(io, [&] { return wrote.done; });
      BOOST_TEST(!wrote.ec, wrote.ec.message());
      BOOST_TEST(wrote.value == size);
      BOOST_TEST(std::equal(data.begin(), data.end(), target.region().begin()));
      BOOST_TEST(target.guards_untouched());

      outcome read;
      a.async_read(back.slice(0, size), target.remote(0, size), record(read));
      run_until_done(io, [&] { return read.done; });
      BOOST_TEST(!read.ec, read.ec.message());
      BOOST_TEST(read.value == size);
      BOOST_TEST(std::equal(data.begin(), data.end(), back.bytes.begin()));
      BOOST_TEST(all_bytes(std::span(back.bytes).subspan(size), local_memory::fill));
    }
  }
  // A read from the middle of a region, into the middle of the local buffer.
  outcome read;
  a.async_read(back.slice(100, 5000), target.remote(7, 6000), record(read));
  run_until_done(io, [&] { return read.done; });
  BOOST_TEST(!read.ec, read.ec.message());
  BOOST_TEST(read.value == 5000u);
  BOOST_TEST(std::equal(back.bytes.begin() + 100, back.bytes.begin() + 5100, target.region().begin() + 7));
}

/// The peer's async_receive_immediate completes after the data is visible to it, whether it
/// waits already or asks later; immediates keep their order.
inline void write_with_immediate_shows_the_data_first(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t largest = 3u << 20;
  guarded_region target(b, largest, verbs::access::remote_write);
  local_memory source(a, largest);
  const std::pair<std::size_t, std::uint32_t> cases[] = {{0, 0x01020304}, {100, 0xdeadbeef}, {largest, 7}};
  for (const auto& [size, immediate] : cases) {
    BOOST_TEST_CONTEXT("size " << size) {
      const auto data = random_bytes(size, static_cast<unsigned>(size) + 5);
      std::copy(data.begin(), data.end(), source.bytes.begin());
      outcome wrote, received;
      bool visible = false;
      b.async_receive_immediate([&](error_code ec, std::uint32_t value) {
        received = {true, ec, value};
        visible = std::equal(data.begin(), data.end(), target.region().begin());
      });
      a.async_write_with_immediate(source.slice(0, size), target.remote(0, size), immediate, record(wrote));
      run_until_done(io, [&] { return wrote.done && received.done; });
      BOOST_TEST(!wrote.ec, wrote.ec.message());
      BOOST_TEST(wrote.value == size);
      BOOST_TEST(!received.ec, received.ec.message());
      BOOST_TEST(received.value == immediate);
      BOOST_TEST(visible);
      BOOST_TEST(target.guards_untouched());
    }
  }
  outcome first, second;
  a.async_write_with_immediate(source.slice(0, 8), target.remote(0, 8), 11, record(first));
  a.async_write_with_immediate(source.slice(0, 8), target.remote(8, 8), 12, record(second));
  run_until_done(io, [&] { return first.done && second.done; });
  BOOST_TEST(!first.ec);
  BOOST_TEST(!second.ec);
  for (const std::uint32_t expected : {11u, 12u}) {
    outcome got;
    b.async_receive_immediate(record(got));
    run_until_done(io, [&] { return got.done; });
    BOOST_TEST(!got.ec, got.ec.message());
    BOOST_TEST(got.value == expected);
  }
}

/// Atomics return the previous value, in the handler and in the 8-byte local buffer.
inline void atomics_return_the_previous_value(asio::io_context& io, socket& a, socket& b) {
  guarded_region target(b, 64, verbs::access::remote_atomic);
  target.set_word(8, 40);
  local_memory result(a, 16);
  auto run = [&](auto start) {
    outcome o;
    start(record(o));
    run_until_done(io, [&] { return o.done; });
    BOOST_TEST(!o.ec, o.ec.message());
    BOOST_TEST(result.word(0) == o.value);
    return o.value;
  };
  const auto local = result.slice(0, 8);
  const auto word = target.remote(8, 8);
  BOOST_TEST(run([&](auto h) { a.async_fetch_add(local, word, 2, h); }) == 40u);
  BOOST_TEST(target.word(8) == 42u);
  BOOST_TEST(run([&](auto h) { a.async_compare_swap(local, word, 42, 7, h); }) == 42u);  // swapped
  BOOST_TEST(target.word(8) == 7u);
  BOOST_TEST(run([&](auto h) { a.async_compare_swap(local, word, 42, 9, h); }) == 7u);  // compare failed
  BOOST_TEST(target.word(8) == 7u);
  BOOST_TEST(run([&](auto h) { a.async_fetch_add(local, word, ~std::uint64_t{0}, h); }) == 7u);  // wraps: -1
  BOOST_TEST(target.word(8) == 6u);
  BOOST_TEST(all_bytes(target.region().first(8), guarded_region::fill));
  BOOST_TEST(all_bytes(target.region().subspan(16), guarded_region::fill));
  BOOST_TEST(target.guards_untouched());
  BOOST_TEST(all_bytes(std::span(result.bytes).subspan(8), local_memory::fill));
}

namespace detail_one_sided {

// One direction of `operations_pipeline_both_ways`: many operations started at once, each
// checked when its handler runs, and the handlers' order recorded.
struct pipeline {
  static constexpr std::size_t bulk = 2u << 20;
  guarded_region target;
  local_memory local;
  std::vector<std::byte> data = random_bytes(bulk, 99);
  std::vector<int> order;
  std::vector<std::string> wrong;
  int started = 0;

  pipeline(socket& requester, socket& responder)
      : target(responder, bulk + 64, all_remote_rights), local(requester, 2 * bulk + 176) {
    std::copy(data.begin(), data.end(), local.bytes.begin());
    target.set_word(bulk, 1000);
  }

  auto expect(std::uint64_t value, std::function<bool()> check = {}) {
    const int index = started++;
    return [this, index, value, check](error_code ec, auto got) {
      order.push_back(index);
      if (ec || static_cast<std::uint64_t>(got) != value || (check && !check())) {
        wrong.push_back("operation " + std::to_string(index) + ": " + ec.message() + ", " +
                        std::to_string(got));
      }
    };
  }

  void start(socket& requester) {
    const auto word = target.remote(bulk, 8);
    requester.async_write(local.slice(0, bulk), target.remote(0, bulk), expect(bulk));
    // Ordered after the write on the same connection, so it reads what the write left.
    requester.async_read(local.slice(bulk, bulk), target.remote(0, bulk), expect(bulk, [this] {
                           return std::equal(data.begin(), data.end(), local.bytes.begin() + bulk);
                         }));
    // Each atomic has its own result word: the RDMA transport reads the value it hands to the
    // handler back from that word, so operations in flight together must not share one.
    for (std::uint64_t i = 0; i < 20; ++i) {
      requester.async_fetch_add(local.slice(2 * bulk + 8 * i, 8), word, 1, expect(1000 + i));
    }
    requester.async_compare_swap(local.slice(2 * bulk + 160, 8), word, 1020, 5, expect(1020));
    requester.async_write_with_immediate(local.slice(0, 64), target.remote(0, 64), 77, expect(64));
    requester.async_compare_swap(local.slice(2 * bulk + 168, 8), word, 1020, 6, expect(5));
  }
  bool done() const { return static_cast<int>(order.size()) == started; }
};

}  // namespace detail_one_sided

/// Both sides keep many mixed operations in flight at once, each side requester and responder
/// together: every handler sees its own result, in the order the operations were started.
inline void operations_pipeline_both_ways(asio::io_context& io, socket& a, socket& b) {
  detail_one_sided::pipeline ab(a, b), ba(b, a);
  ab.start(a);
  ba.start(b);
  outcome imm_b, imm_a;
  b.async_receive_immediate(record(imm_b));
  a.async_receive_immediate(record(imm_a));
  run_until_done(io, [&] { return ab.done() && ba.done() && imm_a.done && imm_b.done; });
  for (auto* p : {&ab, &ba}) {
    std::vector<int> expected(static_cast<std::size_t>(p->started));
    std::iota(expected.begin(), expected.end(), 0);
    BOOST_TEST(p->order == expected, boost::test_tools::per_element());
    for (const auto& w : p->wrong) BOOST_ERROR(w);
    BOOST_TEST(p->target.word(detail_one_sided::pipeline::bulk) == 5u);
    BOOST_TEST(p->target.guards_untouched());
  }
  BOOST_TEST((imm_b.value == 77u && !imm_b.ec));
  BOOST_TEST((imm_a.value == 77u && !imm_a.ec));
}

/// Both sides stream more to each other than the connection's buffers hold while they read
/// each other's memory: neither may stop taking the other's bytes until its own answers are out
/// (over TCP, a side whose answers queued behind its stream write stopped reading, and two such
/// peers waited for each other).
inline void reads_beside_streams_both_ways(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t streamed = 16u << 20, chunk = 1u << 20, reads = 24, size = chunk * reads;
  guarded_region at_a(a, size, all_remote_rights), at_b(b, size, all_remote_rights);
  const auto data_a = random_bytes(size, 31), data_b = random_bytes(size, 37);
  std::copy(data_a.begin(), data_a.end(), at_a.region().begin());
  std::copy(data_b.begin(), data_b.end(), at_b.region().begin());
  local_memory into_a(a, size), into_b(b, size);
  const auto out_a = random_bytes(streamed, 41), out_b = random_bytes(streamed, 43);
  std::vector<std::byte> in_a(streamed), in_b(streamed);
  std::vector<outcome> done(4 + 2 * reads);
  asio::async_write(a, asio::buffer(out_a), record(done[0]));
  asio::async_write(b, asio::buffer(out_b), record(done[1]));
  for (std::size_t i = 0; i < reads; ++i) {
    a.async_read(into_a.slice(i * chunk, chunk), at_b.remote(i * chunk, chunk), record(done[4 + i]));
    b.async_read(into_b.slice(i * chunk, chunk), at_a.remote(i * chunk, chunk), record(done[4 + reads + i]));
  }
  asio::async_read(a, asio::buffer(in_a), record(done[2]));
  asio::async_read(b, asio::buffer(in_b), record(done[3]));
  run_until_done(
      io, [&] { return all_done(done); }, std::chrono::seconds(120));
  for (std::size_t i = 0; i < done.size(); ++i) {
    const std::uint64_t expected = i < 4 ? streamed : chunk;
    BOOST_TEST((!done[i].ec && done[i].value == expected),
               i << ": " << done[i].ec.message() << ", " << done[i].value);
  }
  BOOST_TEST((in_a == out_b));
  BOOST_TEST((in_b == out_a));
  BOOST_TEST(std::equal(data_b.begin(), data_b.end(), into_a.bytes.begin()));
  BOOST_TEST(std::equal(data_a.begin(), data_a.end(), into_b.bytes.begin()));
}

namespace detail_one_sided {

// More one-sided writes of a word each than the TCP fallback keeps unanswered, all started at
// once: what a SEND or the end of the stream started after them must find in place.
struct many_writes {
  static constexpr std::size_t writes = 40;
  guarded_region target;
  local_memory words;
  std::vector<outcome> wrote = std::vector<outcome>(writes);
  std::uint64_t first;

  many_writes(socket& a, socket& b, std::uint64_t first_value)
      : target(b, 8 * writes, all_remote_rights), words(a, 8 * writes), first(first_value) {
    for (std::size_t i = 0; i < writes; ++i) {
      const std::uint64_t value = first + i;
      std::memcpy(words.bytes.data() + 8 * i, &value, sizeof value);
    }
    for (std::size_t i = 0; i < writes; ++i) {
      a.async_write(words.slice(8 * i, 8), target.remote(8 * i, 8), record(wrote[i]));
    }
  }
  std::size_t in_place() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < writes; ++i) n += target.word(8 * i) == first + i ? 1 : 0;
    return n;
  }
  std::size_t in_place_on_arrival = 0;
  /// A handler for what the peer reads or receives after the writes: it records `o` and how
  /// many writes were in place by then.
  auto arrival(outcome& o) {
    return [this, &o](error_code ec, std::size_t n) {
      o = {true, ec, n};
      in_place_on_arrival = in_place();
    };
  }
  void check() {
    for (const outcome& o : wrote) BOOST_TEST(!o.ec, o.ec.message());
    BOOST_TEST(target.guards_untouched());
  }
};

}  // namespace detail_one_sided

/// A message sent after many one-sided writes finds all of them in place when it arrives, as a
/// reliable connection delivers a queue pair's requests in order.
inline void message_after_many_writes(asio::io_context& io, socket& a, socket& b) {
  detail_one_sided::many_writes w(a, b, 1000);
  outcome sent, received;
  std::array<char, 8> message{};
  b.async_receive(asio::buffer(message), w.arrival(received));
  a.async_send(asio::buffer("after", 5), record(sent));
  run_until_done(io, [&] { return all_done(w.wrote) && sent.done && received.done; });
  BOOST_TEST((!received.ec && received.value == 5u), received.ec.message());
  BOOST_TEST(w.in_place_on_arrival == w.writes);
  w.check();
}

/// So does one sent without blocking: a send that found the writes unsent (would_block) and
/// waited for wait_write goes out behind them.
inline void nonblocking_message_after_many_writes(asio::io_context& io, socket& a, socket& b) {
  detail_one_sided::many_writes w(a, b, 3000);
  outcome received;
  std::array<char, 8> message{};
  b.async_receive(asio::buffer(message), w.arrival(received));
  a.non_blocking(true);
  error_code ec;
  std::size_t sent = a.send(asio::buffer("after", 5), 0, ec);
  while (ec == asio::error::would_block) {
    outcome writable;
    a.async_wait(asio::socket_base::wait_write, [&](error_code e) { writable = {true, e, 0}; });
    run_until_done(io, [&] { return writable.done; });
    BOOST_TEST_REQUIRE(!writable.ec, writable.ec.message());
    sent = a.send(asio::buffer("after", 5), 0, ec);
  }
  BOOST_TEST((!ec && sent == 5u), ec.message());
  run_until_done(io, [&] { return all_done(w.wrote) && received.done; });
  BOOST_TEST((!received.ec && received.value == 5u), received.ec.message());
  BOOST_TEST(w.in_place_on_arrival == w.writes);
  w.check();
}

/// The end of the stream, too, comes after the writes started before it: the peer that reads
/// eof finds all of them in place.
inline void end_of_stream_after_many_writes(asio::io_context& io, socket& a, socket& b) {
  detail_one_sided::many_writes w(a, b, 2000);
  a.shutdown(asio::socket_base::shutdown_send);
  outcome end;
  std::array<char, 8> buf{};
  b.async_read_some(asio::buffer(buf), w.arrival(end));
  run_until_done(io, [&] { return all_done(w.wrote) && end.done; });
  BOOST_TEST((end.ec == asio::error::eof), end.ec.message());
  BOOST_TEST(w.in_place_on_arrival == w.writes);
  w.check();
}

/// ... and after writes with immediate that wait for the peer's receive buffers (over RDMA,
/// for credits: more of them than the peer's pool of 32): the peer takes every immediate, each
/// with its write in place, before its immediates and its reads end with eof.
inline void end_of_stream_after_writes_with_immediate(asio::io_context& io, socket& a, socket& b) {
  constexpr std::uint32_t writes = 100;
  guarded_region target(b, 8 * writes, all_remote_rights);
  local_memory words(a, 8 * writes);
  std::vector<outcome> wrote(writes);
  for (std::uint32_t i = 0; i < writes; ++i) {
    const std::uint64_t value = 7000 + i;
    std::memcpy(words.bytes.data() + 8 * i, &value, sizeof value);
    a.async_write_with_immediate(words.slice(8 * i, 8), target.remote(8 * i, 8), i, record(wrote[i]));
  }
  a.shutdown(asio::socket_base::shutdown_send);
  std::vector<std::uint32_t> taken;
  std::size_t in_place = 0;
  outcome immediates_ended, end;
  std::function<void()> take = [&] {
    b.async_receive_immediate([&](error_code ec, std::uint32_t value) {
      if (ec) {
        immediates_ended = {true, ec, 0};
        return;
      }
      taken.push_back(value);
      in_place += target.word(8 * value) == 7000 + value ? 1 : 0;
      take();
    });
  };
  take();
  std::array<char, 8> buf{};
  b.async_read_some(asio::buffer(buf), record(end));
  run_until_done(io, [&] { return all_done(wrote) && end.done && immediates_ended.done; });
  BOOST_TEST((end.ec == asio::error::eof), end.ec.message());
  BOOST_TEST((immediates_ended.ec == asio::error::eof), immediates_ended.ec.message());
  std::vector<std::uint32_t> expected(writes);
  std::iota(expected.begin(), expected.end(), 0u);
  BOOST_TEST(taken == expected, boost::test_tools::per_element());
  BOOST_TEST(in_place == std::size_t{writes});
  for (const outcome& o : wrote) BOOST_TEST(!o.ec, o.ec.message());
  BOOST_TEST(target.guards_untouched());
}

/// A message waits only for the operations started before it: one sent beside more operations
/// in flight than the TCP fallback's window, each restarted from its handler, still goes out.
inline void message_beside_endless_operations(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t lanes = 32;
  guarded_region counter(b, 8, all_remote_rights);
  counter.set_word(0, 0);
  local_memory results(a, 8 * lanes);
  bool stop = false;
  std::size_t running = lanes, completed = 0;
  std::vector<std::string> wrong;
  std::function<void(std::size_t)> lane = [&](std::size_t i) {
    a.async_fetch_add(results.slice(8 * i, 8), counter.remote(0, 8), 1, [&, i](error_code ec, std::uint64_t) {
      if (ec) wrong.push_back(ec.message());
      ++completed;
      if (stop || ec) return void(--running);
      lane(i);
    });
  };
  for (std::size_t i = 0; i < lanes; ++i) lane(i);
  outcome sent, received;
  std::array<char, 8> message{};
  b.async_receive(asio::buffer(message), record(received));
  // Started once the lanes are going, so that operations are started after it too.
  run_until_done(io, [&] { return completed >= 2 * lanes; });
  a.async_send(asio::buffer("beside", 6), record(sent));
  run_until_done(io, [&] { return sent.done && received.done; });
  stop = true;
  run_until_done(io, [&] { return running == 0; });
  BOOST_TEST((!sent.ec && !received.ec && received.value == 6u), sent.ec.message()
                                                                     << ", " << received.ec.message());
  BOOST_TEST(wrong.empty());
  BOOST_TEST(counter.word(0) == completed);
}

/// The end of the stream waits only for what was started before it: lanes of writes with
/// immediate, more at a time than the peer's receive buffers and each restarted from its
/// handler (so that over RDMA some always wait for credits), go on past shutdown(send), and
/// those started after it do not keep the peer from reading eof.
inline void end_of_stream_beside_endless_writes_with_immediate(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t lanes = 64;
  guarded_region target(b, 8 * lanes, all_remote_rights);
  local_memory words(a, 8 * lanes);
  bool stop = false;
  std::size_t running = lanes, completed = 0;
  std::vector<std::string> wrong;
  std::function<void(std::size_t)> lane = [&](std::size_t i) {
    a.async_write_with_immediate(words.slice(8 * i, 8), target.remote(8 * i, 8),
                                 static_cast<std::uint32_t>(i), [&, i](error_code ec, std::size_t) {
                                   if (ec) wrong.push_back(ec.message());
                                   ++completed;
                                   if (stop || ec) return void(--running);
                                   lane(i);
                                 });
  };
  for (std::size_t i = 0; i < lanes; ++i) lane(i);
  std::function<void()> take = [&] {
    b.async_receive_immediate([&](error_code ec, std::uint32_t) {
      if (!ec) take();
    });
  };
  take();
  outcome end;
  std::array<char, 8> buf{};
  b.async_read_some(asio::buffer(buf), record(end));
  run_until_done(io, [&] { return completed >= 2 * lanes; });
  a.shutdown(asio::socket_base::shutdown_send);
  run_until_done(io, [&] { return end.done; });
  stop = true;
  run_until_done(io, [&] { return running == 0; });
  BOOST_TEST((end.ec == asio::error::eof), end.ec.message());
  BOOST_TEST(completed >= lanes);
  BOOST_TEST(wrong.empty());
}

/// Ways to ask for memory the peer did not grant; each is `wc_errc::remote_access`.
enum class violation {
  wrong_rkey,
  write_past_the_end,
  write_past_the_end_in_parts,  ///< a write longer than one TCP frame whose first part is in bounds
  read_past_the_end_in_parts,   ///< a read likewise
  read_before_the_start,
  write_without_remote_write,
  read_without_remote_read,
  atomic_without_remote_atomic,
  atomic_past_the_end,
  deregistered,
};

inline verbs::access rights_for(violation v) {
  using verbs::access;
  switch (v) {
    case violation::write_without_remote_write: return access::remote_read | access::remote_atomic;
    case violation::read_without_remote_read: return access::remote_write | access::remote_atomic;
    case violation::atomic_without_remote_atomic: return access::remote_read | access::remote_write;
    default: return all_remote_rights;
  }
}

/// The violated region's size: an operation in parts needs more than one TCP frame (1 MiB).
inline std::size_t target_size(violation v) {
  const bool in_parts =
      v == violation::write_past_the_end_in_parts || v == violation::read_past_the_end_in_parts;
  return in_parts ? std::size_t{2} << 20 : 4096;
}

inline void start_violation(violation v, socket& a, const local_memory& local, guarded_region& target,
                            outcome& result) {
  switch (v) {
    case violation::wrong_rkey: {
      remote_buffer wrong = target.remote();
      wrong.rkey ^= 0x5a5a;
      return a.async_write(local.slice(0, 1024), wrong, record(result));
    }
    case violation::write_past_the_end: {
      // A descriptor that claims more than was registered: the responder checks, not the library.
      remote_buffer beyond = target.remote(2048, 2048);
      beyond.length = 8192;
      return a.async_write(local.slice(0, 8192), beyond, record(result));
    }
    case violation::write_past_the_end_in_parts: {
      // Its first MiB is in bounds: a responder that checked each part alone would take it.
      remote_buffer beyond = target.remote(std::size_t{1} << 20, std::size_t{1} << 20);
      beyond.length = std::uint32_t{2} << 20;
      return a.async_write(local.slice(0, std::size_t{2} << 20), beyond, record(result));
    }
    case violation::read_past_the_end_in_parts: {
      // A device checks the whole length before it answers any of it: no part may arrive.
      remote_buffer beyond = target.remote(std::size_t{1} << 20, std::size_t{1} << 20);
      beyond.length = std::uint32_t{2} << 20;
      return a.async_read(local.slice(0, std::size_t{2} << 20), beyond, record(result));
    }
    case violation::read_before_the_start: {
      remote_buffer before = target.remote();
      before.address -= 64;
      return a.async_read(local.slice(0, 128), before, record(result));
    }
    case violation::write_without_remote_write:
      return a.async_write(local.slice(0, 512), target.remote(0, 512), record(result));
    case violation::read_without_remote_read:
      return a.async_read(local.slice(0, 512), target.remote(0, 512), record(result));
    case violation::atomic_without_remote_atomic:
      return a.async_fetch_add(local.slice(0, 8), target.remote(0, 8), 1, record(result));
    case violation::atomic_past_the_end: {
      remote_buffer end = target.remote(4088, 8);
      end.address += 8;
      return a.async_compare_swap(local.slice(0, 8), end, 0, 1, record(result));
    }
    case violation::deregistered: {
      const remote_buffer stale = target.remote(0, 256);
      target.deregister();
      return a.async_write(local.slice(0, 256), stale, record(result));
    }
  }
}

/// A refused operation completes with remote_access and touches no byte, and the connection
/// then fails on both sides as both RC queue pairs go to the error state: the operation behind
/// it and later ones are flushed, streams end, and the peer's own operations are flushed too.
inline void refused_operation_fails_the_connection(asio::io_context& io, socket& a, socket& b, violation v) {
  guarded_region target(b, target_size(v), rights_for(v));
  guarded_region spare_at_b(b, 4096, all_remote_rights), spare_at_a(a, 4096, all_remote_rights);
  local_memory local(a, 2 * target_size(v)), local_b(b, 64);
  std::array<char, 8> buf_a{}, buf_b{};
  outcome b_read, refused, behind;
  b.async_read_some(asio::buffer(buf_b), record(b_read));  // waits for stream bytes throughout
  start_violation(v, a, local, target, refused);
  a.async_write(local.slice(0, 64), spare_at_b.remote(0, 64), record(behind));
  BOOST_TEST(!refused.done);
  run_until_done(io, [&] { return refused.done && behind.done; });
  BOOST_TEST((refused.ec == make_error_code(wc_errc::remote_access)), refused.ec.message());
  BOOST_TEST((refused.ec == std::errc::permission_denied));
  BOOST_TEST(refused.value == 0u);
  BOOST_TEST((behind.ec == make_error_code(wc_errc::flushed)), behind.ec.message());
  BOOST_TEST(behind.value == 0u);
  BOOST_TEST(target.untouched());
  BOOST_TEST(spare_at_b.untouched());
  BOOST_TEST(local.untouched());

  outcome later_a, later_b, a_read, a_write, b_write, imm_a, imm_b;
  a.async_write(local.slice(0, 64), spare_at_b.remote(0, 64), record(later_a));
  b.async_write(local_b.slice(0, 64), spare_at_a.remote(0, 64), record(later_b));
  a.async_read_some(asio::buffer(buf_a), record(a_read));
  a.async_write_some(asio::buffer("x", 1), record(a_write));
  b.async_write_some(asio::buffer("y", 1), record(b_write));
  a.async_receive_immediate(record(imm_a));
  run_until_done(io, [&] {
    return later_a.done && later_b.done && a_read.done && a_write.done && b_write.done && imm_a.done &&
           b_read.done;
  });
  b.async_receive_immediate(record(imm_b));
  run_until_done(io, [&] { return imm_b.done; });
  BOOST_TEST((later_a.ec == make_error_code(wc_errc::flushed)), later_a.ec.message());
  BOOST_TEST((later_b.ec == make_error_code(wc_errc::flushed)), later_b.ec.message());
  BOOST_TEST((a_read.ec == asio::error::eof), a_read.ec.message());
  BOOST_TEST((b_read.ec == asio::error::eof), b_read.ec.message());
  BOOST_TEST((a_write.ec == asio::error::broken_pipe), a_write.ec.message());
  BOOST_TEST((b_write.ec == asio::error::broken_pipe), b_write.ec.message());
  BOOST_TEST((imm_a.ec == asio::error::eof), imm_a.ec.message());
  BOOST_TEST((imm_b.ec == asio::error::eof), imm_b.ec.message());
  BOOST_TEST(spare_at_b.untouched());
  BOOST_TEST(spare_at_a.untouched());
  BOOST_TEST(target.untouched());
}

/// Ways to give an operation a local buffer that its connection did not register, which the
/// device checks as it reads or writes that buffer: each is `wc_errc::local_protection`.
enum class local_violation {
  deregistered_source,         ///< a write from memory deregistered before it started
  source_past_the_end,         ///< a write from bytes running past its registration
  wrong_key_target,            ///< a read into registered memory, under a key it does not have
  atomic_result_past_the_end,  ///< an atomic whose result would land just past a registration
};

/// A request whose local buffer fails that check completes with local_protection, touching no
/// local byte, after the request started before it and before the one behind it, which is
/// flushed; this side's streams end, as its queue pair is in error. A write sends nothing; an
/// atomic fails only once its result is back, so the peer has applied it.
inline void local_violation_fails_the_connection(asio::io_context& io, socket& a, socket& b,
                                                 local_violation v) {
  guarded_region target(b, 4096, all_remote_rights), spare(b, 64, all_remote_rights);
  local_memory local(a, 4096), good(a, 64);
  std::fill(target.region().begin(), target.region().end(), std::byte{0x5a});
  outcome before, bad, after;
  a.async_write(good.slice(0, 64), spare.remote(0, 64), record(before));
  switch (v) {
    case local_violation::deregistered_source: {
      const verbs::local_buffer stale = local.slice(0, 256);
      local.registration = registered_memory();
      a.async_write(stale, target.remote(0, 256), record(bad));
      break;
    }
    case local_violation::source_past_the_end:
      a.async_write({local.bytes.data() + 4000, 256, local.slice(0, 0).lkey}, target.remote(0, 256),
                    record(bad));
      break;
    case local_violation::wrong_key_target: {
      verbs::local_buffer forged = local.slice(0, 64);
      forged.lkey ^= 0x80;  // rxe's key byte; over TCP a random key's bit
      a.async_read(forged, target.remote(0, 64), record(bad));
      break;
    }
    case local_violation::atomic_result_past_the_end: {
      verbs::local_buffer past = local.slice(4088, 8);
      past.data = static_cast<std::byte*>(past.data) + 8;
      a.async_fetch_add(past, target.remote(0, 8), 1, record(bad));
      break;
    }
  }
  a.async_write(good.slice(0, 8), spare.remote(0, 8), record(after));
  run_until_done(io, [&] { return before.done && bad.done && after.done; });
  BOOST_TEST(!before.ec, before.ec.message());
  // Soft-RoCE answers a send-side lkey it does not know with a local QP operation error (its
  // copy_data fails with EINVAL there; bounds with EFAULT, a protection error); the IB spec,
  // mlx5 and the TCP fallback with a local protection error.
  const bool unknown_source_key =
      v == local_violation::deregistered_source && a.transport_in_use() == transport::rdma;
  BOOST_TEST((bad.ec == make_error_code(wc_errc::local_protection) ||
              (unknown_source_key && bad.ec == make_error_code(wc_errc::local_qp_operation))),
             bad.ec.message());
  BOOST_TEST(bad.value == 0u);
  BOOST_TEST((after.ec == make_error_code(wc_errc::flushed)), after.ec.message());
  std::uint64_t first_word = 0x5a5a5a5a5a5a5a5a;
  if (v == local_violation::atomic_result_past_the_end) ++first_word;
  BOOST_TEST(target.word(0) == first_word);
  BOOST_TEST(all_bytes(target.region().subspan(8), std::byte{0x5a}));
  BOOST_TEST(target.guards_untouched());
  BOOST_TEST(local.untouched());

  std::array<char, 8> buf{};
  outcome read, wrote, later;
  a.async_read_some(asio::buffer(buf), record(read));
  a.async_write_some(asio::buffer("x", 1), record(wrote));
  a.async_write(good.slice(0, 8), spare.remote(0, 8), record(later));
  run_until_done(io, [&] { return read.done && wrote.done && later.done; });
  BOOST_TEST((read.ec == asio::error::eof), read.ec.message());
  BOOST_TEST((wrote.ec == asio::error::broken_pipe), wrote.ec.message());
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
}

/// Arguments the requester can see are wrong are refused before anything is sent, with the
/// handler posted, and the connection stays fully usable.
inline void bad_arguments_are_refused_locally(asio::io_context& io, socket& a, socket& b) {
  guarded_region target(b, 4096, all_remote_rights);
  local_memory local(a, 256);
  std::vector<outcome> results(7);
  a.async_write(local.slice(0, 128), target.remote(0, 64), record(results[0]));
  a.async_read(local.slice(0, 128), target.remote(0, 64), record(results[1]));
  a.async_write_with_immediate(local.slice(0, 128), target.remote(0, 64), 1, record(results[2]));
  a.async_fetch_add(local.slice(0, 4), target.remote(0, 8), 1, record(results[3]));
  a.async_compare_swap(local.slice(0, 8), target.remote(0, 4), 0, 1, record(results[4]));
  a.async_fetch_add(local.slice(0, 8), target.remote(4, 8), 1, record(results[5]));
  a.async_compare_swap(local.slice(4, 8), target.remote(0, 8), 0, 1, record(results[6]));
  BOOST_TEST(std::none_of(results.begin(), results.end(), [](const outcome& o) { return o.done; }));
  run_until_done(io, [&] { return all_done(results); });
  for (std::size_t i = 0; i < results.size(); ++i) {
    BOOST_TEST_CONTEXT("operation " << i) {
      const auto expected =
          i < 5 ? make_error_code(errc::buffer_too_small) : make_error_code(errc::misaligned_atomic);
      BOOST_TEST((results[i].ec == expected), results[i].ec.message());
      BOOST_TEST(results[i].value == 0u);
    }
  }
  BOOST_TEST(target.untouched());
  BOOST_TEST(local.untouched());

  // A refused write with immediate takes none of the peer's receive buffers: twice as many
  // refusals as the peer has buffers leave the stream and messages going (over RDMA each took
  // a credit for good, and the 33rd waited for one for ever).
  std::vector<outcome> refused(64);
  for (auto& r : refused)
    a.async_write_with_immediate(local.slice(0, 128), target.remote(0, 64), 1, record(r));
  run_until_done(io, [&] { return all_done(refused); });
  BOOST_TEST(std::all_of(refused.begin(), refused.end(),
                         [](const outcome& o) { return o.ec == make_error_code(errc::buffer_too_small); }));

  outcome wrote, added;
  local.bytes[0] = std::byte{0x42};
  a.async_write(local.slice(0, 64), target.remote(0, 64), record(wrote));
  a.async_fetch_add(local.slice(8, 8), target.remote(64, 8), 1, record(added));
  run_until_done(io, [&] { return wrote.done && added.done; });
  BOOST_TEST(!wrote.ec, wrote.ec.message());
  BOOST_TEST(!added.ec, added.ec.message());
  BOOST_TEST((target.region()[0] == std::byte{0x42}));
  BOOST_TEST(added.value == 0xeeeeeeeeeeeeeeeeu);
  bulk_both_ways(io, a, b, 4096);
}

/// A READ, WRITE or WRITE with immediate of no bytes reaches no memory, so the responder checks
/// no key or address for it (InfiniBand's rule C9-88, as rxe does): each succeeds against a
/// key nobody registered, the immediate arrives, and the connection goes on.
inline void zero_length_operations_need_no_key(asio::io_context& io, socket& a, socket& b) {
  guarded_region target(b, 4096, all_remote_rights);  // b answers requests (TCP: it reads)
  local_memory local(a, 64);
  const remote_buffer nowhere{.address = 0x1000, .rkey = target.remote(0, 8).rkey + 1, .length = 0};
  std::vector<outcome> results(3);
  outcome immediate;
  b.async_receive_immediate(record(immediate));
  a.async_write(local.slice(0, 0), nowhere, record(results[0]));
  a.async_read(local.slice(0, 0), nowhere, record(results[1]));
  a.async_write_with_immediate(local.slice(0, 0), remote_buffer{}, 7, record(results[2]));
  run_until_done(io, [&] { return all_done(results) && immediate.done; });
  for (std::size_t i = 0; i < results.size(); ++i) {
    BOOST_TEST_CONTEXT("operation " << i) {
      BOOST_TEST(!results[i].ec, results[i].ec.message());
      BOOST_TEST(results[i].value == 0u);
    }
  }
  BOOST_TEST(!immediate.ec, immediate.ec.message());
  BOOST_TEST(immediate.value == 7u);
  BOOST_TEST(target.untouched());
  BOOST_TEST(local.untouched());
  bulk_both_ways(io, a, b, 4096);
}

/// Shutting down the sending side ends the peer's stream only: one-sided operations keep
/// working in both directions, and so does the peer's stream towards the side that shut down.
inline void one_sided_after_shutdown(asio::io_context& io, socket& a, socket& b) {
  guarded_region at_b(b, 4096, all_remote_rights), at_a(a, 4096, all_remote_rights);
  local_memory local_a(a, 64), local_b(b, 64);
  a.shutdown(asio::socket_base::shutdown_send);
  std::array<char, 8> buf{};
  outcome eof, wrote, read, sent, got, imm;
  b.async_read_some(asio::buffer(buf), record(eof));
  run_until_done(io, [&] { return eof.done; });
  BOOST_TEST((eof.ec == asio::error::eof), eof.ec.message());

  local_a.bytes[0] = std::byte{1};
  at_a.region()[0] = std::byte{2};
  a.async_write(local_a.slice(0, 64), at_b.remote(0, 64), record(wrote));
  b.async_read(local_b.slice(0, 64), at_a.remote(0, 64), record(read));
  a.async_write_with_immediate(local_a.slice(0, 8), at_b.remote(64, 8), 5, record(imm));
  b.async_write_some(asio::buffer("z", 1), record(sent));
  a.async_read_some(asio::buffer(buf), record(got));
  run_until_done(io, [&] { return wrote.done && read.done && sent.done && got.done && imm.done; });
  BOOST_TEST(!wrote.ec, wrote.ec.message());
  BOOST_TEST(!read.ec, read.ec.message());
  BOOST_TEST(!imm.ec, imm.ec.message());
  BOOST_TEST(!sent.ec, sent.ec.message());
  BOOST_TEST(!got.ec, got.ec.message());
  BOOST_TEST((at_b.region()[0] == std::byte{1}));
  BOOST_TEST((local_b.bytes[0] == std::byte{2}));
  BOOST_TEST(buf[0] == 'z');
  outcome immediate;
  b.async_receive_immediate(record(immediate));
  run_until_done(io, [&] { return immediate.done; });
  BOOST_TEST(!immediate.ec, immediate.ec.message());
  BOOST_TEST(immediate.value == 5u);
}

/// Runs one one-sided WRITE from `local` to `spare` to its end: over TCP the peer's hello has
/// then arrived, so operations started afterwards go out as soon as the window lets them (an
/// RDMA queue pair is connected before the socket is).
inline void one_round_trip(asio::io_context& io, socket& a, const local_memory& local,
                           const guarded_region& spare) {
  outcome done;
  a.async_write(local.slice(0, 8), spare.remote(0, 8), record(done));
  run_until_done(io, [&] { return done.done; });
  BOOST_TEST_REQUIRE(!done.ec, done.ec.message());
}

/// A partial or total cancel promises to leave the connection as it was: of many one-sided
/// writes, those still waiting to go out (beyond an RDMA send queue's depth, or the TCP
/// fallback's window) are withdrawn, ending with operation_aborted having written nothing, and
/// those under way complete. A message sent after all of them does not wait for the withdrawn
/// ones, and arrives after the others have landed. The connection goes on.
inline void cancel_withdraws_operations_not_sent(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t count = 256, chunk = 1024;  // more than either transport has under way
  guarded_region target(b, count * chunk, all_remote_rights), spare(b, 64, all_remote_rights);
  local_memory local(a, count * chunk);
  one_round_trip(io, a, local, spare);
  auto landed = [&](std::size_t i) {
    return all_bytes(target.region().subspan(i * chunk, chunk), local.fill);
  };
  std::vector<outcome> results(count);
  std::vector<asio::cancellation_signal> signals(count);
  for (std::size_t i = 0; i < count; ++i) {
    a.async_write(local.slice(i * chunk, chunk), target.remote(i * chunk, chunk),
                  asio::bind_cancellation_slot(signals[i].slot(), record(results[i])));
  }
  outcome sent, received, again;
  std::array<char, 8> got{};
  std::vector<bool> landed_first(count);
  const close_on_exit guard(a, &b, io);
  a.async_send(asio::buffer("after", 5), record(sent));
  b.async_receive(asio::buffer(got), [&](error_code ec, std::size_t n) {
    received = {true, ec, n};
    for (std::size_t i = 0; i < count; ++i) landed_first[i] = landed(i);
  });
  for (std::size_t i = 0; i < count; ++i) {
    signals[i].emit(i % 2 == 0 ? asio::cancellation_type::total : asio::cancellation_type::partial);
  }
  BOOST_TEST(std::none_of(results.begin(), results.end(), [](const outcome& o) { return o.done; }));
  run_until_done(io, [&] { return all_done(results) && sent.done && received.done; });
  BOOST_TEST(!sent.ec, sent.ec.message());
  BOOST_TEST(!received.ec, received.ec.message());
  BOOST_TEST(std::string(got.data(), received.value) == "after");
  std::size_t completed = 0, withdrawn = 0;
  for (std::size_t i = 0; i < count; ++i) {
    BOOST_TEST_CONTEXT("write " << i) {
      if (!results[i].ec) {
        ++completed;
        BOOST_TEST(results[i].value == chunk);
        BOOST_TEST(landed_first[i]);  // before the message
      } else {
        ++withdrawn;
        BOOST_TEST((results[i].ec == asio::error::operation_aborted), results[i].ec.message());
        BOOST_TEST(all_bytes(target.region().subspan(i * chunk, chunk), guarded_region::fill));
      }
    }
  }
  BOOST_TEST_MESSAGE(completed << " writes completed, " << withdrawn << " withdrawn");
  BOOST_TEST(completed > 0u);
  BOOST_TEST(withdrawn > 0u);
  BOOST_TEST(target.guards_untouched());
  a.async_write(local.slice(0, count * chunk), target.remote(), record(again));
  run_until_done(io, [&] { return again.done; });
  BOOST_TEST(!again.ec, again.ec.message());
  BOOST_TEST(landed(count - 1));
  bulk_both_ways(io, a, b, 4096);
}

/// The same for writes with immediate: beyond the peer's receive credits (RDMA) or the window
/// (TCP) they wait, and a cancel withdraws them. The peer gets the immediates of those that
/// completed, in order, and none of a withdrawn one, then the next one's.
inline void cancel_withdraws_writes_with_immediate_waiting(asio::io_context& io, socket& a, socket& b) {
  constexpr std::size_t count = 100;  // more than the default 32 receive buffers' credits
  guarded_region target(b, count * 8, all_remote_rights), spare(b, 64, all_remote_rights);
  local_memory local(a, count * 8);
  one_round_trip(io, a, local, spare);
  std::vector<outcome> results(count), immediates;
  std::vector<asio::cancellation_signal> signals(count);
  outcome next;
  const close_on_exit guard(a, &b, io);
  for (std::size_t i = 0; i < count; ++i) {
    a.async_write_with_immediate(local.slice(i * 8, 8), target.remote(i * 8, 8),
                                 static_cast<std::uint32_t>(i),
                                 asio::bind_cancellation_slot(signals[i].slot(), record(results[i])));
  }
  for (auto& signal : signals) signal.emit(asio::cancellation_type::total);
  BOOST_TEST(std::none_of(results.begin(), results.end(), [](const outcome& o) { return o.done; }));
  run_until_done(io, [&] { return all_done(results); });
  std::vector<std::uint64_t> completed;
  for (std::size_t i = 0; i < count; ++i) {
    BOOST_TEST_CONTEXT("write " << i) {
      if (!results[i].ec) {
        completed.push_back(i);
        BOOST_TEST(all_bytes(target.region().subspan(i * 8, 8), local.fill));
      } else {
        BOOST_TEST((results[i].ec == asio::error::operation_aborted), results[i].ec.message());
        BOOST_TEST(all_bytes(target.region().subspan(i * 8, 8), guarded_region::fill));
      }
    }
  }
  BOOST_TEST_MESSAGE(completed.size()
                     << " writes with immediate completed, " << count - completed.size() << " withdrawn");
  BOOST_TEST(!completed.empty());
  BOOST_TEST(completed.size() < count);
  a.async_write_with_immediate(local.slice(0, 8), spare.remote(8, 8), 1000, record(next));
  immediates.resize(completed.size() + 1);
  for (auto& immediate : immediates) {
    b.async_receive_immediate(record(immediate));
    run_until_done(io, [&] { return immediate.done; });
    BOOST_TEST(!immediate.ec, immediate.ec.message());
  }
  completed.push_back(1000);
  std::vector<std::uint64_t> got;
  for (const outcome& immediate : immediates) got.push_back(immediate.value);
  BOOST_TEST(got == completed, boost::test_tools::per_element());
  run_until_done(io, [&] { return next.done; });
  BOOST_TEST(!next.ec, next.ec.message());
}

/// A terminal cancel of an operation under way fails the connection, as a terminal cancel of a
/// posted work request puts its queue pair in error: the operation ends with operation_aborted
/// (over RDMA it may have completed already, the queue pair is in error either way), the others
/// outstanding complete or are flushed, later ones are flushed and this side's streams end.
/// Nothing completes inside the cancel. Over TCP the peer's streams end too, at once: the
/// failing close tells it. Over RDMA a QP in error sends nothing more, and the peer's, which
/// stays up, learns of it from rdma_cm's disconnect when this side closes (these pairs have no
/// rdma_cm; cm_connect_test has that disconnect).
inline void terminal_cancel_of_an_operation_under_way_fails_the_connection(asio::io_context& io, socket& a,
                                                                           socket& b) {
  guarded_region target(b, 4096, all_remote_rights), spare(b, 64, all_remote_rights);
  local_memory local(a, 4096);
  one_round_trip(io, a, local, spare);
  std::vector<outcome> results(3);
  asio::cancellation_signal signal;
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto handler = record(results[i]);
    const verbs::local_buffer from = local.slice(i * 1024, 1024);
    if (i == 1) {
      a.async_write(from, target.remote(i * 1024, 1024),
                    asio::bind_cancellation_slot(signal.slot(), handler));
    } else {
      a.async_write(from, target.remote(i * 1024, 1024), handler);
    }
  }
  std::array<char, 8> buf_a{}, buf_b{};
  outcome a_read, b_read, later;
  const close_on_exit guard(a, &b, io);
  b.async_read_some(asio::buffer(buf_b), record(b_read));
  signal.emit(asio::cancellation_type::terminal);
  BOOST_TEST(std::none_of(results.begin(), results.end(), [](const outcome& o) { return o.done; }));
  a.async_read_some(asio::buffer(buf_a), record(a_read));
  run_until_done(io, [&] { return all_done(results) && a_read.done; });
  const bool rdma = a.transport_in_use() == transport::rdma;
  BOOST_TEST((results[1].ec == asio::error::operation_aborted || (rdma && !results[1].ec)),
             results[1].ec.message());
  for (const std::size_t i : {0, 2}) {
    BOOST_TEST_CONTEXT("write " << i) {
      BOOST_TEST((!results[i].ec || results[i].ec == make_error_code(wc_errc::flushed)),
                 results[i].ec.message());
    }
  }
  BOOST_TEST((a_read.ec == asio::error::eof), a_read.ec.message());
  a.async_write(local.slice(0, 8), target.remote(0, 8), record(later));
  run_until_done(io, [&] { return later.done; });
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
  BOOST_TEST(target.guards_untouched());
  if (!rdma) {
    run_until_done(io, [&] { return b_read.done; });
    BOOST_TEST((b_read.ec == asio::error::eof), b_read.ec.message());
  }
}

/// A connection that fails on this side (a write from memory deregistered before it started:
/// a local protection error, which puts an RDMA queue pair in error) ends for the peer at once,
/// while this side is still open, as TCP's failing close tells it: the peer's waiting read sees
/// eof. (Takes a pair with rdma_cm over RDMA: what tells the peer there is its disconnect.)
inline void local_failure_ends_the_peers_reads(asio::io_context& io, socket& a, socket& b) {
  guarded_region target(b, 4096, all_remote_rights);
  local_memory local(a, 4096);
  std::array<char, 8> buf{};
  outcome bad, b_read;
  const close_on_exit guard(a, &b, io);
  b.async_read_some(asio::buffer(buf), record(b_read));
  const verbs::local_buffer stale = local.slice(0, 256);
  local.registration = registered_memory();
  a.async_write(stale, target.remote(0, 256), record(bad));
  // Long enough for a disconnect under TCG; without one the read would wait until `a` closes.
  const auto both_done = [&] { return bad.done && b_read.done; };
  run_until_done(io, both_done, std::chrono::seconds(20));
  BOOST_TEST(bad.ec.failed());
  BOOST_TEST((b_read.ec == asio::error::eof), b_read.ec.message());
  BOOST_TEST(a.is_open());
  BOOST_TEST(target.untouched());
}

}  // namespace coverbs::test

/// Registers every body above as test cases over `Pair` (a socket-pair fixture type with io, a
/// and b), so each transport's test file runs the same list. Refusals each get a fresh
/// connection, since a refusal ends it.
#define COVERBS_ONE_SIDED_TEST_CASES(Pair)                                                         \
  BOOST_AUTO_TEST_CASE(write_then_read_back) {                                                     \
    Pair p;                                                                                        \
    coverbs::test::write_then_read_back(p.io, p.a, p.b);                                           \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(write_with_immediate) {                                                     \
    Pair p;                                                                                        \
    coverbs::test::write_with_immediate_shows_the_data_first(p.io, p.a, p.b);                      \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(atomics) {                                                                  \
    Pair p;                                                                                        \
    coverbs::test::atomics_return_the_previous_value(p.io, p.a, p.b);                              \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(pipeline_both_ways) {                                                       \
    Pair p;                                                                                        \
    coverbs::test::operations_pipeline_both_ways(p.io, p.a, p.b);                                  \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(reads_beside_streams_both_ways) {                                           \
    Pair p;                                                                                        \
    coverbs::test::reads_beside_streams_both_ways(p.io, p.a, p.b);                                 \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(message_after_many_writes) {                                                \
    Pair p;                                                                                        \
    coverbs::test::message_after_many_writes(p.io, p.a, p.b);                                      \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(nonblocking_message_after_many_writes) {                                    \
    Pair p;                                                                                        \
    coverbs::test::nonblocking_message_after_many_writes(p.io, p.a, p.b);                          \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(end_of_stream_after_many_writes) {                                          \
    Pair p;                                                                                        \
    coverbs::test::end_of_stream_after_many_writes(p.io, p.a, p.b);                                \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(end_of_stream_after_writes_with_immediate) {                                \
    Pair p;                                                                                        \
    coverbs::test::end_of_stream_after_writes_with_immediate(p.io, p.a, p.b);                      \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(end_of_stream_beside_endless_writes_with_immediate) {                       \
    Pair p;                                                                                        \
    coverbs::test::end_of_stream_beside_endless_writes_with_immediate(p.io, p.a, p.b);             \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(message_beside_endless_operations) {                                        \
    Pair p;                                                                                        \
    coverbs::test::message_beside_endless_operations(p.io, p.a, p.b);                              \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(bad_arguments_refused_locally) {                                            \
    Pair p;                                                                                        \
    coverbs::test::bad_arguments_are_refused_locally(p.io, p.a, p.b);                              \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(one_sided_after_shutdown) {                                                 \
    Pair p;                                                                                        \
    coverbs::test::one_sided_after_shutdown(p.io, p.a, p.b);                                       \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(zero_length_operations_need_no_key) {                                       \
    Pair p;                                                                                        \
    coverbs::test::zero_length_operations_need_no_key(p.io, p.a, p.b);                             \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(cancel_withdraws_operations_not_sent) {                                     \
    Pair p;                                                                                        \
    coverbs::test::cancel_withdraws_operations_not_sent(p.io, p.a, p.b);                           \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(cancel_withdraws_writes_with_immediate_waiting) {                           \
    Pair p;                                                                                        \
    coverbs::test::cancel_withdraws_writes_with_immediate_waiting(p.io, p.a, p.b);                 \
  }                                                                                                \
  BOOST_AUTO_TEST_CASE(terminal_cancel_fails_the_connection) {                                     \
    Pair p;                                                                                        \
    coverbs::test::terminal_cancel_of_an_operation_under_way_fails_the_connection(p.io, p.a, p.b); \
  }                                                                                                \
  COVERBS_ONE_SIDED_REFUSED(Pair, wrong_rkey)                                                      \
  COVERBS_ONE_SIDED_REFUSED(Pair, write_past_the_end)                                              \
  COVERBS_ONE_SIDED_REFUSED(Pair, write_past_the_end_in_parts)                                     \
  COVERBS_ONE_SIDED_REFUSED(Pair, read_past_the_end_in_parts)                                      \
  COVERBS_ONE_SIDED_REFUSED(Pair, read_before_the_start)                                           \
  COVERBS_ONE_SIDED_REFUSED(Pair, write_without_remote_write)                                      \
  COVERBS_ONE_SIDED_REFUSED(Pair, read_without_remote_read)                                        \
  COVERBS_ONE_SIDED_REFUSED(Pair, atomic_without_remote_atomic)                                    \
  COVERBS_ONE_SIDED_REFUSED(Pair, atomic_past_the_end)                                             \
  COVERBS_ONE_SIDED_REFUSED(Pair, deregistered)                                                    \
  COVERBS_ONE_SIDED_LOCAL(Pair, deregistered_source)                                               \
  COVERBS_ONE_SIDED_LOCAL(Pair, source_past_the_end)                                               \
  COVERBS_ONE_SIDED_LOCAL(Pair, wrong_key_target)                                                  \
  COVERBS_ONE_SIDED_LOCAL(Pair, atomic_result_past_the_end)

#define COVERBS_ONE_SIDED_REFUSED(Pair, name)                                                              \
  BOOST_AUTO_TEST_CASE(refused_##name) {                                                                   \
    Pair p;                                                                                                \
    coverbs::test::refused_operation_fails_the_connection(p.io, p.a, p.b, coverbs::test::violation::name); \
  }

#define COVERBS_ONE_SIDED_LOCAL(Pair, name)                                                    \
  BOOST_AUTO_TEST_CASE(local_##name) {                                                         \
    Pair p;                                                                                    \
    coverbs::test::local_violation_fails_the_connection(p.io, p.a, p.b,                        \
                                                        coverbs::test::local_violation::name); \
  }
