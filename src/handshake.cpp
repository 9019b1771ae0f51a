#include "coverbs/detail/handshake.hpp"

#include "coverbs/detail/little_endian.hpp"
#include "coverbs/error.hpp"

namespace coverbs::detail {
namespace {
constexpr std::byte magic0{'C'}, magic1{'V'}, version{1};
// A buffer must hold a header-less message of useful size; beyond 16 MiB a pool of them
// would be an unreasonable registration to ask of a peer.
constexpr std::uint32_t min_buffer = 256, max_buffer = 16u << 20;
}  // namespace

bool usable_geometry(const stream_geometry& g) noexcept {
  if (g.buffers == 0 || g.buffer_size < min_buffer || g.buffer_size > max_buffer) return false;
  // Each field may be sound and their product still more memory than any peer should pin.
  return std::uint64_t{g.buffers} * g.buffer_size <= max_pool_bytes;
}

std::array<std::byte, handshake_size> encode_handshake(const stream_geometry& g) noexcept {
  std::array<std::byte, handshake_size> out{};
  out[0] = magic0;
  out[1] = magic1;
  out[2] = version;
  put_le(out.data() + 4, g.buffers);
  put_le(out.data() + 8, g.buffer_size);
  return out;
}

std::error_code parse_handshake(std::span<const std::byte> b, stream_geometry& out) noexcept {
  const auto bad = make_error_code(errc::bad_descriptor);
  if (b.size() < handshake_size || b[0] != magic0 || b[1] != magic1 || b[2] != version ||
      b[3] != std::byte{0} || b[6] != std::byte{0} || b[7] != std::byte{0}) {
    return bad;
  }
  stream_geometry g;
  g.buffers = get_le<std::uint16_t>(b.data() + 4);
  g.buffer_size = get_le<std::uint32_t>(b.data() + 8);
  if (!usable_geometry(g)) return bad;
  out = g;
  return {};
}

}  // namespace coverbs::detail
