// One-sided operations of coverbs::socket over RDMA, on loopback queue pairs: the very bodies
// that the TCP transport runs (test/tcp/tcp_one_sided_test.cpp).
#include <boost/test/unit_test.hpp>

#include "one_sided_tests.hpp"
#include "rdma_socket_pair.hpp"

using namespace coverbs;
using coverbs::test::rdma_socket_pair;

BOOST_AUTO_TEST_SUITE(rdma_one_sided)

COVERBS_ONE_SIDED_TEST_CASES(rdma_socket_pair)

BOOST_AUTO_TEST_SUITE_END()
