#include "coverbs/wire/frame.hpp"

#include "coverbs/detail/little_endian.hpp"
#include "coverbs/error.hpp"

namespace coverbs::wire {

using detail::get_le;

namespace {

// Header fields other than version, type and payload length, as bits: a type may set only
// the fields it uses, so every accepted header has exactly one meaning.
namespace bit {
constexpr unsigned request_id = 1, address = 2, rkey = 4, length = 8, compare_add = 16, swap = 32,
                   immediate = 64, status = 128;
}

constexpr unsigned used_fields(frame_type t) noexcept {
  using namespace bit;
  constexpr unsigned target = request_id | address | rkey | length;
  switch (t) {
    case frame_type::hello: return length;
    case frame_type::data: return 0;
    case frame_type::message: return length;
    case frame_type::write: return target;
    case frame_type::write_with_immediate: return target | immediate;
    case frame_type::read_request: return target;
    case frame_type::read_response: return request_id | length | status;
    case frame_type::atomic_fetch_add: return request_id | address | rkey | compare_add;
    case frame_type::atomic_compare_swap: return request_id | address | rkey | compare_add | swap;
    case frame_type::atomic_response: return request_id | compare_add | status;
    case frame_type::write_response: return request_id | status;
    case frame_type::close: return status;
  }
  return 0;
}

bool known_type(std::uint8_t t) noexcept {
  return t >= static_cast<std::uint8_t>(frame_type::hello) &&
         t <= static_cast<std::uint8_t>(frame_type::close);
}

bool unused_fields_zero(const frame_header& h) noexcept {
  const unsigned used = used_fields(h.type);
  auto ok = [&](unsigned field, bool zero) { return (used & field) != 0 || zero; };
  using namespace bit;
  return ok(request_id, h.request_id == 0) && ok(address, h.remote_address == 0) && ok(rkey, h.rkey == 0) &&
         ok(length, h.length == 0) && ok(compare_add, h.compare_add == 0) && ok(swap, h.swap == 0) &&
         ok(immediate, h.immediate == 0) && ok(status, h.status == frame_status::ok);
}

// Payload and per-type rules, given that unused fields are already known to be zero.
bool consistent(const frame_header& h) noexcept {
  const std::uint32_t n = h.payload_length;
  const bool failed = h.status != frame_status::ok;
  switch (h.type) {
    case frame_type::hello: return n == 0 && h.length >= min_payload_limit;
    case frame_type::data: return n != 0;
    case frame_type::message:
    case frame_type::write: return n <= h.length && (n != 0 || h.length == 0);
    case frame_type::write_with_immediate: return n == h.length;
    case frame_type::read_request: return n == 0;
    case frame_type::read_response: return failed ? n == 0 : n == h.length;
    case frame_type::atomic_response: return n == 0 && (!failed || h.compare_add == 0);
    case frame_type::atomic_fetch_add:
    case frame_type::atomic_compare_swap:
    case frame_type::write_response:
    case frame_type::close: return n == 0;
  }
  return false;
}

}  // namespace

std::error_code decode_control_header(std::span<const std::byte, header_size> bytes, frame_header& out,
                                      std::uint32_t max_payload) noexcept {
  const std::byte* p = bytes.data();
  const auto version = std::to_integer<std::uint8_t>(p[0]);
  const auto type = std::to_integer<std::uint8_t>(p[1]);
  const auto raw_status = get_le<std::uint32_t>(p + 52);
  if (!known_type(type) || get_le<std::uint16_t>(p + 2) != 0 ||
      raw_status > static_cast<std::uint32_t>(frame_status::protocol_error)) {
    return errc::malformed_frame;
  }
  // Hello's layout is frozen across versions, so a newer peer's hello still decodes here.
  const bool is_hello = type == static_cast<std::uint8_t>(frame_type::hello);
  if (is_hello ? version < 1 : version != protocol_version) return errc::malformed_frame;
  const frame_header h{version,
                       static_cast<frame_type>(type),
                       get_le<std::uint32_t>(p + 4),
                       get_le<std::uint64_t>(p + 8),
                       get_le<std::uint64_t>(p + 16),
                       get_le<std::uint32_t>(p + 24),
                       get_le<std::uint32_t>(p + 28),
                       get_le<std::uint64_t>(p + 32),
                       get_le<std::uint64_t>(p + 40),
                       get_le<std::uint32_t>(p + 48),
                       static_cast<frame_status>(raw_status)};
  if (h.payload_length > max_payload || !unused_fields_zero(h) || !consistent(h) ||
      (h.status == frame_status::protocol_error && h.type != frame_type::close)) {
    return errc::malformed_frame;
  }
  out = h;
  return {};
}

std::error_code to_error_code(frame_status s) noexcept {
  switch (s) {
    case frame_status::ok: return {};
    case frame_status::remote_access: return make_error_code(wc_errc::remote_access);
    case frame_status::remote_invalid_request: return make_error_code(wc_errc::remote_invalid_request);
    case frame_status::remote_operation: return make_error_code(wc_errc::remote_operation);
    case frame_status::protocol_error: return make_error_code(errc::malformed_frame);
  }
  return make_error_code(errc::malformed_frame);
}

frame_status to_status(std::error_code ec) noexcept {
  if (!ec) return frame_status::ok;
  if (ec == wc_errc::remote_access) return frame_status::remote_access;
  if (ec == wc_errc::remote_invalid_request) return frame_status::remote_invalid_request;
  if (ec == errc::malformed_frame) return frame_status::protocol_error;
  return frame_status::remote_operation;
}

}  // namespace coverbs::wire
