// Limits and access control across connections over RDMA through rdma_cm, in the Soft-RoCE
// VM: the very bodies that the TCP fallback runs (test/tcp/tcp_limits_test.cpp).
#include <boost/test/unit_test.hpp>

#include "access_tests.hpp"

BOOST_AUTO_TEST_SUITE(rdma_limits)

COVERBS_LIMITS_TEST_CASES(coverbs::transport::rdma, std::chrono::seconds(60))

BOOST_AUTO_TEST_SUITE_END()
