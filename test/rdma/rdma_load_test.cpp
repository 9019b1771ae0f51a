// 64 concurrent RDMA connections, 4 MiB each (the VM emulates the CPU), random sizes.
#include <boost/test/unit_test.hpp>

#include "load_tests.hpp"

BOOST_AUTO_TEST_CASE(sixty_four_connections_of_4_mib) {
  // Small pools keep 128 connection ends within the VM's memory.
  coverbs::test::many_connections(coverbs::transport::rdma, 64, 4u << 20,
                                  {.receive_buffers = 8, .buffer_size = 16 * 1024});
}
