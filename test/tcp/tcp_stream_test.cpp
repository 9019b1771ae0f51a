// The TCP fallback behind coverbs::socket on loopback: the same stream test bodies as RDMA.
#include <boost/test/unit_test.hpp>

#include <string>

#include "raw_peer.hpp"
#include "resource_usage.hpp"
#include "stream_tests.hpp"
#include "tcp_socket_pair.hpp"

using namespace coverbs;
using coverbs::test::tcp_socket_pair;
namespace asio = boost::asio;

BOOST_AUTO_TEST_SUITE(tcp_stream)

BOOST_AUTO_TEST_CASE(bulk_transfer_both_ways) {
  tcp_socket_pair p;
  test::bulk_both_ways(p.io, p.a, p.b, 64 << 20);
}

BOOST_AUTO_TEST_CASE(lines_and_eof) {
  tcp_socket_pair p;
  test::lines_then_eof(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(end_of_stream_outlasts_the_connection) {
  tcp_socket_pair p;
  test::end_of_stream_outlasts_the_connection(p.io, p.a, p.b);
}

// A peer whose close frame is followed by a reset (its socket closed with SO_LINGER 0): reads
// still end with eof, as a TCP socket's reads give 0 after the peer's FIN whatever came next.
// (With a tcp_socket_pair the peer's FIN itself ends the connection, with eof.)
BOOST_AUTO_TEST_CASE(end_of_stream_outlasts_a_reset) {
  test::raw_peer p;
  const std::string last = "last";
  p.send({.type = wire::frame_type::data}, std::as_bytes(std::span(last)));
  p.send({.type = wire::frame_type::close});
  p.raw.set_option(boost::asio::socket_base::linger(true, 0));
  p.raw.close();
  std::array<char, 8> buf{};
  test::outcome read;
  boost::asio::async_read(p.a, boost::asio::buffer(buf), test::record(read));
  test::run_until_done(p.io, [&] { return read.done; });
  BOOST_TEST((read.ec == boost::asio::error::eof), read.ec.message());
  BOOST_TEST(std::string(buf.data(), read.value) == last);
  // The reset reaches the stream by its reads or by a write's: then writes fail.
  test::outcome wrote;
  for (int i = 0; i < 200 && !wrote.ec; ++i) {
    wrote = {};
    p.a.async_write_some(boost::asio::buffer(last), test::record(wrote));
    test::run_until_done(p.io, [&] { return wrote.done; });
    p.io.restart();
    p.io.run_for(std::chrono::milliseconds(10));
  }
  BOOST_TEST_REQUIRE(static_cast<bool>(wrote.ec), "writes into the reset connection never failed");
  test::outcome again;
  p.a.async_read_some(boost::asio::buffer(buf), test::record(again));
  test::run_until_done(p.io, [&] { return again.done; });
  BOOST_TEST((again.ec == boost::asio::error::eof), again.ec.message());
}

BOOST_AUTO_TEST_CASE(messages) {
  tcp_socket_pair p(4096);
  test::messages_keep_boundaries(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(throwing_read_handlers) {
  tcp_socket_pair p;
  test::throwing_read_handlers_leave_run_and_the_stream_goes_on(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(throwing_write_handlers) {
  // Small kernel buffers: the body's small writes are queued in part, so that the large write
  // and the message behind them are gathered into one write and ended by one completion.
  tcp_socket_pair p(64 * 1024, test::peer_context::shared, 4096);
  test::throwing_write_handlers_leave_run_and_the_stream_goes_on(p.io, p.a, p.b, 2 * 15 * 1024);
}

BOOST_AUTO_TEST_CASE(large_messages) {
  tcp_socket_pair p;
  test::large_messages_between_stream_writes(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(cancelled_send) {
  tcp_socket_pair p;
  test::send_cancelled_at_once_is_all_or_nothing(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(cancelled_read) {
  tcp_socket_pair p;
  test::read_cancelled_by_timer_leaves_connection_usable(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(waiting_reads) {
  tcp_socket_pair p;
  test::waiting_reads_of_random_sizes(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(close) {
  tcp_socket_pair p;
  test::close_aborts_pending_and_peer_sees_eof(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(close_delivers_what_was_written) {
  tcp_socket_pair p;
  test::close_delivers_what_was_written(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(shutdown_receive_ends_reads) {
  tcp_socket_pair p;
  test::shutdown_receive_ends_reads(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(fast_peer_leaves_room_for_other_handlers) {
  tcp_socket_pair p(64 * 1024, test::peer_context::own);
  test::fast_peer_leaves_room_for_other_handlers(p.io, p.a, p.peer_io, p.b);
}

// As a read on a TCP socket takes whatever has arrived, a waiting read takes the payloads of all
// the data frames that arrived together, not one frame's; a message among them ends it there.
BOOST_AUTO_TEST_CASE(one_read_takes_the_data_frames_that_arrived_together) {
  namespace wire = coverbs::wire;
  test::raw_peer p;
  std::array<char, 1000> buf{};
  test::outcome read;
  p.a.async_read_some(boost::asio::buffer(buf), test::record(read));
  std::vector<std::byte> bytes;
  const auto append = [&](wire::frame_type type, char c, std::uint32_t size) {
    const std::vector<std::byte> payload(size, static_cast<std::byte>(c));
    const std::vector<std::byte> frame = test::raw_peer::encode(
        {.type = type, .length = type == wire::frame_type::message ? size : 0}, payload);
    bytes.insert(bytes.end(), frame.begin(), frame.end());
  };
  append(wire::frame_type::data, 'a', 100);
  append(wire::frame_type::data, 'b', 200);
  append(wire::frame_type::data, 'c', 300);
  append(wire::frame_type::message, 'm', 10);
  append(wire::frame_type::data, 'd', 50);
  p.send_bytes(bytes);  // one system call: they arrive together
  test::run_until_done(p.io, [&] { return read.done; });
  BOOST_TEST(!read.ec, read.ec.message());
  BOOST_TEST(std::string(buf.data(), read.value) ==
             std::string(100, 'a') + std::string(200, 'b') + std::string(300, 'c'));

  std::array<char, 64> message{};
  test::outcome received;
  p.a.async_receive(boost::asio::buffer(message), test::record(received));
  test::run_until_done(p.io, [&] { return received.done; });
  BOOST_TEST(std::string(message.data(), received.value) == std::string(10, 'm'));
  p.a.async_read_some(boost::asio::buffer(buf), test::record(read = {}));
  test::run_until_done(p.io, [&] { return read.done; });
  BOOST_TEST(std::string(buf.data(), read.value) == std::string(50, 'd'));
}

// Sends a 64 KiB frame of `type` filled with `c` once `a` waits for it with a read (data) or a
// receive (message), and returns how many of its bytes went straight from the socket into the
// operation's buffers.
std::uint64_t large_frame_to_a_waiting_operation(test::raw_peer& p, coverbs::wire::frame_type type, char c) {
  constexpr std::uint32_t size = 64 * 1024;
  const bool message = type == coverbs::wire::frame_type::message;
  const std::uint64_t direct_before = p.a.impl()->direct_bytes_read();
  std::vector<char> buf(size);
  std::size_t got = 0;
  while (got < size) {
    test::outcome done;
    const auto into = boost::asio::buffer(buf.data() + got, size - got);
    if (message) {
      p.a.async_receive(into, test::record(done));
    } else {
      p.a.async_read_some(into, test::record(done));
    }
    if (got == 0) {  // the operation waits before the frame is sent
      const std::vector<std::byte> payload(size, static_cast<std::byte>(c));
      p.send({.type = type, .length = message ? size : 0}, payload);
    }
    test::run_until_done(p.io, [&] { return done.done; });
    BOOST_TEST_REQUIRE(!done.ec, done.ec.message());
    got += done.value;
  }
  BOOST_TEST(std::string(buf.data(), size) == std::string(size, c));
  return p.a.impl()->direct_bytes_read() - direct_before;
}

// After a large data frame, a waiting read takes the next one's payload straight from the
// socket: only its header goes through the inbox, not the first 16 KiB of it too.
BOOST_AUTO_TEST_CASE(large_frames_reach_a_waiting_read_uncopied) {
  test::raw_peer p;
  large_frame_to_a_waiting_operation(p, coverbs::wire::frame_type::data, 'a');  // its header came with more
  BOOST_TEST(large_frame_to_a_waiting_operation(p, coverbs::wire::frame_type::data, 'b') == 64 * 1024u);
  BOOST_TEST(large_frame_to_a_waiting_operation(p, coverbs::wire::frame_type::data, 'c') == 64 * 1024u);
}

// Between frames the stream reads its socket only while input is wanted
// (docs/tcp-fallback-protocol.md, "Reading on demand"): a frame that comes while nothing waits
// stays in the kernel until a read asks for it, as on a TCP socket. (A read kept posted was made
// as soon as the previous frame had been handled, when the answer could not have come yet.)
BOOST_AUTO_TEST_CASE(reads_the_socket_only_when_input_is_wanted) {
  test::raw_peer p;
  // The peer's hello, read while it was awaited.
  test::run_until_done(
      p.io, [&] { return p.stream->socket_reads() > 0; }, std::chrono::seconds(10));
  const std::uint64_t reads = p.stream->socket_reads();
  const std::string word = "word";
  p.send({.type = wire::frame_type::data}, std::as_bytes(std::span(word)));
  p.io.restart();
  p.io.run_for(std::chrono::milliseconds(100));
  BOOST_TEST(p.stream->socket_reads() == reads);  // nothing asked for it yet
  std::array<char, 8> buf{};
  test::outcome read;
  p.a.async_read_some(boost::asio::buffer(buf), test::record(read));
  test::run_until_done(p.io, [&] { return read.done; });
  BOOST_TEST(!read.ec);
  BOOST_TEST(std::string(buf.data(), read.value) == word);
  BOOST_TEST(p.stream->socket_reads() == reads + 1);
}

// read_frames yields to the scheduler after 16 socket reads in one turn (so that a fast peer
// cannot starve other handlers), and a turn begins wherever the scheduler calls in. Each round
// here takes one such read: two 10 KiB data frames arrive together, the inbox's 16 KiB read
// ends inside the second, and its rest is read for the waiting read at once. So every round
// runs as many handlers as the one before; a count kept across turns made the sixteenth round
// yield once more.
BOOST_AUTO_TEST_CASE(a_turn_counts_its_own_socket_reads) {
  test::raw_peer p;
  const std::vector<std::byte> payload(10 * 1024, std::byte{'x'});
  std::vector<std::byte> bytes = test::raw_peer::encode({.type = wire::frame_type::data}, payload);
  const std::vector<std::byte> second = bytes;
  bytes.insert(bytes.end(), second.begin(), second.end());
  std::vector<char> buf(2 * payload.size());
  std::vector<std::size_t> handlers;
  for (int round = 0; round < 24; ++round) {
    test::outcome read;
    p.a.async_read_some(boost::asio::buffer(buf), test::record(read));
    p.send_bytes(bytes);  // in the kernel, whole, before the stream reads
    p.io.restart();
    std::size_t ran = 0;
    for (int i = 0; i < 100 && !read.done; ++i) ran += p.io.run_one_for(std::chrono::seconds(1));
    BOOST_TEST_REQUIRE(read.done);
    BOOST_TEST_REQUIRE(!read.ec, read.ec.message());
    BOOST_TEST_REQUIRE(read.value == buf.size());
    ran += p.io.poll();
    handlers.push_back(ran);
  }
  for (std::size_t round = 2; round < handlers.size(); ++round) {
    BOOST_TEST(handlers[round] == handlers[1], "round " << round);
  }
}

// A large message goes straight into a receive that waits for it, as a read on an Asio socket
// reads into the caller's buffer, rather than into a slot of the stream's first and then
// copied (messages_in_parts covers a message that comes in parts).
BOOST_AUTO_TEST_CASE(large_messages_reach_a_waiting_receive_uncopied) {
  test::raw_peer p;
  large_frame_to_a_waiting_operation(p, coverbs::wire::frame_type::message, 'a');
  BOOST_TEST(large_frame_to_a_waiting_operation(p, coverbs::wire::frame_type::message, 'b') == 64 * 1024u);
  BOOST_TEST(large_frame_to_a_waiting_operation(p, coverbs::wire::frame_type::message, 'c') == 64 * 1024u);
}

// After a large frame the next one's header and payload come by one read system call, the
// payload straight into the waiting read or receive, as one read on an Asio socket takes both
// (before, the header had a read of its own).
BOOST_AUTO_TEST_CASE(a_large_frame_after_another_takes_one_read) {
  for (const auto type : {coverbs::wire::frame_type::message, coverbs::wire::frame_type::data}) {
    test::raw_peer p;
    // Else the frame's last bytes wait for an acknowledgement (Nagle), and a second read with them.
    p.raw.set_option(boost::asio::ip::tcp::no_delay(true));
    large_frame_to_a_waiting_operation(p, type, 'a');
    const std::uint64_t reads = p.stream->socket_reads();
    BOOST_TEST(large_frame_to_a_waiting_operation(p, type, 'b') == 64 * 1024u);
    BOOST_TEST(p.stream->socket_reads() - reads == 1u);
  }
}

namespace {

std::vector<std::byte> frame_of(coverbs::wire::frame_type type, char c, std::size_t size) {
  const std::vector<std::byte> payload(size, static_cast<std::byte>(c));
  const bool message = type == coverbs::wire::frame_type::message;
  return test::raw_peer::encode({.type = type, .length = message ? static_cast<std::uint32_t>(size) : 0},
                                payload);
}

std::vector<std::byte> joined(std::initializer_list<std::vector<std::byte>> frames) {
  std::vector<std::byte> all;
  for (const auto& f : frames) all.insert(all.end(), f.begin(), f.end());
  return all;
}

// Starts a receive (`message`) or a read into `buf`, recorded in `done`.
void start_taking(test::raw_peer& p, bool message, std::string& buf, test::outcome& done) {
  if (message) {
    p.a.async_receive(boost::asio::buffer(buf), test::record(done));
  } else {
    p.a.async_read_some(boost::asio::buffer(buf), test::record(done));
  }
}

// What one read or receive of `room` bytes gets, with `bytes` sent once it waits: its error
// and its bytes.
std::pair<error_code, std::string> take(test::raw_peer& p, bool message, std::size_t room,
                                        const std::vector<std::byte>& bytes = {}) {
  std::string buf(room, '\0');
  test::outcome done;
  start_taking(p, message, buf, done);
  if (!bytes.empty()) p.send_bytes(bytes);  // one system call
  test::run_until_done(p.io, [&] { return done.done; });
  buf.resize(done.value);
  return {done.ec, buf};
}

}  // namespace

// The read after a large frame fills the waiting operation's buffers before the header says
// what came; what may not stay there (bytes of the frames after a smaller payload, a frame of
// another kind, a message too long for the receive) goes back to the inbox and reaches its own
// operation whole and in order.
BOOST_AUTO_TEST_CASE(what_follows_a_large_frame_reaches_its_own_operation) {
  using coverbs::wire::frame_type;
  test::raw_peer p;
  constexpr std::size_t room = 64 * 1024;

  // A smaller message, then stream bytes.
  large_frame_to_a_waiting_operation(p, frame_type::message, 'a');
  auto [ec, got] = take(
      p, true, room, joined({frame_of(frame_type::message, 'm', 100), frame_of(frame_type::data, 'd', 300)}));
  BOOST_TEST(!ec);
  BOOST_TEST(got == std::string(100, 'm'));
  BOOST_TEST(take(p, false, room).second == std::string(300, 'd'));

  // A message longer than the receive: it stays queued, whole, for a larger one.
  large_frame_to_a_waiting_operation(p, frame_type::message, 'b');
  std::tie(ec, got) = take(p, true, room, frame_of(frame_type::message, 'x', 100 * 1024));
  BOOST_TEST((ec == boost::asio::error::message_size), ec.message());
  std::tie(ec, got) = take(p, true, 128 * 1024);
  BOOST_TEST(!ec);
  BOOST_TEST(got == std::string(100 * 1024, 'x'));

  // A message while a read waits, then stream bytes.
  large_frame_to_a_waiting_operation(p, frame_type::data, 'c');
  std::tie(ec, got) = take(
      p, false, room, joined({frame_of(frame_type::message, 'n', 50), frame_of(frame_type::data, 'e', 200)}));
  BOOST_TEST(!ec);
  BOOST_TEST(got == std::string(200, 'e'));
  BOOST_TEST(take(p, true, room).second == std::string(50, 'n'));

  // A large message and a large data frame that come in two parts.
  for (const auto type : {frame_type::message, frame_type::data}) {
    const bool message = type == frame_type::message;
    large_frame_to_a_waiting_operation(p, type, 'f');
    const std::vector<std::byte> whole = frame_of(type, 'g', room);
    const std::size_t first = coverbs::wire::header_size + 20 * 1024;
    std::string buf(room, '\0');
    test::outcome done;
    start_taking(p, message, buf, done);
    p.send_bytes(std::span(whole).first(first));
    if (message) {  // a message must be whole
      p.io.restart();
      p.io.run_for(std::chrono::milliseconds(50));
      BOOST_TEST(!done.done);
    } else {  // a read takes what came
      test::run_until_done(
          p.io, [&] { return done.done; }, std::chrono::seconds(10));
    }
    p.send_bytes(std::span(whole).subspan(first));
    test::run_until_done(p.io, [&] { return done.done; });
    BOOST_TEST(!done.ec);
    std::string all = buf.substr(0, done.value);
    if (!message) all += take(p, false, room).second;
    BOOST_TEST(all == std::string(room, 'g'));
  }
}

// Bytes that went back to the inbox can grow it past its usual size, and a frame among them
// can then be handed out from it as a segment, with the start of the next header kept behind
// it: the next read must move that header into a fresh inbox large enough, at its front (a
// helper review found it copied at its old offset into a 16 KiB slot; ASan saw the overflow).
BOOST_AUTO_TEST_CASE(a_grown_inbox_held_by_a_segment_moves_its_rest) {
  using coverbs::wire::frame_type;
  using coverbs::wire::header_size;
  constexpr std::size_t room = 32 * 1024;
  for (const bool data : {false, true}) {
    test::raw_peer p;
    BOOST_TEST_REQUIRE(take(p, true, room, frame_of(frame_type::message, 'a', room)).second ==
                       std::string(room, 'a'));
    // The read after it fills the waiting receive; the frame that comes is a small message
    // (its rest goes back) or stream bytes (all of them go back); 30 bytes of the last header
    // lie past the receive's room.
    const std::size_t middle = data ? room - 30 : room - 30 - 1000 - header_size;
    std::vector<std::byte> bytes =
        data ? joined({frame_of(frame_type::data, 'd', middle), frame_of(frame_type::message, 'm', 100)})
             : joined({frame_of(frame_type::message, 'b', 1000), frame_of(frame_type::message, 'c', middle),
                       frame_of(frame_type::message, 'm', 100)});
    auto [ec, got] = take(p, true, room, bytes);
    BOOST_TEST(!ec, ec.message());
    if (data) {
      BOOST_TEST(got == std::string(100, 'm'));
      std::string all;
      while (all.size() < middle && !ec) {
        auto [e, part] = take(p, false, room);
        ec = e;
        all += part;
      }
      BOOST_TEST(all == std::string(middle, 'd'));
    } else {
      BOOST_TEST(got == std::string(1000, 'b'));
      BOOST_TEST(take(p, true, room).second == std::string(middle, 'c'));
      BOOST_TEST(take(p, true, room).second == std::string(100, 'm'));
    }
  }
}

// Unread bytes count against the receiver's 4 MiB by the memory that holds them. A slot freed
// by a 1 MiB message keeps its capacity; one byte of stream data left unread in it, counted as
// 256 bytes, pinned that megabyte: a peer that alternated the two grew the receiver by 1 MiB a
// round while the application took every message.
BOOST_AUTO_TEST_CASE(unread_bytes_count_by_the_memory_that_holds_them) {
  using coverbs::wire::frame_type;
  test::raw_peer p;
  std::vector<std::byte> region(64);
  const auto registration = p.a.register_memory(region, verbs::access::remote_read);  // a reads on
  constexpr std::size_t big = 1 << 20;
  const auto message = test::raw_peer::encode({.type = frame_type::message, .length = big},
                                              std::vector<std::byte>(big, std::byte{'m'}));
  const auto one_byte =
      test::raw_peer::encode({.type = frame_type::data}, std::vector<std::byte>(1, std::byte{'d'}));
  const remote_buffer r = registration.remote();
  const auto read_request = test::raw_peer::encode({.type = frame_type::read_request,
                                                    .request_id = 1,
                                                    .remote_address = r.address,
                                                    .rkey = r.rkey,
                                                    .length = 8});
  std::vector<char> into(big);
  constexpr int rounds = 32;
  const std::size_t before = test::heap_bytes();
  for (int i = 0; i < rounds; ++i) {
    // The message, then a read request: its answer shows the message was taken into a slot,
    // with no receive waiting.
    test::outcome sent;
    asio::async_write(p.raw, std::array{asio::buffer(message), asio::buffer(read_request)},
                      test::record(sent));
    const test::frame answer = p.receive();
    BOOST_TEST_REQUIRE(
        (answer.h.type == frame_type::read_response && answer.h.status == wire::frame_status::ok));
    test::outcome received;
    p.a.async_receive(asio::buffer(into), test::record(received));
    test::run_until_done(p.io, [&] { return sent.done && received.done; });
    BOOST_TEST_REQUIRE((!received.ec && received.value == big));
    p.send_bytes(one_byte);  // into the slot just freed: nobody reads stream bytes
  }
  p.send_bytes(read_request);  // every byte has arrived once its answer has
  BOOST_TEST((p.receive().h.type == frame_type::read_response));
  BOOST_TEST(p.a.available() == static_cast<std::size_t>(rounds));
  const std::size_t grown = test::heap_bytes() - std::min(before, test::heap_bytes());
  BOOST_TEST(grown < std::size_t{4} << 20,
             "the receiver grew by " << grown << " bytes over " << rounds << " rounds");
}

// close() lets queued frames go out, but not while one-sided operations are outstanding, as
// over RDMA: closing flushes them, so their request frames must not reach the peer afterwards
// (a write or compare-and-swap would take effect after its requester was told it did not).
BOOST_AUTO_TEST_CASE(close_sends_no_request_it_flushed) {
  using coverbs::wire::frame_type;
  test::raw_peer p;  // reads nothing until the end: a's frames queue up
  std::vector<std::byte> local(64);
  const auto registration = p.a.register_memory(local, verbs::access::none);
  // Large writes go out from this buffer, one frame each: the one the kernel has no room for
  // waits in the queue, and the read's request frame queues behind it.
  const std::vector<std::byte> chunk(64 * 1024);
  test::outcome wrote;
  do {
    wrote = {};
    p.a.async_write_some(asio::buffer(chunk), test::record(wrote));
    p.io.restart();
    for (int i = 0; i < 30 && !wrote.done; ++i) p.io.run_one_for(std::chrono::milliseconds(10));
  } while (wrote.done);
  test::outcome read;
  p.a.async_read(registration.slice(0, 8), remote_buffer{.address = 64, .rkey = 77, .length = 8},
                 test::record(read));
  p.io.restart();
  p.io.poll();
  p.a.close();
  std::vector<std::byte> all;  // everything a's side sent, until its end, read as it comes
  test::outcome drained;
  asio::async_read(p.raw, asio::dynamic_buffer(all), test::record(drained));
  test::run_until_done(p.io, [&] { return read.done && wrote.done && drained.done; });
  BOOST_TEST((read.ec == make_error_code(wc_errc::flushed)), read.ec.message());
  std::size_t frames = 0, requests = 0;
  // (The last frame may be cut short: the connection closed at once, under way.)
  for (std::size_t at = 0; at + wire::header_size <= all.size();) {
    wire::frame_header h;
    BOOST_TEST_REQUIRE(!wire::decode_header(
        std::span<const std::byte, wire::header_size>(all.data() + at, wire::header_size), h));
    ++frames;
    requests += h.type == frame_type::read_request;
    at += wire::header_size + h.payload_length;
  }
  BOOST_TEST(frames > 1u);
  BOOST_TEST(requests == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
