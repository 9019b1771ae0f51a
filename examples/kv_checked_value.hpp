// Self-checking values for kv_client's stress mode: each says which run, key, writer and
// write made it, and ends with a checksum of everything before, so a value stitched from two
// writes (a torn read) or left by another run is recognised.
//
//   u64 run nonce, u32 key index, u32 writer, u64 sequence number, filler, u64 FNV-1a checksum
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace kv {

struct value_stamp {
  std::uint64_t run = 0;
  std::uint32_t key = 0, writer = 0;
  std::uint64_t sequence = 0;
};

/// The smallest checked value: the stamp and the checksum.
constexpr std::size_t min_checked_value = 32;

namespace detail {
inline std::uint64_t fnv1a(std::span<const std::byte> bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) h = (h ^ std::to_integer<std::uint64_t>(b)) * 0x100000001b3ull;
  return h;
}
}  // namespace detail

/// A `size`-byte value (at least `min_checked_value`) carrying `s`. The filler depends on
/// the stamp, so two writes of one key differ throughout.
inline std::vector<std::byte> make_checked_value(const value_stamp& s, std::size_t size) {
  std::vector<std::byte> v(size);
  std::memcpy(v.data(), &s.run, 8);
  std::memcpy(v.data() + 8, &s.key, 4);
  std::memcpy(v.data() + 12, &s.writer, 4);
  std::memcpy(v.data() + 16, &s.sequence, 8);
  std::uint64_t x = s.run ^ (s.sequence * 0x9e3779b97f4a7c15ull) ^ (std::uint64_t{s.writer} << 32) ^ s.key;
  for (std::size_t i = 24; i < size - 8; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  const std::uint64_t sum = detail::fnv1a(std::span(v).first(size - 8));
  std::memcpy(v.data() + size - 8, &sum, 8);
  return v;
}

/// The stamp of an intact value; nothing if it is too short or its checksum is wrong.
inline std::optional<value_stamp> read_checked_value(std::span<const std::byte> v) {
  if (v.size() < min_checked_value) return {};
  std::uint64_t sum;
  std::memcpy(&sum, v.data() + v.size() - 8, 8);
  if (sum != detail::fnv1a(v.first(v.size() - 8))) return {};
  value_stamp s;
  std::memcpy(&s.run, v.data(), 8);
  std::memcpy(&s.key, v.data() + 8, 4);
  std::memcpy(&s.writer, v.data() + 12, 4);
  std::memcpy(&s.sequence, v.data() + 16, 8);
  return s;
}

}  // namespace kv
