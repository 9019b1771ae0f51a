// What two coverbs peers tell each other in rdma_cm private data: each side's receive pool.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "coverbs/detail/rdma_stream.hpp"

namespace coverbs::detail {

/// Wire form: 'C' 'V', version 1, a zero byte, receive buffers (u16 LE), two zero bytes,
/// buffer size (u32 LE). rdma_cm pads private data, so trailing bytes are ignored.
inline constexpr std::size_t handshake_size = 12;
/// The largest receive pool (buffers x buffer size) a peer may ask this side to send into: the
/// stream allocates and registers a send pool of that size for it.
inline constexpr std::uint64_t max_pool_bytes = std::uint64_t{1} << 30;

/// Whether a peer takes a receive pool of this shape: at least one buffer, each of 256 B to
/// 16 MiB, at most max_pool_bytes in all. Local socket_options are held to it too, so that a
/// pool the peer would refuse is invalid_argument here rather than its connection_refused.
bool usable_geometry(const stream_geometry& g) noexcept;
std::array<std::byte, handshake_size> encode_handshake(const stream_geometry& g) noexcept;
/// Rejects anything but a well-formed version-1 handshake with a usable geometry, its pool at
/// most max_pool_bytes (errc::bad_descriptor), leaving `out` untouched.
std::error_code parse_handshake(std::span<const std::byte> bytes, stream_geometry& out) noexcept;

}  // namespace coverbs::detail
