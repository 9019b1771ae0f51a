// Fixed-width little-endian fields of the wire formats (descriptors, frames, handshakes).
#pragma once

#include <cstddef>

namespace coverbs::detail {

template <class T>
void put_le(std::byte* out, T value) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

template <class T>
T get_le(const std::byte* in) noexcept {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<T>(std::to_integer<unsigned>(in[i])) << (8 * i));
  }
  return value;
}

}  // namespace coverbs::detail
