// Connect/close cycles over RDMA (rdma_cm): no growth in descriptors, queue pairs, memory
// regions or memory (test/connect_cycles_tests.hpp, shared with TCP).
#include <boost/test/unit_test.hpp>

#include "connect_cycles_tests.hpp"

BOOST_AUTO_TEST_CASE(connect_close_cycles_leak_nothing) {
  // Small receive pools: registering the default 2 MiB pools is a quarter of each cycle in the
  // emulated VM (150 ms against 110 ms), and a leak shows the same at any pool size.
  coverbs::test::connect_close_cycles(coverbs::transport::rdma, {.receive_buffers = 8, .buffer_size = 4096});
}
