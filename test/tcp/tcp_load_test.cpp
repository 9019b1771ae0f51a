// 64 concurrent TCP-fallback connections, 64 MiB each, random read and write sizes.
#include <boost/test/unit_test.hpp>

#include "load_tests.hpp"

BOOST_AUTO_TEST_CASE(sixty_four_connections_of_64_mib) {
  coverbs::test::many_connections(coverbs::transport::tcp, 64, 64u << 20);
}
