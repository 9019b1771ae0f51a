// The RDMA stream protocol (credits over pre-registered pools) behind coverbs::socket, on
// loopback queue pairs: the shared stream test bodies, plus what is specific to credits.
#include <boost/test/unit_test.hpp>

#include "rdma_socket_pair.hpp"
#include "stream_tests.hpp"

using namespace coverbs;
using coverbs::test::rdma_socket_pair;

BOOST_AUTO_TEST_SUITE(rdma_stream)

BOOST_AUTO_TEST_CASE(bulk_transfer_both_ways) {
  rdma_socket_pair p;
  test::bulk_both_ways(p.io, p.a, p.b, 4 << 20);
}

BOOST_AUTO_TEST_CASE(tiny_pool_forces_credit_returns) {
  // Two 1 KiB buffers: every message waits for a credit report; a lost one would hang here.
  rdma_socket_pair p({.buffers = 2, .buffer_size = 1024});
  test::bulk_both_ways(p.io, p.a, p.b, 256 * 1024);
}

BOOST_AUTO_TEST_CASE(busy_polling) {
  rdma_socket_pair p({}, polling_mode::busy);
  test::bulk_both_ways(p.io, p.a, p.b, 1 << 20);
}

BOOST_AUTO_TEST_CASE(lines_and_eof) {
  rdma_socket_pair p;
  test::lines_then_eof(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(messages) {
  rdma_socket_pair p({.buffers = 4, .buffer_size = 4096});
  test::messages_keep_boundaries(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(large_messages) {
  rdma_socket_pair p;
  test::large_messages_between_stream_writes(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(cancelled_send) {
  rdma_socket_pair p;
  test::send_cancelled_at_once_is_all_or_nothing(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(cancelled_read) {
  rdma_socket_pair p;
  test::read_cancelled_by_timer_leaves_connection_usable(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(waiting_reads) {
  rdma_socket_pair p;
  test::waiting_reads_of_random_sizes(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(close) {
  rdma_socket_pair p;
  test::close_aborts_pending_and_peer_sees_eof(p.io, p.a, p.b, false);
}

BOOST_AUTO_TEST_SUITE_END()
