// kv_server's hash table: the registered memory that clients read slots of with RDMA READ,
// and the server's own lookups and seqlock-style writes into it (layout: kv_layout.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kv_layout.hpp"

namespace kv {

/// Not thread-safe: one server thread owns it. Clients' READs are the only concurrent access,
/// and the version protocol is what makes those safe.
class table {
 public:
  explicit table(const layout& l) : layout_(l), words_(l.table_size() / 8) {}

  const layout& geometry() const noexcept { return layout_; }
  /// The bytes to register for remote reads.
  std::span<std::byte> memory() noexcept { return std::as_writable_bytes(std::span(words_)); }

  /// The live slot holding `key`, if any. Stops at an empty slot: no insert ever went past one.
  std::optional<std::uint32_t> find(std::string_view key) const {
    for (std::uint32_t i = 0; i < layout_.probes(); ++i) {
      const std::uint32_t index = layout_.probe(key, i);
      const slot_view v = view(index);
      if (v.state == slot_state::empty) return {};
      if (v.state == slot_state::live && v.key == key) return index;
    }
    return {};
  }

  /// Where a put of `key` goes: its live slot, else the first unused one in its probe
  /// sequence. Nothing when all of those hold other keys.
  std::optional<std::uint32_t> place_for(std::string_view key) const {
    if (auto index = find(key)) return index;
    for (std::uint32_t i = 0; i < layout_.probes(); ++i) {
      const std::uint32_t index = layout_.probe(key, i);
      if (view(index).state != slot_state::live) return index;
    }
    return {};
  }

  /// The slot's fields; the server's own view, always consistent.
  slot_view view(std::uint32_t index) const {
    slot_view v;
    decode_slot(layout_, slot(index), v, false);
    return v;
  }

  /// Starts a write of `index`: from now until `commit`, readers see both versions odd.
  void open(std::uint32_t index) {
    const std::uint64_t v = version(index, 0).load(std::memory_order_relaxed);
    version(index, 0).store(v + 1, std::memory_order_relaxed);
    version(index, layout_.trailer_offset()).store(v + 1, std::memory_order_relaxed);
    // The odd versions must be visible before any byte of the contents changes.
    std::atomic_thread_fence(std::memory_order_release);
  }

  /// Writes the slot's header fields and key (when `from` is 0) and the value bytes
  /// `[from, to)`. Only between `open` and `commit`.
  void fill(std::uint32_t index, slot_state state, std::string_view key, std::span<const std::byte> value,
            std::size_t from, std::size_t to) {
    std::byte* s = slot(index).data();
    if (from == 0) {
      const auto key_length = static_cast<std::uint16_t>(key.size());
      const auto value_length = static_cast<std::uint32_t>(value.size());
      std::memcpy(s + 8, &key_length, 2);
      s[10] = static_cast<std::byte>(state);
      s[11] = std::byte{0};
      std::memcpy(s + 12, &value_length, 4);
      // std::copy, not memcpy: a tombstone's empty key and value may have null data.
      std::copy(key.begin(), key.end(), reinterpret_cast<char*>(s + layout_.key_offset()));
    }
    std::copy(value.begin() + from, value.begin() + to, s + layout_.value_offset() + from);
  }

  /// Ends the write: both versions become the next even number once the contents are out.
  void commit(std::uint32_t index) {
    const std::uint64_t v = version(index, 0).load(std::memory_order_relaxed) + 1;
    version(index, 0).store(v, std::memory_order_release);
    version(index, layout_.trailer_offset()).store(v, std::memory_order_release);
  }

 private:
  std::span<std::byte> slot(std::uint32_t index) {
    return memory().subspan(layout_.offset(index), layout_.slot_size());
  }
  std::span<const std::byte> slot(std::uint32_t index) const {
    return std::as_bytes(std::span(words_)).subspan(layout_.offset(index), layout_.slot_size());
  }
  std::atomic_ref<std::uint64_t> version(std::uint32_t index, std::size_t at) {
    return std::atomic_ref<std::uint64_t>(words_[(layout_.offset(index) + at) / 8]);
  }

  layout layout_;
  std::vector<std::uint64_t> words_;  // 8-byte aligned, so atomic_ref may use the versions
};

}  // namespace kv
