// Access the peer did not grant ends in a clear error, never a crash or hang, and touches no
// byte outside the region.
#include <boost/asio/as_tuple.hpp>
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "async_pair.hpp"

namespace asio = boost::asio;
using namespace coverbs;

namespace {

// The peer registers only the middle of a guarded buffer; the guards must never change.
struct guarded_peer : test::rdma_env {
  asio::io_context io;
  verbs::protection_domain pd{dev};
  completion_service service{io.get_executor(), dev};
  async_queue_pair a{service, pd};
  async_queue_pair b{service, pd};
  std::vector<std::byte> local_mem = std::vector<std::byte>(8192, std::byte{0x11});
  std::vector<std::byte> peer_mem = std::vector<std::byte>(3 * 4096, std::byte{0xee});
  verbs::memory_region local{pd, local_mem, verbs::access::local_write};
  std::optional<verbs::memory_region> region;

  explicit guarded_peer(verbs::access rights) {
    region.emplace(pd, std::span(peer_mem).subspan(4096, 4096), rights);
    verbs::connect_options options{.local_gid = gid};
    a.connect(b.address(gid), options);
    b.connect(a.address(gid), options);
  }

  bool guards_intact() const {
    return std::all_of(peer_mem.begin(), peer_mem.begin() + 4096, [](std::byte x) { return x == std::byte{0xee}; }) &&
           std::all_of(peer_mem.end() - 4096, peer_mem.end(), [](std::byte x) { return x == std::byte{0xee}; });
  }

  template <class Op>
  error_code outcome(Op op) {
    error_code result = asio::error::would_block;
    op([&](error_code ec, auto) { result = ec; });
    io.run_for(std::chrono::seconds(60));
    BOOST_REQUIRE_MESSAGE(result != asio::error::would_block, "operation never completed");
    return result;
  }
};

constexpr auto all_rights = verbs::access::local_write | verbs::access::remote_read |
                            verbs::access::remote_write | verbs::access::remote_atomic;

}  // namespace

BOOST_AUTO_TEST_SUITE(access_errors)

BOOST_AUTO_TEST_CASE(wrong_rkey_is_a_remote_access_error) {
  guarded_peer p(all_rights);
  remote_buffer wrong = p.region->remote();
  wrong.rkey += 1;
  const auto ec = p.outcome([&](auto h) { async_write(p.a, p.local.slice(0, 1024), wrong, h); });
  BOOST_TEST((ec == make_error_code(wc_errc::remote_access)), ec.message());
  BOOST_TEST((ec == std::errc::permission_denied));
  BOOST_TEST(p.guards_intact());
}

BOOST_AUTO_TEST_CASE(write_past_the_end_of_the_region_is_refused) {
  guarded_peer p(all_rights);
  // A descriptor that claims more than was registered: the device checks, not the library.
  remote_buffer beyond = p.region->remote(2048, 2048);
  beyond.length = 8192;
  const auto ec = p.outcome([&](auto h) { async_write(p.a, p.local.slice(0, 8192), beyond, h); });
  BOOST_TEST((ec == make_error_code(wc_errc::remote_access)), ec.message());
  BOOST_TEST(p.guards_intact());
}

BOOST_AUTO_TEST_CASE(read_before_the_start_of_the_region_is_refused) {
  guarded_peer p(all_rights);
  remote_buffer before = p.region->remote();
  before.address -= 64;
  const auto ec = p.outcome([&](auto h) { async_read(p.a, p.local.slice(0, 128), before, h); });
  BOOST_TEST((ec == make_error_code(wc_errc::remote_access)), ec.message());
  BOOST_TEST(std::all_of(p.local_mem.begin(), p.local_mem.begin() + 128, [](std::byte x) { return x == std::byte{0x11}; }));
}

BOOST_AUTO_TEST_CASE(write_without_remote_write_permission_is_refused) {
  guarded_peer p(verbs::access::local_write | verbs::access::remote_read);
  const auto ec = p.outcome([&](auto h) { async_write(p.a, p.local.slice(0, 512), p.region->remote(0, 512), h); });
  BOOST_TEST((ec == make_error_code(wc_errc::remote_access)), ec.message());
  BOOST_TEST(std::all_of(p.peer_mem.begin(), p.peer_mem.end(), [](std::byte x) { return x == std::byte{0xee}; }));
}

BOOST_AUTO_TEST_CASE(read_without_remote_read_permission_is_refused) {
  guarded_peer p(verbs::access::local_write | verbs::access::remote_write);
  const auto ec = p.outcome([&](auto h) { async_read(p.a, p.local.slice(0, 512), p.region->remote(0, 512), h); });
  BOOST_TEST((ec == make_error_code(wc_errc::remote_access)), ec.message());
}

BOOST_AUTO_TEST_CASE(atomic_without_remote_atomic_permission_is_refused) {
  guarded_peer p(verbs::access::local_write | verbs::access::remote_write | verbs::access::remote_read);
  const auto ec = p.outcome([&](auto h) { async_fetch_add(p.a, p.local.slice(0, 8), p.region->remote(0, 8), 1, h); });
  BOOST_TEST((ec == make_error_code(wc_errc::remote_access)), ec.message());
  BOOST_TEST(std::all_of(p.peer_mem.begin(), p.peer_mem.end(), [](std::byte x) { return x == std::byte{0xee}; }));
}

BOOST_AUTO_TEST_CASE(descriptor_shorter_than_the_local_buffer_is_refused_locally) {
  guarded_peer p(all_rights);
  const auto ec = p.outcome([&](auto h) { async_write(p.a, p.local.slice(0, 1024), p.region->remote(0, 512), h); });
  BOOST_TEST((ec == make_error_code(errc::buffer_too_small)));
  BOOST_TEST(p.a.native().state() == IBV_QPS_RTS);  // nothing was posted
  BOOST_TEST(p.guards_intact());
}

BOOST_AUTO_TEST_CASE(a_failed_request_flushes_the_ones_behind_it) {
  guarded_peer p(all_rights);
  remote_buffer wrong = p.region->remote();
  wrong.rkey += 1;
  std::vector<error_code> results;
  async_write(p.a, p.local.slice(0, 64), wrong, [&](error_code ec, std::size_t) { results.push_back(ec); });
  async_write(p.a, p.local.slice(0, 64), p.region->remote(0, 64), [&](error_code ec, std::size_t) { results.push_back(ec); });
  p.io.run_for(std::chrono::seconds(60));
  BOOST_REQUIRE(results.size() == 2u);
  BOOST_TEST((results[0] == make_error_code(wc_errc::remote_access)));
  BOOST_TEST((results[1] == make_error_code(wc_errc::flushed)));
  BOOST_TEST(p.guards_intact());
}

BOOST_AUTO_TEST_SUITE_END()
