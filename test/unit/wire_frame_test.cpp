#include <algorithm>
#include <array>
#include <boost/test/unit_test.hpp>
#include <random>
#include <string>

#include "coverbs/error.hpp"
#include "coverbs/wire/frame.hpp"

using namespace coverbs::wire;
using bytes = std::array<std::byte, header_size>;
using coverbs::errc;
using coverbs::wc_errc;

namespace {

constexpr std::array all_types = {frame_type::hello,
                                  frame_type::data,
                                  frame_type::message,
                                  frame_type::write,
                                  frame_type::write_with_immediate,
                                  frame_type::read_request,
                                  frame_type::read_response,
                                  frame_type::atomic_fetch_add,
                                  frame_type::atomic_compare_swap,
                                  frame_type::atomic_response,
                                  frame_type::write_response,
                                  frame_type::close};

// The protocol document's field table, restated independently of src/wire/frame.cpp.
struct field {
  std::size_t offset, size;
  const char* name;
};
constexpr std::array<field, 8> fields = {{{8, 8, "request_id"},
                                          {16, 8, "remote_address"},
                                          {24, 4, "rkey"},
                                          {28, 4, "length"},
                                          {32, 8, "compare_add"},
                                          {40, 8, "swap"},
                                          {48, 4, "immediate"},
                                          {52, 4, "status"}}};
bool uses(frame_type t, const std::string& f) {
  const bool response =
      t == frame_type::read_response || t == frame_type::atomic_response || t == frame_type::write_response;
  const bool request = t == frame_type::write || t == frame_type::write_with_immediate ||
                       t == frame_type::read_request || t == frame_type::atomic_fetch_add ||
                       t == frame_type::atomic_compare_swap;
  if (f == "request_id") return request || response;
  if (f == "remote_address" || f == "rkey") return request;
  if (f == "length") {
    return t == frame_type::hello || t == frame_type::message || t == frame_type::write ||
           t == frame_type::write_with_immediate || t == frame_type::read_request ||
           t == frame_type::read_response;
  }
  if (f == "compare_add") {
    return t == frame_type::atomic_fetch_add || t == frame_type::atomic_compare_swap ||
           t == frame_type::atomic_response;
  }
  if (f == "swap") return t == frame_type::atomic_compare_swap;
  if (f == "immediate") return t == frame_type::write_with_immediate;
  return response || t == frame_type::close;  // status
}

// A valid header of type `t` with every field it uses set to something non-zero.
frame_header sample(frame_type t) {
  frame_header h{.type = t};
  if (uses(t, "request_id")) h.request_id = 0x1122334455667788ull;
  if (uses(t, "remote_address")) h.remote_address = 0x00007f0000001000ull;
  if (uses(t, "rkey")) h.rkey = 0xdeadbeef;
  if (uses(t, "length")) h.length = t == frame_type::hello ? max_payload_size : 300;
  if (uses(t, "compare_add")) h.compare_add = 0x0102030405060708ull;
  if (uses(t, "swap")) h.swap = 0xf0e0d0c0b0a09080ull;
  if (uses(t, "immediate")) h.immediate = 0xcafe;
  if (t == frame_type::close) h.status = frame_status::remote_access;
  if (t == frame_type::data || t == frame_type::message || t == frame_type::write ||
      t == frame_type::write_with_immediate || t == frame_type::read_response) {
    h.payload_length = 300;
  }
  return h;
}

bytes encode(const frame_header& h) {
  bytes b{};
  encode_header(h, b);
  return b;
}

const frame_header sentinel{.type = frame_type::data, .payload_length = 7};

std::error_code decode(const bytes& b, std::uint32_t limit = max_payload_size) {
  frame_header out = sentinel;
  const auto ec = decode_header(b, out, limit);
  if (ec) BOOST_TEST((out == sentinel));  // a rejected header leaves the output alone
  return ec;
}

bool rejected(const bytes& b, std::uint32_t limit = max_payload_size) {
  return decode(b, limit) == coverbs::make_error_code(errc::malformed_frame);
}
bool rejected(const frame_header& h, std::uint32_t limit = max_payload_size) {
  return rejected(encode(h), limit);
}

// The payload rules of the protocol document, written as one predicate.
bool payload_consistent(const frame_header& h) {
  const auto n = h.payload_length;
  const bool ok = h.status == frame_status::ok;
  switch (h.type) {
    case frame_type::data: return n > 0;
    case frame_type::message:
    case frame_type::write: return n <= h.length && (h.length == 0 || n > 0);
    case frame_type::write_with_immediate: return n == h.length;
    case frame_type::read_response: return n == (ok ? h.length : 0);
    case frame_type::read_request: return n == 0;
    case frame_type::hello: return n == 0 && h.length >= min_payload_limit;
    case frame_type::atomic_response: return n == 0 && (ok || h.compare_add == 0);
    default: return n == 0;
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(wire_frame)

BOOST_AUTO_TEST_CASE(every_type_round_trips) {
  for (auto t : all_types) {
    const auto h = sample(t);
    frame_header out;
    BOOST_TEST(!decode_header(encode(h), out), "type " << int(t));
    BOOST_TEST((out == h), "type " << int(t));
  }
  // Failed responses, too.
  for (auto t : {frame_type::read_response, frame_type::atomic_response, frame_type::write_response}) {
    auto h = sample(t);
    h.status = frame_status::remote_invalid_request;
    h.payload_length = 0;
    h.compare_add = 0;
    frame_header out;
    BOOST_TEST(!decode_header(encode(h), out));
    BOOST_TEST((out == h));
  }
}

BOOST_AUTO_TEST_CASE(layout_is_little_endian_with_version_first) {
  const auto b = encode(sample(frame_type::atomic_compare_swap));
  auto at = [&](std::size_t i) { return std::to_integer<int>(b[i]); };
  BOOST_TEST(at(0) == protocol_version);
  BOOST_TEST(at(1) == int(frame_type::atomic_compare_swap));
  BOOST_TEST(at(8) == 0x88);   // request_id
  BOOST_TEST(at(17) == 0x10);  // remote_address 0x...1000
  BOOST_TEST(at(24) == 0xef);  // rkey
  BOOST_TEST(at(32) == 0x08);  // compare_add
  BOOST_TEST(at(47) == 0xf0);  // swap
  const auto c = encode(sample(frame_type::close));
  BOOST_TEST(std::to_integer<int>(c[52]) == int(frame_status::remote_access));
  const auto d = encode(sample(frame_type::data));
  BOOST_TEST(std::to_integer<int>(d[4]) == (300 & 0xff));
  BOOST_TEST(std::to_integer<int>(d[5]) == (300 >> 8));
}

BOOST_AUTO_TEST_CASE(version_is_checked_and_hello_accepts_newer_peers) {
  auto h = sample(frame_type::write);
  h.version = 0;
  BOOST_TEST(rejected(h));
  h.version = 2;
  BOOST_TEST(rejected(h));
  auto hello = sample(frame_type::hello);
  hello.version = 0;
  BOOST_TEST(rejected(hello));
  hello.version = 7;
  frame_header out;
  BOOST_TEST(!decode_header(encode(hello), out));
  BOOST_TEST(out.version == 7);
}

BOOST_AUTO_TEST_CASE(unknown_types_are_rejected) {
  for (int t : {0, 13, 100, 255}) {
    auto b = encode(sample(frame_type::close));
    b[1] = std::byte(t);
    BOOST_TEST(rejected(b), "type " << t);
  }
}

BOOST_AUTO_TEST_CASE(flags_must_be_zero) {
  for (std::size_t i : {2u, 3u}) {
    auto b = encode(sample(frame_type::data));
    b[i] = std::byte{0x80};
    BOOST_TEST(rejected(b));
  }
}

BOOST_AUTO_TEST_CASE(each_type_may_set_only_its_fields) {
  for (auto t : all_types) {
    for (const auto& f : fields) {
      if (uses(t, f.name)) continue;
      for (std::size_t i = 0; i < f.size; ++i) {
        auto b = encode(sample(t));
        b[f.offset + i] = std::byte{1};
        BOOST_TEST(rejected(b), "type " << int(t) << " field " << f.name << " byte " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(payload_length_is_bounded) {
  auto h = sample(frame_type::data);
  h.payload_length = max_payload_size;
  BOOST_TEST(!decode(encode(h)));
  h.payload_length = max_payload_size + 1;
  BOOST_TEST(rejected(h));
  h.payload_length = 0xffffffff;
  BOOST_TEST(rejected(h));
  h.payload_length = 5000;
  BOOST_TEST(rejected(h, 4096));  // the negotiated limit, when smaller
  auto r = sample(frame_type::read_request);  // asks for the rest of a read, answered a part at a time
  r.length = max_payload_size + 1;
  BOOST_TEST(!decode(encode(r)));
  r.length = 0xffffffff;
  BOOST_TEST(!decode(encode(r), 4096));
}

BOOST_AUTO_TEST_CASE(payload_must_match_the_type) {
  auto data = sample(frame_type::data);
  data.payload_length = 0;
  BOOST_TEST(rejected(data));

  for (auto t : {frame_type::message, frame_type::write}) {
    auto h = sample(t);
    h.payload_length = h.length + 1;
    BOOST_TEST(rejected(h));
    h.payload_length = 0;
    BOOST_TEST(rejected(h));
    h.payload_length = h.length - 1;  // the first part of a longer operation
    BOOST_TEST(!decode(encode(h)));
    h.length = h.payload_length = 0;  // an empty operation
    BOOST_TEST(!decode(encode(h)));
  }
  auto imm = sample(frame_type::write_with_immediate);
  imm.payload_length = imm.length - 1;  // immediates travel only on the last part
  BOOST_TEST(rejected(imm));

  auto response = sample(frame_type::read_response);
  response.payload_length = response.length - 1;
  BOOST_TEST(rejected(response));
  response.payload_length = response.length;
  response.status = frame_status::remote_access;
  BOOST_TEST(rejected(response));

  for (auto t : {frame_type::hello, frame_type::read_request, frame_type::atomic_fetch_add,
                 frame_type::atomic_compare_swap, frame_type::atomic_response, frame_type::write_response,
                 frame_type::close}) {
    auto h = sample(t);
    h.payload_length = 1;
    BOOST_TEST(rejected(h), "type " << int(t));
  }
}

BOOST_AUTO_TEST_CASE(per_type_field_rules) {
  auto hello = sample(frame_type::hello);
  hello.length = min_payload_limit - 1;
  BOOST_TEST(rejected(hello));
  hello.length = 0xffffffff;  // more than we accept is fine: we send the smaller of the two
  BOOST_TEST(!decode(encode(hello)));

  auto atomic = sample(frame_type::atomic_response);
  atomic.status = frame_status::remote_access;  // a failure carries no previous value
  BOOST_TEST(rejected(atomic));
}

BOOST_AUTO_TEST_CASE(status_must_be_known_and_fit_the_type) {
  auto b = encode(sample(frame_type::write_response));
  b[52] = std::byte{5};
  BOOST_TEST(rejected(b));
  b[52] = std::byte{0};
  b[55] = std::byte{1};
  BOOST_TEST(rejected(b));
  auto response = sample(frame_type::write_response);
  response.status = frame_status::protocol_error;  // only a close may blame the peer's framing
  BOOST_TEST(rejected(response));
  auto close = sample(frame_type::close);
  close.status = frame_status::protocol_error;
  BOOST_TEST(!decode(encode(close)));
}

BOOST_AUTO_TEST_CASE(random_headers_never_decode_inconsistently) {
  std::mt19937_64 rng(2024);
  // Mostly plausible headers (valid version, type and flags, sparse fields), so that many are
  // accepted and every accepted one is checked; a share of raw noise as well.
  int accepted = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    bytes b;
    for (auto& x : b) x = static_cast<std::byte>(rng());
    if (i % 8 != 0) {
      const auto t = static_cast<frame_type>(rng() % 14);
      b[0] = std::byte{protocol_version};
      b[1] = static_cast<std::byte>(t);
      b[2] = b[3] = std::byte{0};
      for (const auto& f : fields) {
        if (!uses(t, f.name) && rng() % 16 != 0) std::fill_n(b.begin() + f.offset, f.size, std::byte{0});
      }
      b[52] = static_cast<std::byte>(rng() % 6);
      if (rng() % 4 != 0)
        std::fill_n(b.begin() + 52, 4, std::byte{0});  // mostly ok
      else
        std::fill_n(b.begin() + 53, 3, std::byte{0});
      b[6] = b[7] = std::byte{0};  // payload lengths under 64 KiB
      if (rng() % 4 == 0) std::fill_n(b.begin() + 4, 2, std::byte{0});
      b[30] = b[31] = std::byte{0};
      if (rng() % 2) std::copy_n(b.begin() + 4, 2, b.begin() + 28);  // length == payload_length
    }
    frame_header h;
    if (decode_header(b, h)) continue;
    ++accepted;
    BOOST_REQUIRE(h.payload_length <= max_payload_size);
    BOOST_REQUIRE(payload_consistent(h));
    for (const auto& f : fields) {
      if (!uses(h.type, f.name)) {
        BOOST_REQUIRE(std::all_of(b.begin() + f.offset, b.begin() + f.offset + f.size,
                                  [](std::byte x) { return x == std::byte{0}; }));
      }
    }
    BOOST_REQUIRE((encode(h) == b));  // one meaning per accepted header
  }
  BOOST_TEST(accepted > 100'000);
}

BOOST_AUTO_TEST_CASE(statuses_map_to_error_codes_and_back) {
  using coverbs::make_error_code;
  BOOST_TEST(!to_error_code(frame_status::ok));
  BOOST_TEST((to_error_code(frame_status::remote_access) == make_error_code(wc_errc::remote_access)));
  BOOST_TEST((to_error_code(frame_status::remote_invalid_request) ==
              make_error_code(wc_errc::remote_invalid_request)));
  BOOST_TEST((to_error_code(frame_status::remote_operation) == make_error_code(wc_errc::remote_operation)));
  BOOST_TEST((to_error_code(frame_status::protocol_error) == make_error_code(errc::malformed_frame)));
  for (auto s : {frame_status::ok, frame_status::remote_access, frame_status::remote_invalid_request,
                 frame_status::remote_operation, frame_status::protocol_error}) {
    BOOST_TEST((to_status(to_error_code(s)) == s));
  }
  BOOST_TEST((to_status(make_error_code(errc::buffer_too_small)) == frame_status::remote_operation));
  const auto ec = make_error_code(errc::malformed_frame);
  BOOST_TEST(ec.message() == "malformed or inconsistent frame from peer");
  BOOST_TEST((ec == std::errc::bad_message));
}

BOOST_AUTO_TEST_CASE(split_helpers_cover_the_operation_exactly) {
  BOOST_TEST(frame_count(0) == 1u);
  BOOST_TEST(frame_count(1) == 1u);
  BOOST_TEST(frame_count(max_payload_size) == 1u);
  BOOST_TEST(frame_count(max_payload_size + 1ull) == 2u);
  BOOST_TEST(frame_count(0xffffffffull) == 4096u);
  for (std::uint64_t total : {0ull, 1ull, 4096ull, 10'000ull, 3ull * 4096 + 1}) {
    std::uint64_t offset = 0, frames = 0;
    do {
      const auto n = chunk_size(total, offset, 4096);
      // Each part is a valid write frame: length is what remains, payload what fits.
      frame_header h{.type = frame_type::write,
                     .payload_length = n,
                     .rkey = 1,
                     .length = static_cast<std::uint32_t>(total - offset)};
      BOOST_TEST(!decode(encode(h), 4096));
      offset += n;
      ++frames;
    } while (offset < total);
    BOOST_TEST(offset == total);
    BOOST_TEST(frames == frame_count(total, 4096));
  }
}

BOOST_AUTO_TEST_SUITE_END()
