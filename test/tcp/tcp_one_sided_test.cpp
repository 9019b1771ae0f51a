// One-sided operations of coverbs::socket over the TCP fallback on loopback: the bodies RDMA
// runs (test/rdma/rdma_one_sided_test.cpp), then what only TCP has: a peer that breaks the
// protocol.
#include <dlfcn.h>
#include <sys/random.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "connected_pair.hpp"
#include "one_sided_tests.hpp"
#include "peer_context.hpp"
#include "raw_peer.hpp"
#include "tcp_socket_pair.hpp"

using namespace coverbs;
using coverbs::test::tcp_socket_pair;
using coverbs::test::violation;

namespace {
int random_source_fails_with = 0;  ///< the errno getrandom fails with; 0: it works
int random_draws = 0;              ///< getrandom's calls
}  // namespace

// Defined in the test program, so it comes before the C library's for every caller in it.
extern "C" ssize_t getrandom(void* buffer, size_t length, unsigned int flags) {
  ++random_draws;
  if (random_source_fails_with != 0) {
    errno = random_source_fails_with;
    return -1;
  }
  using source = ssize_t (*)(void*, size_t, unsigned int);
  static const auto real = reinterpret_cast<source>(dlsym(RTLD_NEXT, "getrandom"));
  return real(buffer, length, flags);
}

BOOST_AUTO_TEST_SUITE(tcp_one_sided)

COVERBS_ONE_SIDED_TEST_CASES(tcp_socket_pair)

// A peer must not guess keys: each registration's key is drawn from the kernel's random
// source, none is 0 or repeated.
BOOST_AUTO_TEST_CASE(keys_are_drawn_for_each_registration) {
  tcp_socket_pair p;
  std::array<std::byte, 64> memory{};
  std::vector<registered_memory> regions;
  std::set<std::uint32_t> keys;
  const int draws_before = random_draws;
  for (int i = 0; i < 64; ++i) {
    regions.push_back(p.a.register_memory(memory, test::all_remote_rights));
    keys.insert(regions.back().remote().rkey);
  }
  BOOST_TEST(keys.size() == 64u);
  BOOST_TEST(!keys.contains(0u));
  BOOST_TEST(random_draws - draws_before >= 64, "the keys did not come from the kernel's random source");
}

// Where the kernel's random source fails, the registration fails with its errno (never an
// exception from the error_code overload) and changes nothing: the stream does not start
// answering the peer (which would keep a read posted, and run() from returning, for good).
// The next registration, once the source works again, succeeds.
BOOST_AUTO_TEST_CASE(a_random_source_that_fails_fails_the_registration) {
  tcp_socket_pair p;
  std::array<std::byte, 64> memory{};
  error_code ec;
  registered_memory refused;
  {
    struct failing_random_source {
      failing_random_source() { random_source_fails_with = ENOSYS; }
      ~failing_random_source() { random_source_fails_with = 0; }
    } failing;
    refused = p.a.register_memory(memory, test::all_remote_rights, ec);
    BOOST_CHECK_THROW(p.a.register_memory(memory, test::all_remote_rights), boost::system::system_error);
  }
  BOOST_TEST((ec == std::error_code(ENOSYS, std::generic_category())), ec.message());
  BOOST_TEST(refused.remote().rkey == 0u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (p.io.restart(); !p.io.stopped() && std::chrono::steady_clock::now() < deadline;) p.io.poll();
  BOOST_TEST(p.io.stopped(), "the idle connection still keeps the context running");
  error_code later;
  const registered_memory region = p.a.register_memory(memory, test::all_remote_rights, later);
  BOOST_TEST(!later, later.message());
  BOOST_TEST(region.remote().rkey != 0u);
}

// Over TCP the peer's library answers one-sided operations, so they wait while the peer's
// context does not run, where an RDMA device would answer. socket.hpp's advice ends such a
// wait: a timer through `||`, the operation awaited as_tuple. The timer wins, and its terminal
// cancel fails the connection, so a later operation is flushed.
BOOST_AUTO_TEST_CASE(a_timer_through_or_ends_an_operation_a_stalled_peer_leaves_unanswered) {
  namespace asio = boost::asio;
  using namespace asio::experimental::awaitable_operators;
  tcp_socket_pair p(64 * 1024, test::peer_context::own);
  test::guarded_region theirs(p.b, 64, verbs::access::remote_read);
  const test::local_memory mine(p.a, 8);
  // One read answered while both contexts run: the hellos are through, requests go out.
  test::outcome answered;
  p.a.async_read(mine.slice(0, 8), theirs.remote(0, 8), test::record(answered));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!answered.done && std::chrono::steady_clock::now() < deadline) {
    for (auto* context : {&p.io, &p.peer_io}) {
      context->restart();
      context->poll();
    }
  }
  BOOST_TEST_REQUIRE(answered.done);
  BOOST_TEST_REQUIRE(!answered.ec, answered.ec.message());

  // From here the peer's context never runs.
  std::optional<std::size_t> winner;
  asio::co_spawn(
      p.io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(p.io, std::chrono::milliseconds(100));
        const auto first = co_await (
            p.a.async_read(mine.slice(0, 8), theirs.remote(0, 8), asio::as_tuple(asio::use_awaitable)) ||
            timer.async_wait(asio::use_awaitable));
        winner = first.index();
      },
      asio::detached);
  test::run_until_done(
      p.io, [&] { return winner.has_value(); }, std::chrono::seconds(10));
  BOOST_TEST(*winner == 1u, "the read, which nobody answers, ended first");
  test::outcome later;
  p.a.async_read(mine.slice(0, 8), theirs.remote(0, 8), test::record(later));
  test::run_until_done(p.io, [&] { return later.done; });
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
}

BOOST_AUTO_TEST_CASE(local_failure_ends_the_peers_reads) {  // through the acceptor, as over RDMA
  test::connected_pair p(transport::tcp);
  test::local_failure_ends_the_peers_reads(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_SUITE_END()

// --- a peer that speaks the protocol by hand ----------------------------------------------------

namespace {

namespace asio = boost::asio;
namespace wire = coverbs::wire;
using test::frame;
using test::outcome;
using test::raw_peer;
using test::record;
using test::run_until_done;
using wire::frame_status;
using wire::frame_type;

// `a` fails for a protocol error: it tells the peer, and its pending read sees malformed_frame.
void expect_protocol_error(raw_peer& p, outcome& pending_read) {
  BOOST_TEST((p.closing_status() == frame_status::protocol_error));
  run_until_done(p.io, [&] { return pending_read.done; });
  BOOST_TEST((pending_read.ec == make_error_code(errc::malformed_frame)), pending_read.ec.message());
}

// Starts a read of stream bytes on `a` that only a failure ends.
void watch_stream(raw_peer& p, std::array<char, 8>& buf, outcome& o) {
  p.a.async_read_some(asio::buffer(buf), record(o));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tcp_one_sided_protocol)

BOOST_AUTO_TEST_CASE(garbage_header_fails_outstanding_and_later_operations) {
  raw_peer p;
  std::vector<std::byte> local(64);
  auto reg = p.a.register_memory(local, verbs::access::none);
  outcome outstanding, later, read;
  std::array<char, 8> buf{};
  watch_stream(p, buf, read);
  p.a.async_write(reg.slice(0, 64), {.address = 4096, .rkey = 1, .length = 64}, record(outstanding));
  const frame w = p.receive();
  BOOST_TEST((w.h.type == frame_type::write));
  BOOST_TEST(w.h.length == 64u);
  BOOST_TEST(w.payload.size() == 64u);
  p.send_bytes(std::vector<std::byte>(wire::header_size, std::byte{0xff}));
  expect_protocol_error(p, read);
  BOOST_TEST((outstanding.ec == make_error_code(errc::malformed_frame)), outstanding.ec.message());
  p.a.async_write(reg.slice(0, 64), {.address = 4096, .rkey = 1, .length = 64}, record(later));
  run_until_done(p.io, [&] { return later.done; });
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
}

BOOST_AUTO_TEST_CASE(out_of_sequence_frames_are_protocol_errors) {
  using h = wire::frame_header;
  const std::vector<std::pair<const char*, h>> cases = {
      {"a response with nothing outstanding", {.type = frame_type::write_response, .request_id = 1}},
      {"a second hello", {.type = frame_type::hello, .length = 4096}},
  };
  for (const auto& [what, header] : cases) {
    BOOST_TEST_CONTEXT(what) {
      raw_peer p;
      outcome read;
      std::array<char, 8> buf{};
      watch_stream(p, buf, read);
      p.send(header);
      expect_protocol_error(p, read);
    }
  }
}

BOOST_AUTO_TEST_CASE(first_frame_must_be_hello) {
  raw_peer p(false);
  outcome read;
  std::array<char, 8> buf{};
  watch_stream(p, buf, read);
  const std::array<std::byte, 1> one{std::byte{1}};
  p.send({.type = frame_type::data}, one);
  expect_protocol_error(p, read);
}

BOOST_AUTO_TEST_CASE(stream_frames_after_the_peers_close_are_protocol_errors) {
  raw_peer p;
  outcome eof, after;
  std::array<char, 8> buf{};
  p.send({.type = frame_type::close});
  watch_stream(p, buf, eof);
  run_until_done(p.io, [&] { return eof.done; });
  BOOST_TEST((eof.ec == asio::error::eof), eof.ec.message());
  std::array<std::byte, 4> msg{};
  p.send({.type = frame_type::message, .length = 4}, msg);
  BOOST_TEST((p.closing_status() == frame_status::protocol_error));
}

BOOST_AUTO_TEST_CASE(a_huge_payload_length_is_refused_before_any_allocation) {
  raw_peer p;
  outcome read;
  std::array<char, 8> buf{};
  watch_stream(p, buf, read);
  wire::frame_header h{.type = frame_type::write, .rkey = 1, .length = 0xffffffffu};
  std::vector<std::byte> bytes(wire::header_size);
  h.payload_length = 0xffffffffu;
  wire::encode_header(h, std::span<std::byte, wire::header_size>(bytes.data(), wire::header_size));
  p.send_bytes(bytes);
  expect_protocol_error(p, read);
}

BOOST_AUTO_TEST_CASE(responses_must_match_the_oldest_request) {
  enum class fault { wrong_id, wrong_kind, wrong_read_length };
  for (const fault f : {fault::wrong_id, fault::wrong_kind, fault::wrong_read_length}) {
    BOOST_TEST_CONTEXT("fault " << static_cast<int>(f)) {
      raw_peer p;
      std::vector<std::byte> local(128);
      auto reg = p.a.register_memory(local, verbs::access::none);
      outcome first, second, read;
      std::array<char, 8> buf{};
      watch_stream(p, buf, read);
      p.a.async_read(reg.slice(0, 64), {.address = 8, .rkey = 3, .length = 64}, record(first));
      p.a.async_read(reg.slice(64, 64), {.address = 8, .rkey = 3, .length = 64}, record(second));
      const frame r1 = p.receive(), r2 = p.receive();
      BOOST_TEST((r1.h.type == frame_type::read_request && r1.h.length == 64u));
      BOOST_TEST(r2.h.request_id != r1.h.request_id);
      const std::vector<std::byte> data(64, std::byte{7});
      switch (f) {
        case fault::wrong_id:
          p.send({.type = frame_type::read_response, .request_id = r2.h.request_id, .length = 64}, data);
          break;
        case fault::wrong_kind:
          p.send({.type = frame_type::write_response, .request_id = r1.h.request_id});
          break;
        case fault::wrong_read_length:
          p.send({.type = frame_type::read_response, .request_id = r1.h.request_id, .length = 32},
                 std::span(data).first(32));
          break;
      }
      expect_protocol_error(p, read);
      BOOST_TEST((first.ec == make_error_code(errc::malformed_frame)));
      BOOST_TEST((second.ec == make_error_code(errc::malformed_frame)));
      BOOST_TEST(std::all_of(local.begin(), local.end(), [](std::byte b) { return b == std::byte{0}; }));
    }
  }
}

// What a peer killed while writing leaves: a reset connection, not a malformed frame.
BOOST_AUTO_TEST_CASE(end_of_stream_inside_a_frame_is_a_reset_connection) {
  raw_peer p;
  std::array<char, 8> buf{};
  outcome read;
  watch_stream(p, buf, read);  // waiting already, so the payload goes straight into buf
  std::vector<std::byte> bytes(wire::header_size);
  wire::encode_header({.type = frame_type::data, .payload_length = 100},
                      std::span<std::byte, wire::header_size>(bytes.data(), wire::header_size));
  bytes.resize(wire::header_size + 10, std::byte{0x5a});  // 90 payload bytes short
  p.send_bytes(bytes);
  p.raw.shutdown(asio::socket_base::shutdown_send);
  // The ten bytes that arrived are stream bytes, handed out as a TCP socket would; then the
  // stream ends as reset, not in an orderly end of stream.
  std::string got;
  for (;;) {
    run_until_done(p.io, [&] { return read.done; });
    if (read.ec) break;
    got.append(buf.data(), read.value);
    read = {};
    watch_stream(p, buf, read);
  }
  BOOST_TEST((read.ec == asio::error::connection_reset), read.ec.message());
  BOOST_TEST(got == std::string(10, '\x5a'));
}

// Messages that come in parts while a receive waits: the receive gets the whole message; and
// where it is cancelled in between, what came is kept for the next receive.
BOOST_AUTO_TEST_CASE(messages_in_parts) {
  raw_peer p;
  constexpr std::size_t size = 40000, first_part = 25000;
  std::vector<std::byte> payload(size);
  for (std::size_t i = 0; i < size; ++i) payload[i] = static_cast<std::byte>(i * 7 + i / 251);
  std::vector<std::byte> message(wire::header_size);
  wire::encode_header({.type = frame_type::message, .payload_length = size, .length = size},
                      std::span<std::byte, wire::header_size>(message.data(), wire::header_size));
  message.insert(message.end(), payload.begin(), payload.end());
  const std::span<const std::byte> head = std::span(message).first(wire::header_size + first_part);
  const std::span<const std::byte> tail = std::span(message).subspan(head.size());
  for (const bool cancel : {false, true}) {
    std::vector<std::byte> got(size);
    asio::cancellation_signal signal;
    outcome first;
    p.a.async_receive(asio::buffer(got), asio::bind_cancellation_slot(signal.slot(), record(first)));
    p.send_bytes(head);
    p.io.restart();
    p.io.run_for(std::chrono::milliseconds(200));  // the first part arrives and is taken
    BOOST_TEST_REQUIRE(!first.done);
    if (cancel) {
      signal.emit(asio::cancellation_type::terminal);
      run_until_done(p.io, [&] { return first.done; });
      BOOST_TEST((first.ec == asio::error::operation_aborted), first.ec.message());
      std::fill(got.begin(), got.end(), std::byte{0});  // the caller's again
      p.a.async_receive(asio::buffer(got), record(first = {}));
    }
    p.send_bytes(tail);
    run_until_done(p.io, [&] { return first.done; });
    BOOST_TEST(!first.ec, first.ec.message());
    BOOST_TEST(first.value == size);
    BOOST_TEST((got == payload));
  }
}

// A message goes to the socket at once while nothing is queued before it; when the socket takes
// only part of one (its buffers full: the peer reads late), the rest follows from a frame, and
// the peer still gets every message whole and in order.
BOOST_AUTO_TEST_CASE(sends_the_socket_takes_in_part) {
  raw_peer p;
  // 12 MiB: more than the loopback socket buffers and the stream's own queue hold unread.
  constexpr std::size_t size = 3001, count = 4000;
  auto content = [](std::size_t i, std::size_t k) {
    return static_cast<std::byte>(i * 31 + k * 7 + k / 241);
  };
  std::vector<std::byte> message(size);
  std::size_t sent = 0;
  boost::system::error_code failure;
  std::function<void()> send_next = [&] {
    for (std::size_t k = 0; k < size; ++k) message[k] = content(sent, k);  // the caller's again
    p.a.async_send(asio::buffer(message), [&](boost::system::error_code ec, std::size_t) {
      if (ec) return void(failure = ec);
      if (++sent < count) send_next();
    });
  };
  send_next();
  p.io.restart();
  p.io.run_for(std::chrono::milliseconds(300));
  BOOST_TEST_REQUIRE(sent < count, "the socket's buffers never filled");
  for (std::size_t i = 0; i < count; ++i) {
    const frame f = p.receive();
    BOOST_TEST_REQUIRE((f.h.type == frame_type::message));
    BOOST_TEST_REQUIRE(f.h.payload_length == size);
    bool intact = true;
    for (std::size_t k = 0; k < size; ++k) intact = intact && f.payload[k] == content(i, k);
    BOOST_TEST_REQUIRE(intact, "message " << i << " arrived altered");
  }
  BOOST_TEST(!failure, failure.message());
  BOOST_TEST(sent == count);
}

// 1 MiB writes from a until one stays pending: the peer reads nothing, so the socket's
// buffers fill. Each write goes out from the caller's memory (16 KiB or more), so it ends only
// once the socket has taken it all. Returns the number of writes.
static std::size_t fill_the_socket(raw_peer& p, std::vector<std::byte>& chunk, outcome& write) {
  std::size_t writes = 0;
  for (; writes < 64 && (writes == 0 || write.done); ++writes) {
    BOOST_TEST_REQUIRE(!write.ec, write.ec.message());
    write = {};
    p.a.async_write_some(asio::buffer(chunk), record(write));
    p.io.restart();
    p.io.run_for(std::chrono::milliseconds(100));
    if (!write.done) {  // stalled, or only slow (a loaded machine): a second more tells
      p.io.restart();
      p.io.run_for(std::chrono::seconds(1));
    }
  }
  BOOST_TEST_REQUIRE(!write.done, "the socket's buffers never filled");
  return writes;
}

// The peer fails the connection (a failing close) and reads nothing more: the pending write
// and send must end (as a queue pair in error flushes its sends), not stay pending until
// close().
BOOST_AUTO_TEST_CASE(a_failure_ends_writes_stalled_in_the_socket) {
  raw_peer p;
  std::vector<std::byte> chunk(1 << 20, std::byte{0x33});
  outcome write;
  fill_the_socket(p, chunk, write);
  outcome send, read;
  std::vector<std::byte> message(64 * 1024, std::byte{0x44});
  p.a.async_send(asio::buffer(message), record(send));
  std::array<char, 8> buf{};
  watch_stream(p, buf, read);
  p.send({.type = frame_type::close, .status = frame_status::remote_access});
  run_until_done(
      p.io, [&] { return read.done && write.done && send.done; }, std::chrono::seconds(10));
  BOOST_TEST((read.ec == asio::error::eof), read.ec.message());
  BOOST_TEST((write.ec == asio::error::broken_pipe), write.ec.message());
  BOOST_TEST((send.ec == asio::error::broken_pipe), send.ec.message());
}

// This side refuses a request of a peer that still reads: the refusal and the failing close
// go out behind the large write in progress, which ends normally (it was not cut short).
BOOST_AUTO_TEST_CASE(a_refusal_reaches_a_reading_peer_behind_a_large_write) {
  raw_peer p;
  std::vector<std::byte> chunk(1 << 20, std::byte{0x33});
  outcome write;
  const std::size_t writes = fill_the_socket(p, chunk, write);
  p.send({.type = frame_type::read_request, .request_id = 1, .remote_address = 64, .rkey = 77, .length = 8});
  p.io.restart();
  p.io.run_for(std::chrono::milliseconds(100));  // a refuses it while the write is pending
  std::size_t data = 0;
  for (;;) {
    const frame f = p.receive();
    if (f.h.type == frame_type::data) {
      data += f.payload.size();
      BOOST_TEST_REQUIRE(test::all_bytes(f.payload, std::byte{0x33}));
      continue;
    }
    BOOST_TEST_REQUIRE((f.h.type == frame_type::read_response), "the refusal did not come next");
    BOOST_TEST((f.h.status == frame_status::remote_access));
    break;
  }
  BOOST_TEST(data == writes * chunk.size());
  BOOST_TEST((p.closing_status() == frame_status::remote_access));
  run_until_done(
      p.io, [&] { return write.done; }, std::chrono::seconds(10));
  BOOST_TEST(!write.ec, write.ec.message());
  BOOST_TEST(write.value == chunk.size());
}

// A write whose payload comes in parts goes into its region as it comes; where the region is
// deregistered between the parts, nothing more is written there and the write is refused with
// remote_access, as a device refuses a write to a key gone.
BOOST_AUTO_TEST_CASE(write_in_parts_stops_at_deregistration) {
  constexpr std::size_t size = 40000, first_part = 25000;
  std::vector<std::byte> payload(size);
  for (std::size_t i = 0; i < size; ++i) payload[i] = static_cast<std::byte>(i * 5 + i / 253 + 1);
  for (const bool deregister : {false, true}) {
    BOOST_TEST_CONTEXT("deregistered between the parts: " << deregister) {
      raw_peer p;
      std::vector<std::byte> memory(size, std::byte{0});
      std::optional<registered_memory> region(p.a.register_memory(memory, test::all_remote_rights));
      const remote_buffer r = region->remote();
      std::vector<std::byte> bytes(wire::header_size);
      wire::encode_header({.type = frame_type::write,
                           .payload_length = size,
                           .request_id = 5,
                           .remote_address = r.address,
                           .rkey = r.rkey,
                           .length = size},
                          std::span<std::byte, wire::header_size>(bytes.data(), wire::header_size));
      bytes.insert(bytes.end(), payload.begin(), payload.end());
      p.send_bytes(std::span(bytes).first(wire::header_size + first_part));
      // The first part arrives and is written.
      run_until_done(
          p.io, [&] { return std::equal(memory.begin(), memory.begin() + first_part, payload.begin()); },
          std::chrono::seconds(10));
      BOOST_TEST(std::equal(memory.begin(), memory.begin() + first_part, payload.begin()));
      if (deregister) region.reset();
      p.send_bytes(std::span(bytes).subspan(wire::header_size + first_part));
      const frame answer = p.receive();
      BOOST_TEST((answer.h.type == frame_type::write_response));
      BOOST_TEST(answer.h.request_id == 5u);
      if (deregister) {
        BOOST_TEST((answer.h.status == frame_status::remote_access));
        BOOST_TEST(std::all_of(memory.begin() + first_part, memory.end(),
                               [](std::byte b) { return b == std::byte{0}; }));
      } else {
        BOOST_TEST((answer.h.status == frame_status::ok));
        BOOST_TEST((memory == payload));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(lost_connection_times_out_unanswered_requests) {
  raw_peer p;
  std::vector<std::byte> local(64);
  auto reg = p.a.register_memory(local, verbs::access::none);
  outcome unanswered, behind, read, later;
  std::array<char, 8> buf{};
  watch_stream(p, buf, read);
  p.a.async_fetch_add(reg.slice(0, 8), {.address = 64, .rkey = 9, .length = 8}, 1, record(unanswered));
  p.a.async_fetch_add(reg.slice(8, 8), {.address = 64, .rkey = 9, .length = 8}, 2, record(behind));
  const frame f = p.receive();
  BOOST_TEST((f.h.type == frame_type::atomic_fetch_add && f.h.compare_add == 1u && f.h.rkey == 9u));
  BOOST_TEST(p.receive().h.compare_add == 2u);  // read, so that closing sends no reset
  p.raw.close();
  run_until_done(p.io, [&] { return unanswered.done && behind.done && read.done; });
  // As on an RC queue pair: the request at the head times out, those behind it are flushed.
  BOOST_TEST((unanswered.ec == make_error_code(wc_errc::retry_exceeded)), unanswered.ec.message());
  BOOST_TEST((behind.ec == make_error_code(wc_errc::flushed)), behind.ec.message());
  BOOST_TEST((read.ec == asio::error::eof), read.ec.message());
  p.a.async_read(reg.slice(0, 8), {.address = 64, .rkey = 9, .length = 8}, record(later));
  run_until_done(p.io, [&] { return later.done; });
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
}

BOOST_AUTO_TEST_CASE(close_flushes_outstanding_operations) {
  raw_peer p;
  std::vector<std::byte> local(64);
  auto reg = p.a.register_memory(local, verbs::access::none);
  outcome write, atomic;
  p.a.async_write(reg.slice(0, 64), {.address = 64, .rkey = 9, .length = 64}, record(write));
  p.a.async_compare_swap(reg.slice(0, 8), {.address = 64, .rkey = 9, .length = 8}, 1, 2, record(atomic));
  p.a.close();
  BOOST_TEST(!write.done);  // posted, not run inside close()
  run_until_done(p.io, [&] { return write.done && atomic.done; });
  BOOST_TEST((write.ec == make_error_code(wc_errc::flushed)), write.ec.message());
  BOOST_TEST((atomic.ec == make_error_code(wc_errc::flushed)), atomic.ec.message());
}

// Cancellation as the frames show it: an operation none of whose frames went out (beyond the
// window of unanswered requests) is withdrawn by any cancel, terminal included, and never
// sent; those behind it go in order, and so does a message started after them. A partial or
// total cancel leaves one that is out be; a terminal one fails the connection: the peer gets a
// failing close, the cancelled operation ends aborted, the other outstanding one flushed.
BOOST_AUTO_TEST_CASE(cancel_withdraws_unsent_requests_and_terminal_fails_sent_ones) {
  raw_peer p;
  // A message from the peer: read after its hello, which lets requests out.
  outcome hello;
  std::array<char, 1> greeting{};
  p.send({.type = frame_type::message, .length = 1}, std::as_bytes(std::span("h", 1)));
  p.a.async_receive(asio::buffer(greeting), record(hello));
  run_until_done(p.io, [&] { return hello.done; });
  BOOST_TEST_REQUIRE(!hello.ec, hello.ec.message());
  constexpr std::size_t window = detail::tcp_stream::max_unanswered, count = window + 4;
  std::vector<std::byte> local(count * 8);
  auto reg = p.a.register_memory(local, verbs::access::none);
  std::vector<outcome> results(count);
  std::vector<asio::cancellation_signal> signals(count);
  for (std::size_t i = 0; i < count; ++i) {
    p.a.async_write(reg.slice(i * 8, 8), {.address = i * 8, .rkey = 9, .length = 8},
                    asio::bind_cancellation_slot(signals[i].slot(), record(results[i])));
  }
  outcome sent, later;
  const test::close_on_exit guard(p.a, nullptr, p.io);
  p.a.async_send(asio::buffer("m", 1), record(sent));
  signals[0].emit(asio::cancellation_type::total);              // out: left be
  signals[1].emit(asio::cancellation_type::partial);            // the same
  signals[window + 1].emit(asio::cancellation_type::terminal);  // not out: withdrawn
  signals[window + 2].emit(asio::cancellation_type::partial);   // the same
  BOOST_TEST(!results[window + 1].done);                        // posted, not run inside the cancel
  std::vector<frame> requests;
  for (std::size_t i = 0; i < window; ++i) {
    requests.push_back(p.receive());
    BOOST_TEST(requests.back().h.remote_address == i * 8);
  }
  run_until_done(p.io, [&] { return results[window + 1].done && results[window + 2].done; });
  for (const std::size_t i : {window + 1, window + 2}) {
    BOOST_TEST((results[i].ec == asio::error::operation_aborted), results[i].ec.message());
  }
  BOOST_TEST(!results[0].done);
  for (const frame& r : requests) p.send({.type = frame_type::write_response, .request_id = r.h.request_id});
  const frame next = p.receive(), last = p.receive(), message = p.receive();
  BOOST_TEST((next.h.type == frame_type::write && next.h.remote_address == window * 8));
  BOOST_TEST((last.h.type == frame_type::write && last.h.remote_address == (window + 3) * 8));
  BOOST_TEST((message.h.type == frame_type::message && message.payload.size() == 1u));
  run_until_done(p.io, [&] { return sent.done && results[window - 1].done; });
  for (std::size_t i = 0; i < window; ++i) BOOST_TEST(!results[i].ec, results[i].ec.message());
  BOOST_TEST(!sent.ec, sent.ec.message());

  signals[window + 3].emit(asio::cancellation_type::terminal);  // out, unanswered
  BOOST_TEST(!results[window + 3].done);
  BOOST_TEST((p.closing_status() == frame_status::remote_operation));
  run_until_done(p.io, [&] { return results[window].done && results[window + 3].done; });
  BOOST_TEST((results[window].ec == make_error_code(wc_errc::flushed)), results[window].ec.message());
  BOOST_TEST((results[window + 3].ec == asio::error::operation_aborted), results[window + 3].ec.message());
  p.a.async_write(reg.slice(0, 8), {.address = 0, .rkey = 9, .length = 8}, record(later));
  run_until_done(p.io, [&] { return later.done; });
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
}

BOOST_AUTO_TEST_CASE(refused_requests_are_answered_then_closed) {
  struct refusal {
    const char* what;
    wire::frame_header (*request)(const remote_buffer& r);
    frame_type answer;
    frame_status status;
  };
  const refusal cases[] = {
      {"wrong key",  // (with bytes to read: a zero-length request checks no key)
       [](const remote_buffer& r) {
         return wire::frame_header{.type = frame_type::read_request,
                                   .request_id = 5,
                                   .remote_address = r.address,
                                   .rkey = r.rkey + 1,
                                   .length = 8};
       },
       frame_type::read_response, frame_status::remote_access},
      {"past the end",
       [](const remote_buffer& r) {
         return wire::frame_header{.type = frame_type::read_request,
                                   .request_id = 5,
                                   .remote_address = r.address + 8,
                                   .rkey = r.rkey,
                                   .length = 64};
       },
       frame_type::read_response, frame_status::remote_access},
      {"misaligned atomic",
       [](const remote_buffer& r) {
         return wire::frame_header{.type = frame_type::atomic_fetch_add,
                                   .request_id = 5,
                                   .remote_address = r.address + 4,
                                   .rkey = r.rkey,
                                   .compare_add = 1};
       },
       frame_type::atomic_response, frame_status::remote_invalid_request},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      raw_peer p;
      std::vector<std::byte> memory(64, std::byte{0x33});
      auto region = p.a.register_memory(memory, test::all_remote_rights);
      outcome read;
      std::array<char, 8> buf{};
      watch_stream(p, buf, read);
      p.send(c.request(region.remote()));
      const frame answer = p.receive();
      BOOST_TEST((answer.h.type == c.answer));
      BOOST_TEST(answer.h.request_id == 5u);
      BOOST_TEST((answer.h.status == c.status));
      BOOST_TEST(answer.payload.empty());
      const frame close = p.receive();
      BOOST_TEST((close.h.type == frame_type::close && close.h.status == c.status));
      run_until_done(p.io, [&] { return read.done; });
      BOOST_TEST((read.ec == asio::error::eof), read.ec.message());
      BOOST_TEST(std::all_of(memory.begin(), memory.end(), [](std::byte b) { return b == std::byte{0x33}; }));
    }
  }
}

// A read_request asks for the rest of its read: the responder checks all of it and answers one
// frame's part, so a read that runs past its region is refused at its first part.
BOOST_AUTO_TEST_CASE(a_read_request_is_checked_whole_and_answered_a_part) {
  raw_peer p(true, 4096);
  std::vector<std::byte> memory = test::random_bytes(8192, 5);
  auto region = p.a.register_memory(memory, test::all_remote_rights);
  const remote_buffer r = region.remote();
  outcome read;
  std::array<char, 8> buf{};
  watch_stream(p, buf, read);
  p.send({.type = frame_type::read_request,
          .request_id = 1,
          .remote_address = r.address,
          .rkey = r.rkey,
          .length = 8192});
  const frame first = p.receive();
  BOOST_TEST((first.h.type == frame_type::read_response && first.h.status == frame_status::ok));
  BOOST_TEST(first.h.length == 4096u);
  BOOST_TEST((first.payload == std::vector<std::byte>(memory.begin(), memory.begin() + 4096)));
  // Its first 4 KiB are in the region, the rest is not.
  p.send({.type = frame_type::read_request,
          .request_id = 2,
          .remote_address = r.address + 4096,
          .rkey = r.rkey,
          .length = 8192});
  const frame refused = p.receive();
  BOOST_TEST(
      (refused.h.type == frame_type::read_response && refused.h.status == frame_status::remote_access));
  BOOST_TEST(refused.h.length == 4096u);
  BOOST_TEST(refused.payload.empty());
  const frame close = p.receive();
  BOOST_TEST((close.h.type == frame_type::close && close.h.status == frame_status::remote_access));
  run_until_done(p.io, [&] { return read.done; });
}

// A responder whose application closes its socket as the refusal fails the connection (in the
// handler of a read that the failure ends) still sends what it owes: the answers queued before
// the refusal, the refusal, and the failing close, as a device's NAK goes out whatever its
// application does. The answers are more than the socket takes at once, so they are queued.
BOOST_AUTO_TEST_CASE(a_refusal_reaches_the_peer_when_the_responder_closes_at_once) {
  raw_peer p;
  p.a.set_option(asio::socket_base::send_buffer_size(4096));
  constexpr std::uint32_t size = 1u << 20;
  std::vector<std::byte> memory = test::random_bytes(size, 6);
  auto region = p.a.register_memory(memory, verbs::access::remote_read);
  const remote_buffer r = region.remote();
  std::array<char, 8> buf{};
  std::optional<error_code> ended;
  p.a.async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t) {
    ended = ec;
    p.a.close();
  });
  for (std::uint64_t id = 1; id <= 2; ++id) {
    p.send({.type = frame_type::read_request,
            .request_id = id,
            .remote_address = r.address,
            .rkey = r.rkey,
            .length = size});
  }
  p.send({.type = frame_type::read_request,
          .request_id = 3,
          .remote_address = r.address,
          .rkey = r.rkey + 1,
          .length = 8});
  for (std::uint64_t id = 1; id <= 2; ++id) {
    const frame answer = p.receive();
    BOOST_TEST_REQUIRE((answer.h.type == frame_type::read_response && answer.h.request_id == id));
    BOOST_TEST((answer.h.status == frame_status::ok));
    BOOST_TEST((answer.payload == memory));
  }
  const frame refused = p.receive();
  BOOST_TEST((refused.h.type == frame_type::read_response && refused.h.request_id == 3u));
  BOOST_TEST((refused.h.status == frame_status::remote_access));
  const frame close = p.receive();
  BOOST_TEST((close.h.type == frame_type::close && close.h.status == frame_status::remote_access));
  BOOST_TEST((ended && *ended == asio::error::eof));
}

// The peer's hello sets the frame size: with 4 KiB frames a 3 MiB write takes 768 request
// frames, of which at most max_unanswered are unanswered at a time.
BOOST_AUTO_TEST_CASE(operations_split_at_the_peers_limit) {
  raw_peer p(true, 4096);
  constexpr std::uint32_t total = 3u << 20;
  std::vector<std::byte> local = test::random_bytes(total, 3), landed(total);
  auto reg = p.a.register_memory(local, verbs::access::none);
  outcome wrote;
  p.a.async_write_with_immediate(reg.slice(0, total), {.address = 1u << 20, .rkey = 77, .length = total}, 9,
                                 record(wrote));
  std::uint32_t offset = 0, in_flight = 0;
  bool window_checked = false;
  std::deque<std::uint64_t> ids;
  while (offset < total || !ids.empty()) {
    // Take frames up to a full window, then answer the oldest; the first time the window is
    // full, check that the stream sends nothing more before an answer.
    if (offset < total && in_flight < detail::tcp_stream::max_unanswered) {
      const frame f = p.receive();
      const bool last = offset + 4096 == total;
      BOOST_TEST_REQUIRE((f.h.type == (last ? frame_type::write_with_immediate : frame_type::write)));
      BOOST_TEST_REQUIRE(f.h.length == total - offset);
      BOOST_TEST_REQUIRE(f.h.remote_address == (1u << 20) + offset);
      BOOST_TEST_REQUIRE(f.payload.size() == 4096u);
      BOOST_TEST_REQUIRE(f.h.immediate == (last ? 9u : 0u));
      std::copy(f.payload.begin(), f.payload.end(), landed.begin() + offset);
      offset += 4096;
      ids.push_back(f.h.request_id);
      ++in_flight;
      if (in_flight == detail::tcp_stream::max_unanswered && !window_checked) {
        window_checked = true;
        p.io.restart();
        p.io.run_for(std::chrono::milliseconds(20));
        BOOST_TEST_REQUIRE(p.raw.available() == 0u);  // nothing more until an answer
      }
      continue;
    }
    p.send({.type = frame_type::write_response, .request_id = ids.front()});
    ids.pop_front();
    --in_flight;
  }
  run_until_done(p.io, [&] { return wrote.done; });
  BOOST_TEST(!wrote.ec, wrote.ec.message());
  BOOST_TEST(wrote.value == total);
  BOOST_TEST(window_checked);
  BOOST_TEST((landed == local));
  BOOST_TEST(p.a.impl()->max_message_size() == 4096u);
}

BOOST_AUTO_TEST_CASE(reads_split_at_the_peers_limit) {
  raw_peer p(true, 4096);
  std::vector<std::byte> local(10000);
  auto reg = p.a.register_memory(local, verbs::access::none);
  const auto source = test::random_bytes(10000, 4);
  outcome read;
  p.a.async_read(reg.slice(0, 10000), {.address = 500, .rkey = 2, .length = 10000}, record(read));
  for (const std::uint32_t offset : {0u, 4096u, 8192u}) {
    const frame f = p.receive();
    const std::uint32_t length = std::min(4096u, 10000u - offset);
    BOOST_TEST_REQUIRE((f.h.type == frame_type::read_request));
    BOOST_TEST_REQUIRE(f.h.length == 10000u - offset);  // the rest, which the peer checks whole
    BOOST_TEST_REQUIRE(f.h.remote_address == 500u + offset);
    p.send({.type = frame_type::read_response, .request_id = f.h.request_id, .length = length},
           std::span(source).subspan(offset, length));
  }
  run_until_done(p.io, [&] { return read.done; });
  BOOST_TEST(!read.ec, read.ec.message());
  BOOST_TEST(read.value == 10000u);
  BOOST_TEST((local == source));
}

// A peer that sends more read requests than it may leave unanswered, without reading the
// responses: the responder stops reading rather than queueing responses without bound, and
// resumes, losing nothing, once the peer reads.
namespace {
// The answers a responder queues for reads of 1 MiB from `memory`, over small socket buffers:
// each stays queued at the responder, the kernels holding less than one.
struct one_mib_reads {
  static constexpr std::uint32_t size = 1u << 20;
  raw_peer& p;
  std::vector<std::byte> memory;
  registered_memory region;
  std::uint64_t reads_before = 0;

  one_mib_reads(raw_peer& peer, unsigned seed)
      : p(peer),
        memory(test::random_bytes(size, seed)),
        region(p.a.register_memory(memory, verbs::access::remote_read)) {
    p.a.set_option(asio::socket_base::send_buffer_size(64 * 1024));
    p.raw.set_option(asio::socket_base::receive_buffer_size(64 * 1024));
  }
  void request(std::uint64_t id) {
    const remote_buffer r = region.remote();
    p.send({.type = frame_type::read_request,
            .request_id = id,
            .remote_address = r.address,
            .rkey = r.rkey,
            .length = size});
  }
  /// Counts the responder's socket reads from here (each request sent alone is one).
  void count_reads() { reads_before = p.stream->socket_reads(); }
  std::uint64_t reads() const { return p.stream->socket_reads() - reads_before; }
  /// Runs the responder until reads() reaches `n` or `limit` passes.
  void run_until_read(std::uint64_t n, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (reads() < n && std::chrono::steady_clock::now() < deadline) {
      p.io.restart();
      p.io.run_for(std::chrono::milliseconds(1));
    }
  }
  /// The next frame answers read `id` with all of `memory`.
  void expect_answer(std::uint64_t id) {
    const frame f = p.receive();
    BOOST_TEST_REQUIRE((f.h.type == frame_type::read_response && f.h.status == frame_status::ok));
    BOOST_TEST_REQUIRE(f.h.request_id == id);
    BOOST_TEST_REQUIRE((f.payload == memory));
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_responder_holds_back_a_peer_that_does_not_read) {
  raw_peer p;
  one_mib_reads load(p, 5);
  constexpr std::uint64_t requests = 64;
  // One request per segment: the responder's reads count them. Each of the first `cap` is read
  // (waited for); then it stops reading, with `cap` answers queued, none of them written
  // whole, and the rest wait in the kernel. `cap` is one more than the window a peer keeps to
  // (tcp_stream.hpp says why).
  constexpr std::uint64_t cap = detail::tcp_stream::max_queued_responses;
  static_assert(cap == detail::tcp_stream::max_unanswered + 1);
  static_assert(cap < requests);
  load.count_reads();
  for (std::uint64_t id = 1; id <= requests; ++id) {
    load.request(id);
    load.run_until_read(id, std::chrono::milliseconds(id <= cap ? 5000 : 20));
  }
  BOOST_TEST(load.reads() == cap);
  for (std::uint64_t id = 1; id <= requests; ++id) load.expect_answer(id);
}

// An answer counts against the hold on a peer's requests only while it waits: one TCP took
// whole, in the middle of a longer write, counts no more. A peer that keeps to its window and
// reads the answers as they come is not held back while the write of the later answers lasts.
BOOST_AUTO_TEST_CASE(answers_taken_whole_free_the_window_during_a_longer_write) {
  raw_peer p;
  one_mib_reads load(p, 6);
  constexpr std::uint64_t window = detail::tcp_stream::max_unanswered, taken = 4;
  for (std::uint64_t id = 1; id <= window; ++id) load.request(id);
  // The first answer goes out alone (its write started at once); the other 15 in one write,
  // of which these take the first answers whole.
  for (std::uint64_t id = 1; id <= taken; ++id) load.expect_answer(id);
  // As many new requests, one per segment: each is read while that write still lasts (counting
  // its answers until the whole write ends, the responder stops at the third: 17 queued).
  load.count_reads();
  for (std::uint64_t i = 1; i <= taken; ++i) {
    load.request(window + i);
    load.run_until_read(i, std::chrono::seconds(5));
    BOOST_TEST_REQUIRE(load.reads() == i, "request " << window + i << " was not read");
  }
  for (std::uint64_t id = taken + 1; id <= window + taken; ++id) load.expect_answer(id);
}

// Writes copies of `frame` to `a` as fast as it takes them, reading (and dropping) whatever
// `a` answers, until it stops taking them for a second or `limit` went out; returns how many
// went out. Small socket buffers keep the kernels' share to a few thousand frames.
namespace {
std::size_t push_until_held_back(raw_peer& p, const std::vector<std::byte>& frame, std::size_t limit) {
  p.a.set_option(asio::socket_base::receive_buffer_size(64 * 1024));
  p.raw.set_option(asio::socket_base::send_buffer_size(64 * 1024));
  p.raw.non_blocking(true);
  std::vector<std::byte> batch, answers(64 * 1024);
  for (int i = 0; i < 1000; ++i) batch.insert(batch.end(), frame.begin(), frame.end());
  std::size_t sent = 0;
  auto progress = std::chrono::steady_clock::now();
  while (sent < limit * frame.size() &&
         std::chrono::steady_clock::now() - progress < std::chrono::seconds(1)) {
    error_code ec, ignored;
    const std::size_t at = sent % batch.size();
    const std::size_t n = p.raw.write_some(asio::buffer(batch.data() + at, batch.size() - at), ec);
    if (n > 0) progress = std::chrono::steady_clock::now();
    sent += n;
    while (p.raw.read_some(asio::buffer(answers), ignored) > 0) {
    }
    p.io.restart();
    if (ec == asio::error::would_block) {
      p.io.run_for(std::chrono::milliseconds(10));
    } else {
      BOOST_TEST_REQUIRE(!ec, ec.message());
      p.io.poll();
    }
  }
  return sent / frame.size();
}
}  // namespace

// Messages the application does not take hold the peer back, empty ones too: each counts what
// holding it costs, not its 0 bytes (they were once read for ever, growing without bound).
BOOST_AUTO_TEST_CASE(unread_empty_messages_hold_the_peer_back) {
  raw_peer p;
  std::array<char, 8> buf{};
  outcome read;
  watch_stream(p, buf, read);             // so that `a` reads: stream bytes, which no message satisfies
  const std::size_t unbounded = 200'000;  // frames; the bound is 16,384 and the kernels' share
  BOOST_TEST(push_until_held_back(p, raw_peer::encode({.type = frame_type::message}), unbounded) < unbounded);
  BOOST_TEST(!read.done);  // still healthy, only paused
  outcome got;
  p.a.async_receive(asio::buffer(buf), record(got));
  run_until_done(p.io, [&] { return got.done; });
  BOOST_TEST((!got.ec && got.value == 0u), got.ec.message());
}

// So are the immediates of the peer's writes that no one takes.
BOOST_AUTO_TEST_CASE(untaken_immediates_hold_the_peer_back) {
  raw_peer p;
  std::vector<std::byte> memory(64);
  auto reg = p.a.register_memory(memory, verbs::access::remote_write);
  std::array<char, 8> buf{};
  outcome read;
  watch_stream(p, buf, read);
  const remote_buffer r = reg.remote();
  const auto write = raw_peer::encode({.type = frame_type::write_with_immediate,
                                       .request_id = 1,
                                       .remote_address = r.address,
                                       .rkey = r.rkey,
                                       .immediate = 7});
  const std::size_t unbounded = 400'000;  // the bound is 65,536
  BOOST_TEST(push_until_held_back(p, write, unbounded) < unbounded);
  BOOST_TEST(!read.done);
  outcome got;
  p.a.async_receive_immediate(record(got));
  run_until_done(p.io, [&] { return got.done; });
  BOOST_TEST((!got.ec && got.value == 7u), got.ec.message());
}

// An empty message is a frame of its own with no payload; it must not reuse another
// message's buffer. (Over RDMA an empty async_send completes without sending anything.)
BOOST_AUTO_TEST_CASE(empty_message_arrives_empty) {
  test::tcp_socket_pair p;
  const std::string sent[] = {"abc", "", "xyz"};
  for (const auto& message : sent) {  // all queued at b before it receives any
    outcome done;
    p.a.async_send(asio::buffer(message), record(done));
    run_until_done(p.io, [&] { return done.done; });
    BOOST_TEST(!done.ec, done.ec.message());
  }
  for (const auto& expected : sent) {
    std::array<char, 16> buf{};
    outcome got;
    p.b.async_receive(asio::buffer(buf), record(got));
    run_until_done(p.io, [&] { return got.done; });
    BOOST_TEST(!got.ec, got.ec.message());
    BOOST_TEST(std::string(buf.data(), got.value) == expected);
  }
}

// Whatever bytes a peer sends, the stream neither crashes nor hangs: it ends up failed or
// still serving, and closing it completes everything. The frames are random but mostly
// plausible (mostly requests, zero flags, a payload_length that mostly says what follows), so
// that checks past the first run, and aimed at and around a region registered in the middle of
// guarded memory: no byte outside the region may change, and some rounds must change it. Some
// rounds arrive a byte at a time, so that every frame is read in pieces.
BOOST_AUTO_TEST_CASE(random_frames_never_crash) {
  constexpr std::size_t region_size = 256;
  constexpr std::array requests{frame_type::write, frame_type::write_with_immediate, frame_type::read_request,
                                frame_type::atomic_fetch_add, frame_type::atomic_compare_swap};
  std::mt19937 rng(12345);
  int served = 0;  // rounds in which a frame changed the region
  for (int round = 0; round < 300; ++round) {
    raw_peer p;
    test::guarded_region target(p.a, region_size, test::all_remote_rights);
    const test::local_memory local(p.a, 64);
    const std::uint64_t region_start = target.remote().address;
    outcome read, op;
    std::array<char, 8> buf{};
    watch_stream(p, buf, read);
    p.a.async_read(local.slice(0, 64), target.remote(64, 64), record(op));
    std::vector<std::byte> bytes;
    for (int frames = 0; frames < 4; ++frames) {
      wire::frame_header h;
      std::size_t payload = 0;
      if (rng() % 4 != 0) {  // a request that sets only its own fields, aimed across the region's edges
        h.type = requests[rng() % requests.size()];
        h.request_id = rng() % 3;
        const std::uint64_t edge = region_start + (rng() % 2 ? 0 : region_size);
        h.remote_address = rng() % 8 ? edge - 48 + rng() % 96 : rng();
        h.rkey = rng() % 4 ? target.remote().rkey : static_cast<std::uint32_t>(rng());
        const bool atomic =
            h.type == frame_type::atomic_fetch_add || h.type == frame_type::atomic_compare_swap;
        if (atomic) h.compare_add = rng();
        if (h.type == frame_type::atomic_compare_swap) h.swap = rng();
        if (!atomic) h.length = rng() % 8 ? rng() % 96 : static_cast<std::uint32_t>(rng());
        if (h.type == frame_type::write)
          payload = rng() % 4 ? std::min<std::size_t>(h.length, rng() % 300) : rng() % 300;
        if (h.type == frame_type::write_with_immediate) {
          h.immediate = rng();
          payload = rng() % 4 ? std::min<std::size_t>(h.length, 300) : rng() % 300;
        }
      } else {  // anything of a known type
        payload = rng() % 3 == 0 ? rng() % 300 : 0;
        h = {.type = static_cast<frame_type>(1 + rng() % 12),
             .request_id = rng() % 3,
             .remote_address = rng(),
             .rkey = rng() % 2 ? target.remote().rkey : static_cast<std::uint32_t>(rng()),
             .length = static_cast<std::uint32_t>(rng() % 2 ? rng() % 300 : rng()),
             .compare_add = rng() % 2 ? 0 : rng(),
             .status = static_cast<frame_status>(rng() % 6)};
      }
      h.payload_length = static_cast<std::uint32_t>(rng() % 8 ? payload : rng() % 300);
      std::vector<std::byte> header(wire::header_size);
      wire::encode_header(h, std::span<std::byte, wire::header_size>(header.data(), wire::header_size));
      if (rng() % 8 == 0) header[rng() % wire::header_size] = static_cast<std::byte>(rng());
      bytes.insert(bytes.end(), header.begin(), header.end());
      for (std::size_t i = 0; i < payload; ++i) bytes.push_back(static_cast<std::byte>(rng()));
    }
    if (round % 10 == 0) {
      for (const std::byte b : bytes) {
        p.send_bytes(std::span(&b, 1));
        p.io.restart();
        p.io.poll();
      }
    } else {
      p.send_bytes(bytes);
    }
    p.io.restart();
    p.io.run_for(std::chrono::milliseconds(5));
    p.a.close();
    run_until_done(p.io, [&] { return read.done && op.done; });
    BOOST_TEST_REQUIRE(target.guards_untouched(), "round " << round << " wrote outside the region");
    served += !target.untouched();
  }
  BOOST_TEST(served > 0, "no frame changed the region");
}

BOOST_AUTO_TEST_SUITE_END()
