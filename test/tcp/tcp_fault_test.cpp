// Faults over the TCP fallback: the peer process killed, closes during one-sided operations, a
// slow reader, queues filled beyond their depth (test/fault_tests.hpp, shared with RDMA).
#include <boost/test/unit_test.hpp>

#include "fault_tests.hpp"
#include "peer_kill_tests.hpp"

BOOST_AUTO_TEST_SUITE(tcp_fault)

COVERBS_FAULT_TEST_CASES(coverbs::transport::tcp, std::chrono::seconds(20))

// 128 MiB read 256 KiB a millisecond; TCP's buffers (the kernel's, 2 MiB outgoing, 4 MiB
// held for the reader) let the writer get about 16 MiB ahead.
BOOST_AUTO_TEST_CASE(slow_reader) {
  coverbs::test::slow_reader_holds_the_writer_back(
      coverbs::transport::tcp, {{}, 128u << 20, 32u << 20, 256u << 10, std::chrono::milliseconds(1)},
      std::chrono::seconds(20));
}

BOOST_AUTO_TEST_SUITE_END()
