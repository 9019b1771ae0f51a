// The rdma_cm private data two coverbs peers exchange: each side's receive pool, which the
// other allocates and registers a send pool for, so what a peer may ask for is bounded.
#include <boost/test/unit_test.hpp>

#include "coverbs/detail/handshake.hpp"
#include "coverbs/error.hpp"

using namespace coverbs::detail;

namespace {

std::error_code parse(stream_geometry g, stream_geometry& out) {
  return parse_handshake(encode_handshake(g), out);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(handshake)

BOOST_AUTO_TEST_CASE(default_pool_round_trips) {
  stream_geometry out{};
  BOOST_TEST(!parse({32, 64 * 1024}, out));
  BOOST_TEST(out.buffers == 32u);
  BOOST_TEST(out.buffer_size == 64u * 1024);
}

BOOST_AUTO_TEST_CASE(pool_of_the_limit_is_taken) {
  stream_geometry out{};
  BOOST_TEST(!parse({64, 16u << 20}, out));  // 1 GiB
  BOOST_TEST(std::uint64_t{out.buffers} * out.buffer_size == max_pool_bytes);
}

BOOST_AUTO_TEST_CASE(pool_past_the_limit_is_refused) {
  // Each field within its own range; their product is what the peer would have to pin.
  const stream_geometry sentinel{7, 7};
  for (const stream_geometry g :
       {stream_geometry{65, 16u << 20}, stream_geometry{65535, 16u << 20}, stream_geometry{65535, 16385}}) {
    BOOST_TEST_CONTEXT(g.buffers << " x " << g.buffer_size) {
      stream_geometry out = sentinel;
      BOOST_TEST((parse(g, out) == coverbs::errc::bad_descriptor));
      BOOST_TEST(out.buffers == sentinel.buffers);
      BOOST_TEST(out.buffer_size == sentinel.buffer_size);
    }
  }
}

BOOST_AUTO_TEST_CASE(fields_out_of_range_are_refused) {
  stream_geometry out{};
  BOOST_TEST(parse({0, 64 * 1024}, out));
  BOOST_TEST(parse({32, 255}, out));
  BOOST_TEST(parse({1, (16u << 20) + 1}, out));
}

BOOST_AUTO_TEST_SUITE_END()
