// One-sided operations of coverbs::socket over RDMA, on loopback queue pairs: the very bodies
// that the TCP transport runs (test/tcp/tcp_one_sided_test.cpp).
#include <boost/test/unit_test.hpp>

#include "one_sided_tests.hpp"
#include "rdma_socket_pair.hpp"

using namespace coverbs;
using coverbs::test::rdma_socket_pair;
using coverbs::test::violation;

BOOST_AUTO_TEST_SUITE(rdma_one_sided)

BOOST_AUTO_TEST_CASE(write_then_read_back) {
  rdma_socket_pair p;
  test::write_then_read_back(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(write_with_immediate) {
  rdma_socket_pair p;
  test::write_with_immediate_shows_the_data_first(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(atomics) {
  rdma_socket_pair p;
  test::atomics_return_the_previous_value(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(pipeline_both_ways) {
  rdma_socket_pair p;
  test::operations_pipeline_both_ways(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(bad_arguments_refused_locally) {
  rdma_socket_pair p;
  test::bad_arguments_are_refused_locally(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_CASE(one_sided_after_shutdown) {
  rdma_socket_pair p;
  test::one_sided_after_shutdown(p.io, p.a, p.b);
}

// Each refusal on a fresh connection, since it ends the connection.
#define COVERBS_REFUSED(name)                                                         \
  BOOST_AUTO_TEST_CASE(refused_##name) {                                              \
    rdma_socket_pair p;                                                              \
    test::refused_operation_fails_the_connection(p.io, p.a, p.b, violation::name);    \
  }
COVERBS_REFUSED(wrong_rkey)
COVERBS_REFUSED(write_past_the_end)
COVERBS_REFUSED(read_before_the_start)
COVERBS_REFUSED(write_without_remote_write)
COVERBS_REFUSED(read_without_remote_read)
COVERBS_REFUSED(atomic_without_remote_atomic)
COVERBS_REFUSED(atomic_past_the_end)
COVERBS_REFUSED(deregistered)
#undef COVERBS_REFUSED

BOOST_AUTO_TEST_SUITE_END()
