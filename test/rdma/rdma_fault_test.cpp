// Faults over RDMA through rdma_cm, in the Soft-RoCE VM: the very bodies that the TCP fallback
// runs (test/tcp/tcp_fault_test.cpp), with a smaller slow-reader transfer for the emulated CPU.
#include <boost/test/unit_test.hpp>

#include "fault_tests.hpp"
#include "peer_kill_tests.hpp"

BOOST_AUTO_TEST_SUITE(rdma_fault)

COVERBS_FAULT_TEST_CASES(coverbs::transport::rdma, std::chrono::seconds(60))

// A pool of 4 x 16 KiB lets the writer get 64 KiB ahead; the reader takes 16 KiB each 20 ms
// (0.8 MB/s, slower than Soft-RoCE in the emulated VM), 4 MiB in all.
BOOST_AUTO_TEST_CASE(slow_reader) {
  coverbs::test::slow_reader_holds_the_writer_back(coverbs::transport::rdma,
                                                   {{.receive_buffers = 4, .buffer_size = 16 * 1024},
                                                    4u << 20,
                                                    512u << 10,
                                                    16u << 10,
                                                    std::chrono::milliseconds(20)},
                                                   std::chrono::seconds(60));
}

BOOST_AUTO_TEST_SUITE_END()
