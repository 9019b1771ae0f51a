// Arbitrary bytes, read as the rdma_cm private data of a connect request or an accept: nothing
// may crash, a refusal leaves the output untouched, and an accepted handshake describes a
// receive pool the stream can serve and re-encodes to the bytes it came from (the rest is
// rdma_cm's padding, which is ignored).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "coverbs/detail/handshake.hpp"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace coverbs::detail;
  const auto bytes = std::as_bytes(std::span(data, size));
  const stream_geometry sentinel{.buffers = 7, .buffer_size = 7};
  stream_geometry peer = sentinel;
  if (parse_handshake(bytes, peer)) {
    require(peer.buffers == sentinel.buffers && peer.buffer_size == sentinel.buffer_size);
    return 0;
  }
  require(size >= handshake_size);
  require(peer.buffers > 0 && peer.buffer_size >= 256 && peer.buffer_size <= (16u << 20));
  require(std::uint64_t{peer.buffers} * peer.buffer_size <= max_pool_bytes);
  const auto again = encode_handshake(peer);
  require(std::memcmp(again.data(), bytes.data(), handshake_size) == 0);
  return 0;
}
