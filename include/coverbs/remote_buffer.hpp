// A peer's registered memory, described so that it can cross the wire.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

namespace coverbs {

/// Address, key and length of memory a peer registered for remote access.
struct remote_buffer {
  std::uint64_t address = 0;
  std::uint32_t rkey = 0;
  std::uint32_t length = 0;

  /// The sub-range `[offset, offset + size)`; the caller checks bounds with `contains`.
  constexpr remote_buffer sub(std::uint32_t offset, std::uint32_t size) const noexcept {
    return {address + offset, rkey, size};
  }
  /// True when `[offset, offset + size)` lies inside this buffer.
  constexpr bool contains(std::uint64_t offset, std::uint64_t size) const noexcept {
    return offset <= length && size <= length - offset;
  }
  friend constexpr bool operator==(const remote_buffer&, const remote_buffer&) = default;

  /// Size of the wire form: version, 3 reserved zero bytes, address, rkey, length (little-endian).
  static constexpr std::size_t wire_size = 20;
  /// Wire format version written by `serialize` and required by `parse`.
  static constexpr std::uint8_t wire_version = 1;

  /// The wire form.
  std::array<std::byte, wire_size> serialize() const noexcept;
  /// Parses a wire form. Wrong size, version, non-zero reserved bytes or a range that wraps
  /// the address space give `errc::bad_descriptor` and leave `out` untouched.
  static std::error_code parse(std::span<const std::byte> bytes, remote_buffer& out) noexcept;
};

}  // namespace coverbs
