// The TCP responder's checks must give what the RDMA tests in test/rdma/access_errors_test.cpp
// expect from a device, and must never touch a byte outside the region.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <set>
#include <vector>

#include "coverbs/error.hpp"
#include "coverbs/wire/region_table.hpp"

using namespace coverbs;
using wire::region_table;

namespace {

constexpr auto all_rights = verbs::access::local_write | verbs::access::remote_read |
                            verbs::access::remote_write | verbs::access::remote_atomic;
const std::error_code remote_access = make_error_code(wc_errc::remote_access);
const std::error_code invalid_request = make_error_code(wc_errc::remote_invalid_request);

// What the TCP stream does with a peer's WRITE: locate the bytes, then fill them.
std::error_code write_through(region_table& table, std::uint32_t rkey, std::uint64_t addr,
                              std::span<const std::byte> data) {
  std::byte* at = nullptr;
  if (auto ec = table.write_target(rkey, addr, data.size(), at)) return ec;
  if (!data.empty()) std::memcpy(at, data.data(), data.size());
  return {};
}

// ... and with a peer's READ: locate the bytes, then take them.
std::error_code read_through(const region_table& table, std::uint32_t rkey, std::uint64_t addr,
                             std::uint64_t length, std::span<std::byte> out) {
  BOOST_REQUIRE(out.size() >= length);
  std::byte* at = nullptr;
  if (auto ec = table.read_source(rkey, addr, length, at)) return ec;
  if (length != 0) std::memcpy(out.data(), at, length);
  return {};
}

// The table knows only the middle page of three; the outer pages are guards.
struct guarded {
  std::vector<std::byte> mem = std::vector<std::byte>(3 * 4096, std::byte{0xee});
  region_table table;
  remote_buffer r;
  std::uint64_t start = 0, end = 0;

  explicit guarded(verbs::access rights) {
    r = table.register_region(std::span(mem).subspan(4096, 4096), rights);
    start = r.address;
    end = r.address + r.length;
  }
  bool guards_intact() const {
    auto is_guard = [](std::byte x) { return x == std::byte{0xee}; };
    return std::all_of(mem.begin(), mem.begin() + 4096, is_guard) &&
           std::all_of(mem.end() - 4096, mem.end(), is_guard);
  }
  bool untouched() const {
    return std::all_of(mem.begin(), mem.end(), [](std::byte x) { return x == std::byte{0xee}; });
  }
  std::byte* at(std::uint64_t addr) { return mem.data() + (addr - start) + 4096; }

  // Every operation on [addr, addr + n) with `rkey`; each must fail with `expected` and change nothing.
  void all_fail(std::uint32_t rkey, std::uint64_t addr, std::size_t n, std::error_code expected) {
    const std::vector<std::byte> data(n, std::byte{0x42});
    std::vector<std::byte> out(n, std::byte{0x77});
    std::uint64_t previous = 12345;
    BOOST_TEST((write_through(table, rkey, addr, data) == expected));
    BOOST_TEST((read_through(table, rkey, addr, n, out) == expected));
    BOOST_TEST(std::all_of(out.begin(), out.end(), [](std::byte x) { return x == std::byte{0x77}; }));
    if (n == 8) {
      BOOST_TEST((table.apply_fetch_add(rkey, addr, 1, previous) == expected));
      BOOST_TEST((table.apply_compare_swap(rkey, addr, 0xeeeeeeeeeeeeeeeeull, 1, previous) == expected));
      BOOST_TEST(previous == 12345u);
    }
    BOOST_TEST(untouched());
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(region_table_access)

BOOST_AUTO_TEST_CASE(registration_gives_real_addresses_and_fresh_nonzero_keys) {
  std::vector<std::byte> mem(64);
  region_table table;
  std::set<std::uint32_t> keys;
  for (int i = 0; i < 10000; ++i) {
    const auto r = table.register_region(mem, verbs::access::remote_read);
    BOOST_REQUIRE(r.rkey != 0u);
    BOOST_REQUIRE(keys.insert(r.rkey).second);  // never reused while registered
    BOOST_REQUIRE(r.address == reinterpret_cast<std::uint64_t>(mem.data()));
    BOOST_REQUIRE(r.length == 64u);
  }
  BOOST_TEST(table.size() == 10000u);
  // Unpredictable: not a counter.
  BOOST_TEST(*keys.rbegin() - *keys.begin() > 10000u);
}

BOOST_AUTO_TEST_CASE(every_operation_succeeds_in_bounds_with_rights) {
  guarded g(all_rights);
  const std::vector<std::byte> data(16, std::byte{0x5a});
  BOOST_TEST(!write_through(g.table, g.r.rkey, g.start, data));
  BOOST_TEST(!write_through(g.table, g.r.rkey, g.end - 16, data));  // up to the last byte
  BOOST_TEST((*g.at(g.start) == std::byte{0x5a} && *g.at(g.end - 1) == std::byte{0x5a}));

  std::vector<std::byte> out(4096);
  BOOST_TEST(!read_through(g.table, g.r.rkey, g.start, 4096, out));  // the whole region
  BOOST_TEST((out[0] == std::byte{0x5a} && out[16] == std::byte{0xee} && out[4095] == std::byte{0x5a}));
  BOOST_TEST(!read_through(g.table, g.r.rkey, g.end, 0, out));  // empty, at the end

  const std::uint64_t word = g.start + 64;
  std::uint64_t previous = 0;
  BOOST_TEST(!g.table.apply_fetch_add(g.r.rkey, word, 5, previous));
  BOOST_TEST(previous == 0xeeeeeeeeeeeeeeeeull);
  BOOST_TEST(!g.table.apply_compare_swap(g.r.rkey, word, 1, 99, previous));  // compare fails
  BOOST_TEST(previous == 0xeeeeeeeeeeeeeeeeull + 5);
  BOOST_TEST(!g.table.apply_compare_swap(g.r.rkey, word, previous, 99, previous));
  BOOST_TEST(previous == 0xeeeeeeeeeeeeeeeeull + 5);
  std::uint64_t now = 0;
  std::memcpy(&now, g.at(word), 8);
  BOOST_TEST(now == 99u);
  BOOST_TEST(!g.table.apply_fetch_add(g.r.rkey, g.end - 8, 1, previous));  // the last word
  BOOST_TEST(g.guards_intact());
}

BOOST_AUTO_TEST_CASE(wrong_key_is_a_remote_access_error) {
  guarded g(all_rights);
  g.all_fail(g.r.rkey + 1, g.start, 8, remote_access);
  g.all_fail(0, g.start, 8, remote_access);
  BOOST_TEST((remote_access == std::errc::permission_denied));
}

BOOST_AUTO_TEST_CASE(each_bound_edge_is_a_remote_access_error) {
  guarded g(all_rights);
  g.all_fail(g.r.rkey, g.start - 1, 1, remote_access);  // one before the start
  g.all_fail(g.r.rkey, g.start - 8, 8, remote_access);
  g.all_fail(g.r.rkey, g.start - 4, 8, remote_access);  // straddles the start
  g.all_fail(g.r.rkey, g.end, 1, remote_access);        // one past the end
  g.all_fail(g.r.rkey, g.end - 7, 8, remote_access);    // straddles the end by one
  g.all_fail(g.r.rkey, g.end, 8, remote_access);
  g.all_fail(g.r.rkey, g.start, 4097, remote_access);  // one longer than the region
  g.all_fail(g.r.rkey, 0, 8, remote_access);
  g.all_fail(g.r.rkey, ~0ull - 3, 8, remote_access);  // addr + length wraps
  BOOST_TEST((g.table.check(g.r.rkey, g.start + 8, ~0ull, verbs::access::remote_read) == remote_access));
  BOOST_TEST((g.table.check(g.r.rkey, g.start + 8, ~0ull - 7, verbs::access::remote_read) == remote_access));
  BOOST_TEST((g.table.check(g.r.rkey, ~0ull, 2, verbs::access::remote_read) == remote_access));
}

// No bytes reach no memory: as InfiniBand's rule C9-88 has it, and rxe does, neither the key,
// the address nor the rights of a zero-length read or write are checked.
BOOST_AUTO_TEST_CASE(zero_length_is_not_checked) {
  guarded g(verbs::access::local_write);
  for (const auto right : {verbs::access::remote_read, verbs::access::remote_write}) {
    BOOST_TEST(!g.table.check(g.r.rkey, g.end + 1, 0, right));
    BOOST_TEST(!g.table.check(g.r.rkey + 1, 0, 0, right));
    BOOST_TEST(!g.table.check(0, ~0ull, 0, right));
  }
  std::byte* at = nullptr;
  BOOST_TEST(!g.table.write_target(12345, 0, 0, at));
  BOOST_TEST(at != nullptr);  // for a zero-byte copy
  BOOST_TEST(g.untouched());
}

BOOST_AUTO_TEST_CASE(write_without_remote_write_is_refused) {
  guarded g(verbs::access::local_write | verbs::access::remote_read | verbs::access::remote_atomic);
  const std::vector<std::byte> data(512, std::byte{1});
  BOOST_TEST((write_through(g.table, g.r.rkey, g.start, data) == remote_access));
  BOOST_TEST(g.untouched());
}

BOOST_AUTO_TEST_CASE(read_without_remote_read_is_refused) {
  guarded g(verbs::access::local_write | verbs::access::remote_write | verbs::access::remote_atomic);
  std::vector<std::byte> out(512, std::byte{0x77});
  BOOST_TEST((read_through(g.table, g.r.rkey, g.start, 512, out) == remote_access));
  BOOST_TEST(std::all_of(out.begin(), out.end(), [](std::byte x) { return x == std::byte{0x77}; }));
}

BOOST_AUTO_TEST_CASE(atomics_without_remote_atomic_are_refused) {
  guarded g(verbs::access::local_write | verbs::access::remote_read | verbs::access::remote_write);
  std::uint64_t previous = 7;
  BOOST_TEST((g.table.apply_fetch_add(g.r.rkey, g.start, 1, previous) == remote_access));
  BOOST_TEST(
      (g.table.apply_compare_swap(g.r.rkey, g.start, 0xeeeeeeeeeeeeeeeeull, 1, previous) == remote_access));
  BOOST_TEST(previous == 7u);
  BOOST_TEST(g.untouched());
}

BOOST_AUTO_TEST_CASE(misaligned_atomic_is_an_invalid_request) {
  guarded g(all_rights);
  std::uint64_t previous = 7;
  for (std::uint64_t offset : {1, 4, 7, 4084}) {
    BOOST_TEST((g.table.apply_fetch_add(g.r.rkey, g.start + offset, 1, previous) == invalid_request));
    BOOST_TEST((g.table.apply_compare_swap(g.r.rkey, g.start + offset, 0xeeeeeeeeeeeeeeeeull, 1, previous) ==
                invalid_request));
  }
  BOOST_TEST(previous == 7u);
  BOOST_TEST(g.untouched());
  // Key and bounds are checked first, as the device does.
  BOOST_TEST((g.table.apply_fetch_add(g.r.rkey + 1, g.start + 4, 1, previous) == remote_access));
  BOOST_TEST((g.table.apply_fetch_add(g.r.rkey, g.end - 4, 1, previous) == remote_access));
}

BOOST_AUTO_TEST_CASE(deregistered_key_is_refused) {
  guarded g(all_rights);
  g.table.deregister(g.r.rkey);
  BOOST_TEST(g.table.size() == 0u);
  g.all_fail(g.r.rkey, g.start, 8, remote_access);
  g.table.deregister(g.r.rkey);  // twice is harmless
  const auto again = g.table.register_region(std::span(g.mem).subspan(4096, 4096), all_rights);
  BOOST_TEST(again.rkey != 0u);
}

BOOST_AUTO_TEST_SUITE_END()
