// The local memory a TCP peer may reach with one-sided operations, and the checks an RDMA
// responder would make before touching it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <unordered_map>

#include "coverbs/remote_buffer.hpp"
#include "coverbs/verbs/memory_region.hpp"

namespace coverbs::wire {

/// Registered regions by rkey. Every failure is a `wc_errc` status, as the device would
/// report it, and touches no byte. Not thread-safe: one executor owns the table.
class region_table {
 public:
  /// Registers `memory` with `rights` under a fresh, unpredictable, non-zero rkey. Descriptors
  /// carry the real local address. Throws std::length_error past 4 GiB - 1 bytes, and
  /// std::system_error with getrandom's errno where the kernel's random source fails.
  remote_buffer register_region(std::span<std::byte> memory, verbs::access rights);
  /// Forgets `rkey`; later operations with it fail with remote_access. Unknown keys are ignored.
  void deregister(std::uint32_t rkey) noexcept;
  /// Number of registered regions.
  std::size_t size() const noexcept { return regions_.size(); }

  /// Checks that `[addr, addr + length)` lies in `rkey`'s region and that the region grants `right`
  /// (with `length` 0 nothing is checked: InfiniBand's rule C9-88).
  std::error_code check(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                        verbs::access right) const noexcept;
  /// Where an RDMA WRITE of `length` bytes at `addr` lands (needs remote_write), for a caller
  /// that fills it at once (a later call may deregister the region).
  std::error_code write_target(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                               std::byte*& at) const noexcept {
    return locate(rkey, addr, length, verbs::access::remote_write, at);
  }
  /// Where an RDMA READ of `length` bytes at `addr` comes from (needs remote_read), for a
  /// caller that takes the bytes at once.
  std::error_code read_source(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                              std::byte*& at) const noexcept {
    return locate(rkey, addr, length, verbs::access::remote_read, at);
  }
  /// Adds `add` to the 8-byte word at `addr` (needs remote_atomic, 8-byte alignment).
  std::error_code apply_fetch_add(std::uint32_t rkey, std::uint64_t addr, std::uint64_t add,
                                  std::uint64_t& previous) noexcept;
  /// Stores `swap` in the word at `addr` if it equals `compare` (needs remote_atomic, alignment).
  std::error_code apply_compare_swap(std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                                     std::uint64_t swap, std::uint64_t& previous) noexcept;

 private:
  struct region {
    std::span<std::byte> memory;
    verbs::access rights;
  };
  // The bytes `[addr, addr + length)` once every check passed, else the failure.
  std::error_code locate(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length, verbs::access right,
                         std::byte*& at) const noexcept;
  std::error_code locate_word(std::uint32_t rkey, std::uint64_t addr, std::uint64_t*& word) noexcept;

  std::unordered_map<std::uint32_t, region> regions_;
};

}  // namespace coverbs::wire
