// Limits and access control across connections over the TCP fallback (test/limits_tests.hpp
// and access_tests.hpp, shared with RDMA).
#include <boost/test/unit_test.hpp>

#include "access_tests.hpp"

BOOST_AUTO_TEST_SUITE(tcp_limits)

COVERBS_LIMITS_TEST_CASES(coverbs::transport::tcp, std::chrono::seconds(20))

BOOST_AUTO_TEST_SUITE_END()
