// When the RDMA stream cannot allocate the operation for one of its own sends or receives, the
// connection fails with not_enough_memory, and nothing else: no exception leaves the call
// that was posting, no credit, buffer or count is lost (close() then finishes at once instead
// of waiting out its timeout), and nothing sent after the missing piece reaches the peer.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "failing_allocation.hpp"
#include "one_sided_tests.hpp"
#include "rdma_socket_pair.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using coverbs::test::rdma_socket_pair;
using namespace std::chrono_literals;

namespace {

constexpr detail::stream_geometry pool{.buffers = 8, .buffer_size = 4096};

/// Holds every free block of one size in a socket's operation memory, so that its next
/// operation of that size allocates from the heap (where failing_allocation can fail it).
class pool_drained {
 public:
  pool_drained(coverbs::socket& s, std::size_t operation_size)
      : allocator_(s.impl()->allocator()), size_(detail::operation_memory::heap_size(operation_size)) {
    held_.reserve(4096);  // grows by no allocation of the size being failed
    // The first block that does not come from the pool fails, and shows it is empty.
    test::fail_next_allocation_of(size_);
    const int failed = test::failed_allocations();
    while (test::failed_allocations() == failed && held_.size() < held_.capacity()) {
      try {
        held_.push_back(allocator_.allocate(size_));
      } catch (const std::bad_alloc&) {
      }
    }
    BOOST_REQUIRE(test::failed_allocations() == failed + 1);
  }
  pool_drained(const pool_drained&) = delete;
  pool_drained& operator=(const pool_drained&) = delete;
  ~pool_drained() {
    for (std::byte* block : held_) allocator_.deallocate(block, size_);
  }
  /// The next operation of the drained size fails to allocate.
  void fail_next() const noexcept { test::fail_next_allocation_of(size_); }

 private:
  detail::operation_allocator<std::byte> allocator_;
  std::size_t size_;
  std::vector<std::byte*> held_;
};

/// `s`'s next read: what it read and how it ended.
std::pair<test::outcome, std::string> read_once(asio::io_context& io, coverbs::socket& s) {
  std::string data(pool.buffer_size, '\0');
  test::outcome read;
  s.async_read_some(asio::buffer(data), test::record(read));
  test::run_until_done(
      io, [&] { return read.done; }, 20s);
  data.resize(read.value);
  return {read, data};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stream_allocation_failure)

// a's send of the second write cannot be allocated: the write ends with broken_pipe (as any
// write into a failed connection), a's reads with not_enough_memory, b has the first write
// only, and a's close() has nothing left to wait for.
BOOST_AUTO_TEST_CASE(a_send_that_cannot_be_allocated_fails_the_connection) {
  rdma_socket_pair p(pool, polling_mode::event, test::peer_context::own);
  const std::string first(100, 'a'), second(100, 'b');
  test::outcome wrote_first, wrote_second;
  p.a.async_write_some(asio::buffer(first), test::record(wrote_first));
  test::run_until_done(p.io, [&] { return wrote_first.done; });
  BOOST_TEST(!wrote_first.ec, wrote_first.ec.message());
  // Arrived before a's QP fails: a write completes once posted, and a flush would end it unsent.
  test::run_until_done(p.peer_io, [&] { return p.b.available() == first.size(); });
  {
    const pool_drained drained(p.a, detail::rdma_stream::send_operation_size());
    drained.fail_next();
    const int failed = test::failed_allocations();
    BOOST_CHECK_NO_THROW(p.a.async_write_some(asio::buffer(second), test::record(wrote_second)));
    BOOST_TEST(test::failed_allocations() == failed + 1);  // the send's, not another's
    test::run_until_done(
        p.io, [&] { return wrote_second.done; }, 20s);
  }
  BOOST_TEST((wrote_second.ec == asio::error::broken_pipe), wrote_second.ec.message());
  const auto [a_read, a_data] = read_once(p.io, p.a);
  BOOST_TEST((a_read.ec == boost::system::errc::not_enough_memory), a_read.ec.message());

  const auto [b_read, b_data] = read_once(p.peer_io, p.b);
  BOOST_TEST(!b_read.ec, b_read.ec.message());
  BOOST_TEST(b_data == first);
  BOOST_TEST(p.b.available() == 0u);  // nothing after the piece that was not sent

  p.a.close();
  BOOST_TEST(test::time_to_run_out(p.io).count() < 2000);
  BOOST_TEST(p.service->outstanding() == 0u);
}

// b re-posts a receive buffer once its bytes are read; that receive cannot be allocated. The
// read that freed it has its bytes; the next read on b ends with not_enough_memory, and b's
// close() has nothing left to wait for.
BOOST_AUTO_TEST_CASE(a_receive_that_cannot_be_allocated_fails_the_connection) {
  rdma_socket_pair p(pool, polling_mode::event, test::peer_context::own);
  const std::string first(100, 'a');
  test::outcome wrote;
  p.a.async_write_some(asio::buffer(first), test::record(wrote));
  test::run_until_done(p.io, [&] { return wrote.done; });
  test::run_until_done(p.peer_io, [&] { return p.b.available() == first.size(); });
  std::string data(pool.buffer_size, '\0');
  std::size_t n = 0;
  error_code ec;
  {
    const pool_drained drained(p.b, detail::rdma_stream::receive_operation_size());
    drained.fail_next();  // the re-post of the buffer the read empties
    const int failed = test::failed_allocations();
    p.b.non_blocking(true);  // the read takes the bytes here and allocates nothing else
    BOOST_CHECK_NO_THROW(n = p.b.read_some(asio::buffer(data), ec));
    BOOST_TEST(test::failed_allocations() == failed + 1);
    p.b.non_blocking(false);
  }
  BOOST_TEST(!ec, ec.message());
  BOOST_TEST(data.substr(0, n) == first);
  const auto [b_next, b_data] = read_once(p.peer_io, p.b);
  BOOST_TEST((b_next.ec == boost::system::errc::not_enough_memory), b_next.ec.message());

  p.b.close();
  BOOST_TEST(test::time_to_run_out(p.peer_io).count() < 2000);
  BOOST_TEST(p.peer_service->outstanding() == 0u);
}

// Two writes with immediate of a's wait for credits (b's four buffers hold unread bytes). b's
// read returns two in one report, whose receive's operation, freed as it completes, the first
// write takes; the second cannot be allocated. It stays a waiting one and ends as they do when
// the connection fails (flushed), instead of being dropped unanswered from inside the
// completion that brought the credits; a's reads end with not_enough_memory.
BOOST_AUTO_TEST_CASE(a_waiting_write_with_immediate_that_cannot_be_allocated_fails_the_connection) {
  rdma_socket_pair p({.buffers = 4, .buffer_size = 4096}, polling_mode::event, test::peer_context::own);
  const std::string data(100, 'a');
  for (int i = 0; i < 4; ++i) {  // one SEND each: the peer's four credits
    test::outcome wrote;
    p.a.async_write_some(asio::buffer(data), test::record(wrote));
    test::run_until_done(p.io, [&] { return wrote.done; });
  }
  test::run_until_done(p.peer_io, [&] { return p.b.available() == 4 * data.size(); });
  // a's sends completed too (else a completion handled later returns a block to the drained
  // pool): only its receives are left, 4 buffers and 4 control slots.
  test::run_until_done(p.io, [&] { return p.service->outstanding() == 8u; });
  // The second write must miss the pool because the first took the block the report's
  // receive freed: both from the same size class.
  using memory = detail::operation_memory;
  BOOST_REQUIRE(memory::heap_size(detail::rdma_stream::receive_operation_size()) ==
                memory::heap_size(detail::rdma_stream::immediate_operation_size()));
  test::guarded_region target(p.b, 64, verbs::access::remote_write);
  test::local_memory source(p.a, 64);
  test::outcome first, second;
  p.a.async_write_with_immediate(source.slice(0, 8), target.remote(0, 8), 7, test::record(first));
  p.a.async_write_with_immediate(source.slice(0, 8), target.remote(8, 8), 8, test::record(second));
  p.io.restart();
  p.io.poll();
  BOOST_REQUIRE(!first.done && !second.done);  // they wait for credits
  std::string in(2 * data.size(), '\0');
  p.b.non_blocking(true);
  BOOST_TEST(asio::read(p.b, asio::buffer(in)) == in.size());  // two buffers, reported together
  {
    const pool_drained drained(p.a, detail::rdma_stream::immediate_operation_size());
    drained.fail_next();
    const int failed = test::failed_allocations();
    BOOST_CHECK_NO_THROW(test::run_until_done(
        p.io, [&] { return second.done; }, 20s));
    BOOST_TEST(test::failed_allocations() == failed + 1);
  }
  BOOST_TEST((second.ec == make_error_code(wc_errc::flushed)), second.ec.message());
  const auto [a_read, a_data] = read_once(p.io, p.a);
  BOOST_TEST((a_read.ec == boost::system::errc::not_enough_memory), a_read.ec.message());

  p.a.close();
  BOOST_TEST(test::time_to_run_out(p.io).count() < 2000);
  BOOST_TEST(first.done);  // posted before the QP failed: done or flushed, either way ended
  BOOST_TEST(p.service->outstanding() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
