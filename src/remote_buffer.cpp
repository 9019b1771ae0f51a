#include "coverbs/remote_buffer.hpp"

#include "coverbs/detail/little_endian.hpp"
#include "coverbs/error.hpp"

namespace coverbs {

using detail::get_le;
using detail::put_le;
std::array<std::byte, remote_buffer::wire_size> remote_buffer::serialize() const noexcept {
  std::array<std::byte, wire_size> out{};
  out[0] = std::byte{wire_version};
  put_le(out.data() + 4, address);
  put_le(out.data() + 12, rkey);
  put_le(out.data() + 16, length);
  return out;
}

std::error_code remote_buffer::parse(std::span<const std::byte> bytes, remote_buffer& out) noexcept {
  if (bytes.size() != wire_size || bytes[0] != std::byte{wire_version} ||
      bytes[1] != std::byte{0} || bytes[2] != std::byte{0} || bytes[3] != std::byte{0}) {
    return make_error_code(errc::bad_descriptor);
  }
  const remote_buffer parsed{get_le<std::uint64_t>(bytes.data() + 4),
                             get_le<std::uint32_t>(bytes.data() + 12),
                             get_le<std::uint32_t>(bytes.data() + 16)};
  if (parsed.address + parsed.length < parsed.address) return make_error_code(errc::bad_descriptor);
  out = parsed;
  return {};
}

}  // namespace coverbs
