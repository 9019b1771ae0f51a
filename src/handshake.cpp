#include "coverbs/detail/handshake.hpp"

#include "coverbs/error.hpp"

namespace coverbs::detail {
namespace {
constexpr std::byte magic0{'C'}, magic1{'V'}, version{1};
// A buffer must hold a header-less message of useful size; beyond 16 MiB a pool of them
// would be an unreasonable registration to ask of a peer.
constexpr std::uint32_t min_buffer = 256, max_buffer = 16u << 20;
}  // namespace

std::array<std::byte, handshake_size> encode_handshake(const stream_geometry& g) noexcept {
  std::array<std::byte, handshake_size> out{};
  out[0] = magic0;
  out[1] = magic1;
  out[2] = version;
  out[4] = static_cast<std::byte>(g.buffers & 0xff);
  out[5] = static_cast<std::byte>(g.buffers >> 8);
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<std::byte>(g.buffer_size >> (8 * i));
  return out;
}

std::error_code parse_handshake(std::span<const std::byte> b, stream_geometry& out) noexcept {
  const auto bad = make_error_code(errc::bad_descriptor);
  if (b.size() < handshake_size || b[0] != magic0 || b[1] != magic1 || b[2] != version ||
      b[3] != std::byte{0} || b[6] != std::byte{0} || b[7] != std::byte{0}) {
    return bad;
  }
  stream_geometry g;
  g.buffers = static_cast<std::uint16_t>(std::to_integer<unsigned>(b[4]) | std::to_integer<unsigned>(b[5]) << 8);
  g.buffer_size = 0;
  for (int i = 0; i < 4; ++i) g.buffer_size |= std::to_integer<std::uint32_t>(b[8 + i]) << (8 * i);
  if (g.buffers == 0 || g.buffer_size < min_buffer || g.buffer_size > max_buffer) return bad;
  out = g;
  return {};
}

}  // namespace coverbs::detail
