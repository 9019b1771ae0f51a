// One-sided operations of coverbs::socket over RDMA, on loopback queue pairs: the very bodies
// that the TCP transport runs (test/tcp/tcp_one_sided_test.cpp).
#include <boost/test/unit_test.hpp>

#include "connected_pair.hpp"
#include "one_sided_tests.hpp"
#include "rdma_socket_pair.hpp"

using namespace coverbs;
using coverbs::test::rdma_socket_pair;

BOOST_AUTO_TEST_SUITE(rdma_one_sided)

COVERBS_ONE_SIDED_TEST_CASES(rdma_socket_pair)

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(rdma_one_sided_connected)

BOOST_AUTO_TEST_CASE(local_failure_ends_the_peers_reads) {
  coverbs::test::connected_pair p(transport::rdma);
  coverbs::test::local_failure_ends_the_peers_reads(p.io, p.a, p.b);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(rdma_one_sided_limits)

BOOST_AUTO_TEST_CASE(untaken_immediates_hold_the_writer_back) {
  // Every immediate that nobody takes is kept, and its receive was re-posted at once: a writer
  // could make them grow without bound. Past max_held_immediates their receives stay unposted,
  // so the writer runs out of credits instead (as the TCP transport stops reading).
  rdma_socket_pair p;
  constexpr std::size_t held = detail::stream_core::max_held_immediates;
  const std::size_t pool = detail::stream_geometry{}.buffers + detail::rdma_stream::control_slots;
  const std::size_t total = held + pool + 256;
  coverbs::test::guarded_region target(p.b, 8, coverbs::test::all_remote_rights);
  coverbs::test::local_memory word(p.a, 8);
  std::size_t started = 0, completed = 0;
  error_code failure;
  std::function<void()> write_next = [&] {
    const auto value = static_cast<std::uint32_t>(started++);
    p.a.async_write_with_immediate(word.slice(0, 8), target.remote(0, 8), value,
                                   [&](error_code ec, std::size_t) {
                                     if (ec) failure = ec;
                                     ++completed;
                                     if (!ec && started < total) write_next();
                                   });
  };
  for (int i = 0; i < 64; ++i) write_next();
  // Until the writer stalls past `held`: nothing completes for a second and a half (a pause
  // before `held`, as a loaded machine may make, ends nothing).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (std::size_t before = ~std::size_t{0}; (completed < held || completed != before) && completed < total &&
                                             !failure && std::chrono::steady_clock::now() < deadline;) {
    before = completed;
    p.io.restart();
    p.io.run_for(std::chrono::milliseconds(completed < held ? 200 : 1500));
  }
  BOOST_TEST(!failure, failure.message());
  BOOST_TEST(completed >= held);
  BOOST_TEST(completed <= held + pool);

  std::size_t taken = 0, out_of_order = 0;
  std::function<void()> take_next = [&] {
    p.b.async_receive_immediate([&](error_code ec, std::uint32_t value) {
      if (ec) failure = ec;
      if (value != taken) ++out_of_order;
      if (!ec && ++taken < total) take_next();
    });
  };
  take_next();
  coverbs::test::run_until_done(
      p.io, [&] { return (taken == total && completed == total) || failure; }, std::chrono::seconds(120));
  BOOST_TEST(!failure, failure.message());
  BOOST_TEST(out_of_order == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
