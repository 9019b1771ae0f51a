// Connect/close cycles over the TCP fallback: no descriptor or memory growth
// (test/connect_cycles_tests.hpp, shared with RDMA).
#include <boost/test/unit_test.hpp>

#include "connect_cycles_tests.hpp"

BOOST_AUTO_TEST_CASE(connect_close_cycles_leak_nothing) {
  coverbs::test::connect_close_cycles(coverbs::transport::tcp);
}
