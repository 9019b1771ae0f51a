// The file-transfer protocol's control messages. Each travels as one coverbs message
// (socket::async_send), so it arrives whole or not at all; file data never travels in them.
//
//   send (client is the sender)          fetch (server is the sender)
//   client -> put(name, size, checksum)  client -> get(name, checksum)
//                                        server -> file(size)       or error(reason)
//   receiver -> ready(window)            or error(reason)
//   sender   -> data: RDMA WRITE with immediate into a free window slot (on both transports)
//   receiver -> credit(slot)             after writing that slot to the file
//   sender   -> done(digest)             of the checksum the client asked for
//   receiver -> busy                     while it flushes the file to its disk, four times a
//                                        second: a flush can outlast the sender's patience
//   receiver -> ok                       once the file has its final name, or error(reason)
//
// An error before the data starts refuses that request only; one during the data ends the
// connection (the side that saw it sends error, then closes).
#pragma once

#include <algorithm>
#include <coverbs/remote_buffer.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checksum.hpp"

namespace ft {

enum class type : std::uint8_t { put = 1, get, file, ready, credit, done, ok, error, busy };

/// Where the receiver wants the data: `slots` slots of `slot_size` bytes at `where`.
struct window {
  std::uint32_t slots = 0;
  std::uint32_t slot_size = 0;
  coverbs::remote_buffer where;
};

struct message {
  type kind = type::ok;
  std::uint64_t size = 0;                       ///< put, file
  checksum_kind check = checksum_kind::xxh128;  ///< put, get: how the data is checked
  std::string text;                             ///< put, get: the file name; error: the reason
  window area;                                  ///< ready
  std::vector<std::uint8_t> slots;              ///< credit
  digest sum{};                                 ///< done
};

/// Builders, one per type (designated initializers would leave fields uninitialized).
namespace msg {
inline message with(type kind) {
  message m;
  m.kind = kind;
  return m;
}
inline message put(const std::string& name, std::uint64_t size, checksum_kind check) {
  message m = with(type::put);
  m.text = name;
  m.size = size;
  m.check = check;
  return m;
}
inline message get(const std::string& name, checksum_kind check) {
  message m = with(type::get);
  m.text = name;
  m.check = check;
  return m;
}
inline message file(std::uint64_t size) {
  message m = with(type::file);
  m.size = size;
  return m;
}
inline message ready(const window& area) {
  message m = with(type::ready);
  m.area = area;
  return m;
}
inline message credit(std::uint8_t slot) {
  message m = with(type::credit);
  m.slots = {slot};
  return m;
}
inline message done(const digest& sum) {
  message m = with(type::done);
  m.sum = sum;
  return m;
}
inline message ok() {
  return with(type::ok);
}
inline message busy() {
  return with(type::busy);
}
inline message error(const std::string& text) {
  message m = with(type::error);
  m.text = text;
  return m;
}
}  // namespace msg

constexpr std::size_t max_name = 255;  // NAME_MAX
constexpr std::size_t max_text = 1000;
constexpr std::uint32_t max_slots = 128;           // 7 bits of the immediate
constexpr std::uint32_t max_slot_size = 16 << 20;  // below 2^25: the other 25 bits

/// The immediate of a WRITE that filled `bytes` of window slot `slot`.
constexpr std::uint32_t immediate(std::uint32_t slot, std::uint32_t bytes) {
  return slot << 25 | bytes;
}
constexpr std::uint32_t slot_of(std::uint32_t imm) {
  return imm >> 25;
}
constexpr std::uint32_t bytes_of(std::uint32_t imm) {
  return imm & ((1u << 25) - 1);
}

/// A name the server accepts: one plain path component. No '/' (nothing outside its
/// directory), no leading '.' (no "..", no hidden files, and never a transfer's own
/// temporary file), no control characters (a newline would forge lines of the server's log),
/// at most NAME_MAX bytes.
inline bool valid_name(std::string_view name) {
  const auto control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
  return !name.empty() && name.size() <= max_name && name.front() != '.' &&
         name.find('/') == std::string_view::npos && std::none_of(name.begin(), name.end(), control);
}

/// A peer's text for a log line or a terminal: control characters as \xNN (and backslashes,
/// so that what reads as an escape is one), so that it cannot forge lines or move the cursor.
inline std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f && c != '\\') {
      out += c;
      continue;
    }
    constexpr std::string_view hex = "0123456789abcdef";
    out += "\\x";
    out += hex[byte >> 4];
    out += hex[byte & 15];
  }
  return out;
}

namespace wire {
inline void put(std::vector<std::byte>& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}
inline std::uint64_t get(std::span<const std::byte> in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::to_integer<std::uint64_t>(in[at + i]) << (8 * i);
  return value;
}
}  // namespace wire

inline std::vector<std::byte> encode(const message& m) {
  std::vector<std::byte> out{static_cast<std::byte>(m.kind)};
  auto text = [&] {
    for (char c : m.text) out.push_back(static_cast<std::byte>(c));
  };
  switch (m.kind) {
    case type::put:
      wire::put(out, m.size, 8);
      wire::put(out, static_cast<std::uint8_t>(m.check), 1);
      text();
      break;
    case type::get:
      wire::put(out, static_cast<std::uint8_t>(m.check), 1);
      text();
      break;
    case type::file: wire::put(out, m.size, 8); break;
    case type::ready: {
      wire::put(out, m.area.slots, 4);
      wire::put(out, m.area.slot_size, 4);
      const auto d = m.area.where.serialize();
      out.insert(out.end(), d.begin(), d.end());
      break;
    }
    case type::credit:
      for (auto s : m.slots) out.push_back(std::byte{s});
      break;
    case type::done:
      wire::put(out, static_cast<std::uint8_t>(m.sum.kind), 1);
      for (auto b : m.sum.view()) out.push_back(std::byte{b});
      break;
    case type::ok: break;
    case type::busy: break;
    case type::error: text(); break;
  }
  return out;
}

/// Nothing when the bytes are not a well-formed message: a peer that sends one is broken.
inline std::optional<message> decode(std::span<const std::byte> in) {
  if (in.empty()) return {};
  message m;
  m.kind = static_cast<type>(in[0]);
  const auto rest = in.subspan(1);
  auto check = [&](std::size_t at) {
    const auto kind =
        at < rest.size() ? checksum_from_wire(static_cast<std::uint8_t>(rest[at])) : std::nullopt;
    if (kind) m.check = *kind;
    return kind.has_value();
  };
  auto text = [&](std::size_t from, std::size_t limit) {
    if (rest.size() - from > limit) return false;
    m.text.assign(reinterpret_cast<const char*>(rest.data() + from), rest.size() - from);
    return true;
  };
  switch (m.kind) {
    case type::put:
      if (rest.size() < 9 || !check(8)) return {};
      m.size = wire::get(rest, 0, 8);
      if (!text(9, max_name)) return {};
      return m;
    case type::get:
      if (!check(0) || !text(1, max_name)) return {};
      return m;
    case type::file:
      if (rest.size() != 8) return {};
      m.size = wire::get(rest, 0, 8);
      return m;
    case type::ready: {
      if (rest.size() != 8 + coverbs::remote_buffer::wire_size) return {};
      m.area.slots = static_cast<std::uint32_t>(wire::get(rest, 0, 4));
      m.area.slot_size = static_cast<std::uint32_t>(wire::get(rest, 4, 4));
      if (m.area.slots == 0 || m.area.slots > max_slots) return {};
      if (m.area.slot_size == 0 || m.area.slot_size > max_slot_size) return {};
      if (coverbs::remote_buffer::parse(rest.subspan(8), m.area.where)) return {};
      if (m.area.where.length < std::uint64_t{m.area.slots} * m.area.slot_size) return {};
      return m;
    }
    case type::credit:
      if (rest.empty()) return {};
      for (auto b : rest) m.slots.push_back(std::to_integer<std::uint8_t>(b));
      return m;
    case type::done:
      if (!check(0) || rest.size() != 1 + digest_size(m.check)) return {};
      m.sum.kind = m.check;
      for (std::size_t i = 1; i < rest.size(); ++i)
        m.sum.bytes[i - 1] = std::to_integer<std::uint8_t>(rest[i]);
      return m;
    case type::ok:
    case type::busy:
      if (!rest.empty()) return {};
      return m;
    case type::error:
      if (!text(0, max_text)) return {};
      m.text = printable(m.text);  // it reaches logs and terminals: nothing there may be forged
      return m;
  }
  return {};
}

}  // namespace ft
