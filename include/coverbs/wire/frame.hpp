// Frames of the TCP fallback protocol (docs/tcp-fallback-protocol.md): a fixed-size header,
// then `payload_length` bytes. Pure and synchronous, so every rule can be tested without sockets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "coverbs/detail/little_endian.hpp"
#include "coverbs/error.hpp"

namespace coverbs::wire {

/// The version this library speaks; it is also the only one `decode_header` accepts outside hello.
inline constexpr std::uint8_t protocol_version = 1;
/// Size of every encoded header in bytes.
inline constexpr std::size_t header_size = 56;
/// The largest payload of one frame; longer operations are split.
inline constexpr std::uint32_t max_payload_size = 1u << 20;
/// The smallest payload limit a peer may announce in hello.
inline constexpr std::uint32_t min_payload_limit = 4096;

/// What a frame carries. Zero is not a type, so a zeroed header never decodes.
enum class frame_type : std::uint8_t {
  hello = 1,                 ///< version and limits, the first frame each way
  data = 2,                  ///< stream bytes (async_write_some)
  message = 3,               ///< one whole async_send (a message never spans frames)
  write = 4,                 ///< all or part of an RDMA WRITE
  write_with_immediate = 5,  ///< the last part of an RDMA WRITE with immediate
  read_request = 6,          ///< the rest of an RDMA READ, answered a frame's part at a time
  read_response = 7,         ///< one part of what a read_request asked for, or its failure
  atomic_fetch_add = 8,      ///< 64-bit fetch-and-add
  atomic_compare_swap = 9,   ///< 64-bit compare-and-swap
  atomic_response = 10,      ///< the previous value of an atomic, or its failure
  write_response = 11,       ///< the acknowledgement of a write frame
  close = 12,                ///< the sender stops; `status` says why
};

/// Outcome carried by responses and close. Wire values are the protocol's own, not libibverbs'.
enum class frame_status : std::uint32_t {
  ok = 0,                      ///< success, or an orderly close
  remote_access = 1,           ///< wrong key, out of bounds or missing right
  remote_invalid_request = 2,  ///< misaligned atomic
  remote_operation = 3,        ///< the responder failed for another reason
  protocol_error = 4,          ///< the peer sent a malformed frame (close only)
};

/// A decoded header. Fields a type does not use are zero (see the protocol document).
struct frame_header {
  std::uint8_t version = protocol_version;  ///< protocol version; in hello, the sender's highest
  frame_type type = frame_type::close;      ///< what follows
  std::uint32_t payload_length = 0;         ///< bytes that follow the header
  std::uint64_t request_id = 0;             ///< pairs a response with its request
  std::uint64_t remote_address = 0;         ///< target address in the responder's memory
  std::uint32_t rkey = 0;                   ///< key of the responder's region
  std::uint32_t length = 0;                 ///< bytes of the operation from here on; hello: payload limit
  std::uint64_t compare_add = 0;            ///< add or compare operand; atomic_response: previous value
  std::uint64_t swap = 0;                   ///< compare-and-swap replacement
  std::uint32_t immediate = 0;              ///< write_with_immediate's immediate
  frame_status status = frame_status::ok;   ///< responses and close: the outcome

  friend constexpr bool operator==(const frame_header&, const frame_header&) = default;
};

/// Writes `h` little-endian; flags and reserved bytes are written as zero. (Inline, as the
/// stream-data fast path of `decode_header`: both run for every small write.)
inline void encode_header(const frame_header& h, std::span<std::byte, header_size> out) noexcept {
  using detail::put_le;
  std::byte* p = out.data();
  p[0] = std::byte{h.version};
  p[1] = static_cast<std::byte>(h.type);
  put_le<std::uint16_t>(p + 2, 0);  // flags: none defined in version 1
  put_le(p + 4, h.payload_length);
  put_le(p + 8, h.request_id);
  put_le(p + 16, h.remote_address);
  put_le(p + 24, h.rkey);
  put_le(p + 28, h.length);
  put_le(p + 32, h.compare_add);
  put_le(p + 40, h.swap);
  put_le(p + 48, h.immediate);
  put_le(p + 52, static_cast<std::uint32_t>(h.status));
}

/// `decode_header` for every header but a version-1 data or message frame's (the inline fast
/// path), with the same rules.
std::error_code decode_control_header(std::span<const std::byte, header_size> bytes, frame_header& out,
                                      std::uint32_t max_payload) noexcept;

/// Reads and validates a header against every rule of the protocol, with `max_payload` as this
/// side's payload limit. Violations give `errc::malformed_frame` and leave `out` untouched.
inline std::error_code decode_header(std::span<const std::byte, header_size> bytes, frame_header& out,
                                     std::uint32_t max_payload = max_payload_size) noexcept {
  using detail::get_le;
  const std::byte* p = bytes.data();
  const auto version = std::to_integer<std::uint8_t>(p[0]);
  const auto type = std::to_integer<std::uint8_t>(p[1]);
  // Stream data and messages, nearly every frame of a busy connection: the rules reduce to a
  // payload within the limit (data: not empty; a message's: within its length at 28, empty
  // only for an empty message) and every other field zero.
  const bool is_data = type == static_cast<std::uint8_t>(frame_type::data);
  const bool is_message = type == static_cast<std::uint8_t>(frame_type::message);
  if (!(is_data || is_message) || version != protocol_version)
    return decode_control_header(bytes, out, max_payload);
  const auto payload_length = get_le<std::uint32_t>(p + 4);
  const std::uint32_t length = get_le<std::uint32_t>(p + 28);
  std::uint64_t others =
      get_le<std::uint16_t>(p + 2) | get_le<std::uint32_t>(p + 24) | (is_data ? length : 0);
  for (std::size_t at = 8; at < 24; at += 8) others |= get_le<std::uint64_t>(p + at);
  for (std::size_t at = 32; at < header_size; at += 8) others |= get_le<std::uint64_t>(p + at);
  const bool sized =
      is_data ? payload_length != 0 : payload_length <= length && (payload_length != 0 || length == 0);
  if (others != 0 || !sized || payload_length > max_payload) return make_error_code(errc::malformed_frame);
  out = frame_header{.version = version,
                     .type = static_cast<frame_type>(type),
                     .payload_length = payload_length,
                     .length = length};  // a data frame's is 0, checked with `others`
  return {};
}

/// The code a requester completes with for `s`; empty for `frame_status::ok`.
std::error_code to_error_code(frame_status s) noexcept;
/// The status to send for an apply_* result or a close reason; other codes give remote_operation.
frame_status to_status(std::error_code ec) noexcept;

/// Frames a `total`-byte operation needs (`max_payload` > 0); an empty one still takes a frame.
constexpr std::uint64_t frame_count(std::uint64_t total,
                                    std::uint32_t max_payload = max_payload_size) noexcept {
  return total == 0 ? 1 : (total + max_payload - 1) / max_payload;
}
/// Payload of the frame that starts `offset` (<= `total`) bytes into a `total`-byte operation.
/// Each frame of a split write (or a read's answer) carries `length = total - offset` and this
/// many bytes.
constexpr std::uint32_t chunk_size(std::uint64_t total, std::uint64_t offset,
                                   std::uint32_t max_payload = max_payload_size) noexcept {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(total - offset, max_payload));
}

}  // namespace coverbs::wire
