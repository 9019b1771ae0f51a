// Arbitrary bytes, read as a peer's TCP-fallback frame stream: nothing may crash, and every
// header that is accepted must re-encode to exactly the bytes it came from.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "coverbs/wire/frame.hpp"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

// Reads frames as a connection would, until the bytes run out or a header is refused.
void read_stream(std::span<const std::byte> bytes, std::uint32_t limit) {
  using namespace coverbs::wire;
  while (bytes.size() >= header_size) {
    const auto raw = bytes.first<header_size>();
    frame_header h;
    if (decode_header(raw, h, limit)) return;  // the connection would close here
    require(h.payload_length <= limit);
    std::array<std::byte, header_size> again;
    encode_header(h, again);
    require(std::memcmp(again.data(), raw.data(), header_size) == 0);
    if (h.payload_length > bytes.size() - header_size) return;  // would wait for more bytes
    bytes = bytes.subspan(header_size + h.payload_length);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  read_stream(bytes, coverbs::wire::max_payload_size);
  read_stream(bytes, coverbs::wire::min_payload_limit);
  return 0;
}
