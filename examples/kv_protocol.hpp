// The kv cache's two-sided messages (coverbs::socket::async_send / async_receive), version 1.
// Integers are little-endian. Every parse checks lengths and fields and says what is wrong.
//
//   hello     server -> client, once, first:  u8 version, u8[3] 0, u32 slots, u16 max_key,
//             u16 0, u32 max_value, u32 probe_limit, u32 slot_size, remote_buffer (20 bytes)
//   request   client -> server:  u8 version, u8 op, u16 key length, u32 value length, key, value
//   response  server -> client:  u8 version, u8 status, u16 0, u32 length, payload
//             (the value for get; the reason for malformed; empty otherwise)
#pragma once

#include <coverbs/remote_buffer.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv_layout.hpp"

namespace kv {

constexpr std::uint8_t protocol_version = 1;

enum class op : std::uint8_t { put = 1, get = 2, del = 3 };
enum class status : std::uint8_t {
  ok = 0,
  not_found = 1,
  table_full = 2,  ///< every slot of the key's probe sequence holds another key
  malformed = 3,   ///< the request broke this protocol; the server closes the connection
};

constexpr std::size_t hello_size = 24 + coverbs::remote_buffer::wire_size;
constexpr std::size_t request_header_size = 8;
constexpr std::size_t response_header_size = 8;

namespace wire {
inline void put_le(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
inline std::uint64_t get_le(std::span<const std::byte> in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::to_integer<std::uint64_t>(in[at + i]) << (8 * i);
  return v;
}
inline void append(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}
inline std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span(s));
}
}  // namespace wire

struct hello {
  layout table;
  coverbs::remote_buffer region;
};

inline std::vector<std::byte> encode(const hello& h) {
  std::vector<std::byte> out;
  wire::put_le(out, protocol_version, 1);
  wire::put_le(out, 0, 3);
  wire::put_le(out, h.table.slots, 4);
  wire::put_le(out, h.table.max_key, 2);
  wire::put_le(out, 0, 2);
  wire::put_le(out, h.table.max_value, 4);
  wire::put_le(out, h.table.probe_limit, 4);
  wire::put_le(out, h.table.slot_size(), 4);
  wire::append(out, h.region.serialize());
  return out;
}

/// Parses and cross-checks a hello: the descriptor must cover exactly the announced table.
inline std::optional<hello> parse_hello(std::span<const std::byte> in, std::string& why) {
  if (in.size() != hello_size) {
    why = "hello of " + std::to_string(in.size()) + " bytes, expected " + std::to_string(hello_size);
    return {};
  }
  if (wire::get_le(in, 0, 1) != protocol_version) {
    why = "protocol version " + std::to_string(wire::get_le(in, 0, 1)) + ", expected 1";
    return {};
  }
  hello h;
  h.table.slots = static_cast<std::uint32_t>(wire::get_le(in, 4, 4));
  h.table.max_key = static_cast<std::uint16_t>(wire::get_le(in, 8, 2));
  h.table.max_value = static_cast<std::uint32_t>(wire::get_le(in, 12, 4));
  h.table.probe_limit = static_cast<std::uint32_t>(wire::get_le(in, 16, 4));
  const auto slot_size = wire::get_le(in, 20, 4);
  if (wire::get_le(in, 1, 3) != 0 || wire::get_le(in, 10, 2) != 0 || h.table.slots == 0 ||
      h.table.max_key == 0 || h.table.probe_limit == 0 || slot_size != h.table.slot_size() ||
      coverbs::remote_buffer::parse(in.subspan(24), h.region) || h.region.length != h.table.table_size()) {
    why = "hello with an inconsistent table description";
    return {};
  }
  return h;
}

struct request {
  kv::op op = op::get;
  std::string_view key;
  std::span<const std::byte> value;
};

inline std::vector<std::byte> encode(const request& r) {
  std::vector<std::byte> out;
  wire::put_le(out, protocol_version, 1);
  wire::put_le(out, static_cast<std::uint8_t>(r.op), 1);
  wire::put_le(out, r.key.size(), 2);
  wire::put_le(out, r.value.size(), 4);
  wire::append(out, wire::bytes(r.key));
  wire::append(out, r.value);
  return out;
}

/// Checks every field of a request against the table's limits; `why` names the first problem.
inline std::optional<request> parse_request(std::span<const std::byte> in, const layout& limits,
                                            std::string& why) {
  if (in.size() < request_header_size) {
    why = "request of " + std::to_string(in.size()) + " bytes, shorter than its 8-byte header";
    return {};
  }
  const auto version = wire::get_le(in, 0, 1), code = wire::get_le(in, 1, 1);
  const auto key_length = wire::get_le(in, 2, 2), value_length = wire::get_le(in, 4, 4);
  if (version != protocol_version) {
    why = "protocol version " + std::to_string(version) + ", expected 1";
  } else if (code < 1 || code > 3) {
    why = "unknown operation " + std::to_string(code);
  } else if (key_length == 0 || key_length > limits.max_key) {
    why = "key length " + std::to_string(key_length) + " outside 1.." + std::to_string(limits.max_key);
  } else if (value_length > limits.max_value) {
    why = "value length " + std::to_string(value_length) + " over the limit of " +
          std::to_string(limits.max_value);
  } else if (static_cast<op>(code) != op::put && value_length != 0) {
    why = "a get or delete with a value";
  } else if (in.size() != request_header_size + key_length + value_length) {
    why = "request of " + std::to_string(in.size()) + " bytes, but its header says " +
          std::to_string(request_header_size + key_length + value_length);
  } else {
    const auto key = in.subspan(request_header_size, key_length);
    return request{static_cast<op>(code),
                   {reinterpret_cast<const char*>(key.data()), key.size()},
                   in.subspan(request_header_size + key_length)};
  }
  return {};
}

struct response {
  kv::status status = status::ok;
  std::span<const std::byte> payload;
};

inline std::vector<std::byte> encode(const response& r) {
  std::vector<std::byte> out;
  wire::put_le(out, protocol_version, 1);
  wire::put_le(out, static_cast<std::uint8_t>(r.status), 1);
  wire::put_le(out, 0, 2);
  wire::put_le(out, r.payload.size(), 4);
  wire::append(out, r.payload);
  return out;
}

inline std::optional<response> parse_response(std::span<const std::byte> in, std::string& why) {
  if (in.size() < response_header_size || wire::get_le(in, 0, 1) != protocol_version ||
      wire::get_le(in, 1, 1) > 3 || wire::get_le(in, 2, 2) != 0 ||
      wire::get_le(in, 4, 4) != in.size() - response_header_size) {
    why = "malformed response of " + std::to_string(in.size()) + " bytes";
    return {};
  }
  return response{static_cast<status>(wire::get_le(in, 1, 1)), in.subspan(response_header_size)};
}

}  // namespace kv
