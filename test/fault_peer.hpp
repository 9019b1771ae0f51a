// What the fault_peer program (test/fault_peer.cpp) and the tests that kill it agree on.
#pragma once

#include <cstddef>
#include <cstdint>

namespace coverbs::test {

/// The size of the region fault_peer registers for the test.
inline constexpr std::size_t fault_peer_region_size = 1u << 20;

/// Byte `offset` of fault_peer's stream and of its region: 251 is prime, so a byte lost,
/// repeated or reordered shows.
inline std::byte pattern_byte(std::uint64_t offset) {
  return static_cast<std::byte>(offset % 251);
}

}  // namespace coverbs::test
