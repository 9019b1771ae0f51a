#include <boost/test/unit_test.hpp>
#include <random>
#include <vector>

#include "coverbs/detail/little_endian.hpp"
#include "coverbs/error.hpp"
#include "coverbs/remote_buffer.hpp"

using coverbs::remote_buffer;

BOOST_AUTO_TEST_SUITE(remote_buffer_wire)

BOOST_AUTO_TEST_CASE(round_trips) {
  const remote_buffer original{0x00007f1234567000ull, 0xdeadbeef, 65536};
  const auto bytes = original.serialize();
  remote_buffer parsed;
  BOOST_TEST(!remote_buffer::parse(bytes, parsed));
  BOOST_TEST((parsed == original));
}

BOOST_AUTO_TEST_CASE(is_little_endian_with_version_first) {
  const auto bytes = remote_buffer{0x0102030405060708ull, 0x0a0b0c0d, 0x11223344}.serialize();
  BOOST_TEST(std::to_integer<int>(bytes[0]) == remote_buffer::wire_version);
  BOOST_TEST(std::to_integer<int>(bytes[4]) == 0x08);
  BOOST_TEST(std::to_integer<int>(bytes[11]) == 0x01);
  BOOST_TEST(std::to_integer<int>(bytes[12]) == 0x0d);
  BOOST_TEST(std::to_integer<int>(bytes[19]) == 0x11);
}

BOOST_AUTO_TEST_CASE(rejects_malformed_bytes_and_leaves_output_alone) {
  const remote_buffer sentinel{1, 2, 3};
  const auto good = remote_buffer{4096, 7, 8}.serialize();
  auto expect_rejected = [&](std::span<const std::byte> bytes) {
    remote_buffer out = sentinel;
    const auto ec = remote_buffer::parse(bytes, out);
    BOOST_TEST((ec == coverbs::make_error_code(coverbs::errc::bad_descriptor)));
    BOOST_TEST((out == sentinel));
  };
  expect_rejected(std::span(good).first(19));                       // short
  std::vector<std::byte> longer(good.begin(), good.end());
  longer.push_back(std::byte{0});
  expect_rejected(longer);                                          // long
  auto bad_version = good;
  bad_version[0] = std::byte{2};
  expect_rejected(bad_version);
  auto reserved = good;
  reserved[2] = std::byte{1};
  expect_rejected(reserved);
  expect_rejected(remote_buffer{~0ull - 10, 1, 100}.serialize());  // wraps the address space
  expect_rejected({});
}

// Half the well-formed samples put the address within 2^33 of the top, where about one in four
// ranges wraps: uniform addresses would wrap about once in 2^32 samples, never here.
BOOST_AUTO_TEST_CASE(random_bytes_never_parse_into_a_wrapping_range) {
  std::mt19937_64 rng(42);
  std::size_t parsed = 0, wrapping = 0;
  for (int i = 0; i < 100000; ++i) {
    std::array<std::byte, remote_buffer::wire_size> bytes;
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    if (i % 2 == 0) {
      bytes[0] = std::byte{1}, bytes[1] = bytes[2] = bytes[3] = std::byte{0};
      if (i % 4 == 0) coverbs::detail::put_le(bytes.data() + 4, ~0ull - rng() % (1ull << 33));
    }
    const auto address = coverbs::detail::get_le<std::uint64_t>(bytes.data() + 4);
    const auto length = coverbs::detail::get_le<std::uint32_t>(bytes.data() + 16);
    const bool wraps = address + length < address;
    remote_buffer out;
    if (!remote_buffer::parse(bytes, out)) {
      ++parsed;
      BOOST_TEST(!wraps);
      BOOST_TEST(out.address + out.length >= out.address);
    } else if (i % 2 == 0 && wraps) {
      ++wrapping;
    }
  }
  BOOST_TEST(parsed > 10000u);
  BOOST_TEST(wrapping > 1000u);  // the rule was put to the test
}

BOOST_AUTO_TEST_CASE(contains_checks_bounds_without_overflow) {
  const remote_buffer r{4096, 1, 100};
  BOOST_TEST(r.contains(0, 100));
  BOOST_TEST(r.contains(100, 0));
  BOOST_TEST(!r.contains(1, 100));
  BOOST_TEST(!r.contains(101, 0));
  BOOST_TEST(!r.contains(50, ~0ull));
}

BOOST_AUTO_TEST_SUITE_END()
