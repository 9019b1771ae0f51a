// The TCP fallback behind coverbs::socket on loopback: the same stream test bodies as RDMA.
#include <boost/test/unit_test.hpp>

#include <string>

#include "raw_peer.hpp"
#include "stream_tests.hpp"
#include "tcp_socket_pair.hpp"

using namespace coverbs;
using coverbs::test::tcp_socket_pair;

BOOST_AUTO_TEST_SUITE(tcp_stream)

BOOST_AUTO_TEST_CASE(bulk_transfer_both_ways) {
  tcp_socket_pair p;
  test::bulk_both_ways(p.io, p.a, p.b, 64 << 20);
}

BOOST_AUTO_TEST_CASE(lines_and_eof) {
  tcp_socket_pair p;
  test::lines_then_eof(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(messages) {
  tcp_socket_pair p(4096);
  test::messages_keep_boundaries(p.io, p.a, p.b);
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

// After a large data frame, a waiting reader takes the next one's payload straight from the
// socket: only its header goes through the inbox, not the first 16 KiB of it too.
BOOST_AUTO_TEST_CASE(large_frames_reach_a_waiting_read_uncopied) {
  namespace wire = coverbs::wire;
  test::raw_peer p;
  constexpr std::uint32_t size = 64 * 1024;
  std::vector<char> buf(size);
  std::string got;
  const auto read_frame = [&](char c) {
    const std::uint64_t direct_before = p.a.impl()->direct_bytes_read();
    while (got.size() < size) {
      test::outcome read;
      p.a.async_read_some(boost::asio::buffer(buf.data(), size - got.size()), test::record(read));
      if (got.empty()) {  // the read waits before the frame is sent
        const std::vector<std::byte> payload(size, static_cast<std::byte>(c));
        p.send({.type = wire::frame_type::data}, payload);
      }
      test::run_until_done(p.io, [&] { return read.done; });
      BOOST_TEST_REQUIRE(!read.ec, read.ec.message());
      got.append(buf.data(), read.value);
    }
    BOOST_TEST(got == std::string(size, c));
    got.clear();
    return p.a.impl()->direct_bytes_read() - direct_before;
  };
  read_frame('a');  // the first: its header comes with whatever else had arrived
  BOOST_TEST(read_frame('b') == size);
  BOOST_TEST(read_frame('c') == size);
}

BOOST_AUTO_TEST_SUITE_END()
