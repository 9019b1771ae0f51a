// Arbitrary bytes, read as a remote_buffer descriptor from a peer: nothing may crash, a refusal
// leaves the output untouched, and whatever is accepted describes a range that does not wrap
// and re-serializes to exactly the bytes it came from. Longer inputs also carry an offset and
// a size for the bounds check that guards every one-sided operation against the descriptor.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "coverbs/remote_buffer.hpp"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

std::uint64_t read_u64(std::span<const std::byte> bytes) {
  std::uint64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

// parse() as the library calls it; `out` holds a sentinel that a refusal must leave alone.
bool parse_checked(std::span<const std::byte> bytes, coverbs::remote_buffer& out) {
  const coverbs::remote_buffer sentinel{.address = 0x5555, .rkey = 0x66, .length = 0x77};
  out = sentinel;
  if (coverbs::remote_buffer::parse(bytes, out)) {
    require(out == sentinel);
    return false;
  }
  require(bytes.size() == coverbs::remote_buffer::wire_size);
  require(out.address + out.length >= out.address);
  const auto again = out.serialize();
  require(std::memcmp(again.data(), bytes.data(), again.size()) == 0);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using coverbs::remote_buffer;
  const auto bytes = std::as_bytes(std::span(data, size));
  remote_buffer descriptor;
  parse_checked(bytes, descriptor);

  if (size < remote_buffer::wire_size + 16) return 0;
  if (!parse_checked(bytes.first(remote_buffer::wire_size), descriptor)) return 0;
  const std::uint64_t offset = read_u64(bytes.subspan(remote_buffer::wire_size));
  const std::uint64_t length = read_u64(bytes.subspan(remote_buffer::wire_size + 8));
  // The reference in 128-bit arithmetic, where the sum cannot wrap.
  const bool inside = static_cast<unsigned __int128>(offset) + length <= descriptor.length;
  require(descriptor.contains(offset, length) == inside);
  if (inside) {
    const auto part = descriptor.sub(static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(length));
    require(part.rkey == descriptor.rkey && part.address >= descriptor.address);
    require(part.address + part.length <= descriptor.address + descriptor.length);
  }
  return 0;
}
