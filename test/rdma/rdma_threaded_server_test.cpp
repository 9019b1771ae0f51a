// A multi-threaded server over RDMA: a strand per connection, or a context per thread
// (test/threaded_server_tests.hpp).
#include <boost/test/unit_test.hpp>

#include "threaded_server_tests.hpp"

BOOST_AUTO_TEST_SUITE(rdma_threaded_server)

BOOST_AUTO_TEST_CASE(echo_on_strands) {
  coverbs::test::threaded_echo_server(coverbs::transport::rdma);
}
BOOST_AUTO_TEST_CASE(echo_on_a_context_per_thread) {
  coverbs::test::context_per_thread_echo_server(coverbs::transport::rdma);
}

BOOST_AUTO_TEST_SUITE_END()
