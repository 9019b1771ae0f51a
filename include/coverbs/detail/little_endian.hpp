// Fixed-width little-endian fields of the wire formats (descriptors, frames, handshakes).
#pragma once

#include <bit>
#include <cstddef>
#include <cstring>

namespace coverbs::detail {

// On little-endian hosts a field is a plain unaligned load or store (one instruction); the
// byte loops, which g++ does not always merge, are for the others.

template <class T>
void put_le(std::byte* out, T value) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, &value, sizeof(T));
  } else {
    for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
  }
}

template <class T>
T get_le(const std::byte* in) noexcept {
  T value = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&value, in, sizeof(T));
  } else {
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      value |= static_cast<T>(static_cast<T>(std::to_integer<unsigned>(in[i])) << (8 * i));
    }
  }
  return value;
}

}  // namespace coverbs::detail
