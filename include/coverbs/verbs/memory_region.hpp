// Registered memory: what the device may read or write, and which keys grant it.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "coverbs/remote_buffer.hpp"
#include "coverbs/verbs/protection_domain.hpp"

namespace coverbs::verbs {

/// Access rights of a registration. Nothing is granted implicitly: remote rights must be named.
enum class access : int {
  none = 0,
  local_write = IBV_ACCESS_LOCAL_WRITE,
  remote_read = IBV_ACCESS_REMOTE_READ,
  remote_write = IBV_ACCESS_REMOTE_WRITE,
  remote_atomic = IBV_ACCESS_REMOTE_ATOMIC,
};
constexpr access operator|(access a, access b) noexcept {
  return static_cast<access>(static_cast<int>(a) | static_cast<int>(b));
}
constexpr bool has(access set, access bit) noexcept {
  return (static_cast<int>(set) & static_cast<int>(bit)) == static_cast<int>(bit);
}

/// A slice of registered memory as a work request's scatter/gather entry needs it.
struct local_buffer {
  void* data = nullptr;
  std::uint32_t size = 0;
  std::uint32_t lkey = 0;
};

/// Owns an `ibv_mr` over memory the caller keeps alive for the region's lifetime.
class memory_region {
 public:
  /// Registers `memory` in `pd` with exactly `rights`. Remote write and atomic rights need
  /// local write as well (a verbs rule); it is added for them rather than failing.
  memory_region(const protection_domain& pd, std::span<std::byte> memory, access rights);

  /// The libibverbs handle.
  ibv_mr* native_handle() const noexcept { return mr_.get(); }
  /// Key for local scatter/gather entries.
  std::uint32_t lkey() const noexcept { return mr_->lkey; }
  /// Key a peer presents to reach this region.
  std::uint32_t rkey() const noexcept { return mr_->rkey; }
  /// The registered bytes.
  std::span<std::byte> memory() const noexcept {
    return {static_cast<std::byte*>(mr_->addr), mr_->length};
  }
  /// A slice for local use; throws std::out_of_range outside the region.
  local_buffer slice(std::size_t offset, std::size_t length) const;
  /// The whole region for local use.
  local_buffer whole() const { return slice(0, mr_->length); }
  /// A descriptor of `[offset, offset + length)` to hand to a peer; throws std::out_of_range.
  remote_buffer remote(std::size_t offset, std::size_t length) const;
  /// The whole region as a descriptor for a peer.
  remote_buffer remote() const { return remote(0, mr_->length); }

 private:
  struct deregisterer {
    void operator()(ibv_mr* mr) const noexcept { ibv_dereg_mr(mr); }
  };
  std::unique_ptr<ibv_mr, deregisterer> mr_;
};

}  // namespace coverbs::verbs
