// The TCP fallback behind coverbs::socket on loopback: the same stream test bodies as RDMA.
#include <boost/test/unit_test.hpp>

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

BOOST_AUTO_TEST_SUITE_END()
