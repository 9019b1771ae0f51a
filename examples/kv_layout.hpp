// The key-value table's memory layout, shared by kv_server (which writes it) and kv_client
// (which reads slots of it with RDMA READ): slot geometry, the hash and probe sequence, and
// the check that makes a slot copied during a concurrent write detectable.
//
// A slot, at `index * slot_size()` in the table:
//
//   offset 0               u64 version   odd while the server writes the slot
//   offset 8               u16 key length
//   offset 10              u8  state     empty (never used), live, or deleted (a tombstone)
//   offset 11              u8  reserved (0)
//   offset 12              u32 value length
//   offset 16              key bytes     (max_key of them)
//   offset 16 + max_key    value bytes   (max_value of them)
//   slot_size() - 8        u64 version   the trailer: equal to the header's once written
//
// Integers are in the server's byte order; both ends are x86-64 here (asserted below).
//
// The server writes a slot as a seqlock writer: both versions become odd (header, then
// trailer), then the contents change, then both become the next even number (header, then
// trailer). A reader copies the whole slot with one RDMA READ and accepts the copy only when
// both versions are even and equal. This relies on the copy being taken in ascending address
// order, as rxe and the TCP fallback do: the header is then read before any content byte and
// the trailer after all of them, so equal even versions mean no write overlapped the contents.
// A device that may fetch a slot out of order would need a version per cache line, or a
// checksum, instead.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace kv {

static_assert(std::endian::native == std::endian::little, "the slot layout is little-endian");

enum class slot_state : std::uint8_t { empty = 0, live = 1, deleted = 2 };

/// Table geometry; the server announces it, and the client derives every offset from it.
struct layout {
  std::uint32_t slots = 4096;
  std::uint16_t max_key = 64;
  std::uint32_t max_value = 1024;
  /// Slots looked at for one key: linear probing from the key's home slot, wrapping around.
  std::uint32_t probe_limit = 8;

  static constexpr std::size_t header_size = 16;
  static constexpr std::size_t trailer_size = 8;

  /// Bytes per slot; a multiple of 8 so that every version word is 8-byte aligned.
  std::size_t slot_size() const noexcept {
    const std::size_t contents = header_size + max_key + max_value;
    return (contents + 7) / 8 * 8 + trailer_size;
  }
  std::size_t table_size() const noexcept { return slots * slot_size(); }
  std::size_t offset(std::uint32_t index) const noexcept { return index * slot_size(); }
  std::size_t key_offset() const noexcept { return header_size; }
  std::size_t value_offset() const noexcept { return header_size + max_key; }
  std::size_t trailer_offset() const noexcept { return slot_size() - trailer_size; }
  /// How many distinct slots a probe visits (never more than the table has).
  std::uint32_t probes() const noexcept { return probe_limit < slots ? probe_limit : slots; }

  /// The `i`-th slot of `key`'s probe sequence: (hash(key) + i) mod slots.
  std::uint32_t probe(std::string_view key, std::uint32_t i) const noexcept {
    return static_cast<std::uint32_t>((hash(key) + i) % slots);
  }

  /// FNV-1a, 64 bits: cheap, and spreads short similar keys ("key-1", "key-2") well.
  static std::uint64_t hash(std::string_view key) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : key) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h;
  }
};

/// The fields of a slot copy that passed the version check.
struct slot_view {
  slot_state state = slot_state::empty;
  std::string_view key;
  std::span<const std::byte> value;
};

enum class slot_check {
  consistent,  ///< versions even and equal: `view` is one write's result
  torn,        ///< a write overlapped the copy: read it again
  invalid,     ///< versions agree but the fields are impossible (not a kv_server table)
};

namespace detail {
inline std::uint64_t load64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace detail

/// Checks a copy of one slot (`bytes.size() == l.slot_size()`) and decodes it into `view`.
/// With `check_versions == false` the versions are ignored: only the stress test's control run
/// does that, to show that torn copies really occur.
inline slot_check decode_slot(const layout& l, std::span<const std::byte> bytes, slot_view& view,
                              bool check_versions = true) noexcept {
  const std::uint64_t head = detail::load64(bytes.data());
  const std::uint64_t tail = detail::load64(bytes.data() + l.trailer_offset());
  if (check_versions && (head != tail || head % 2 != 0)) return slot_check::torn;
  std::uint16_t key_length;
  std::uint32_t value_length;
  std::memcpy(&key_length, bytes.data() + 8, 2);
  std::memcpy(&value_length, bytes.data() + 12, 4);
  const auto state = static_cast<slot_state>(bytes[10]);
  if (state != slot_state::empty && state != slot_state::live && state != slot_state::deleted) {
    return slot_check::invalid;
  }
  if (key_length > l.max_key || value_length > l.max_value) return slot_check::invalid;
  view.state = state;
  view.key = {reinterpret_cast<const char*>(bytes.data() + l.key_offset()), key_length};
  view.value = bytes.subspan(l.value_offset(), value_length);
  return slot_check::consistent;
}

}  // namespace kv
