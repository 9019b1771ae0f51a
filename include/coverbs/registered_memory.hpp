// Memory a connection's peer may reach with one-sided operations.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>

#include "coverbs/detail/stream_core.hpp"
#include "coverbs/remote_buffer.hpp"
#include "coverbs/verbs/memory_region.hpp"

namespace coverbs {

/// A registration made by `socket::register_memory`: on RDMA a memory region in the
/// connection's own protection domain, over TCP an entry in the connection's region table.
/// Either way its key works on that connection only, within its bounds and rights, and not at
/// all once this object is destroyed. The caller keeps the memory alive as long as this.
class registered_memory {
 public:
  registered_memory() = default;
  registered_memory(registered_memory&& other) noexcept { swap(other); }
  registered_memory& operator=(registered_memory&& other) noexcept {
    registered_memory(std::move(other)).swap(*this);
    return *this;
  }
  /// Deregisters (if the connection is still there).
  ~registered_memory() {
    if (auto owner = owner_.lock()) owner->deregister_counted(handle_, memory_.size());
  }

  /// The registered bytes.
  std::span<std::byte> memory() const noexcept { return memory_; }
  /// A slice for the local side of one-sided operations; throws std::out_of_range.
  verbs::local_buffer slice(std::size_t offset, std::size_t length) const {
    check(offset, length);
    return {memory_.data() + offset, static_cast<std::uint32_t>(length), lkey_};
  }
  /// A descriptor of the whole registration for the peer.
  remote_buffer remote() const noexcept { return remote_; }
  /// A descriptor of `[offset, offset + length)` for the peer; throws std::out_of_range.
  remote_buffer remote(std::size_t offset, std::size_t length) const {
    check(offset, length);
    return remote_.sub(static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(length));
  }

 private:
  friend class socket;
  void check(std::size_t offset, std::size_t length) const {
    if (offset > memory_.size() || length > memory_.size() - offset) {
      throw std::out_of_range("coverbs: slice outside the registered memory");
    }
  }
  void swap(registered_memory& other) noexcept {
    std::swap(owner_, other.owner_);
    std::swap(memory_, other.memory_);
    std::swap(lkey_, other.lkey_);
    std::swap(handle_, other.handle_);
    std::swap(remote_, other.remote_);
  }

  std::weak_ptr<detail::stream_core> owner_;
  std::span<std::byte> memory_;
  std::uint32_t lkey_ = 0;
  std::uint32_t handle_ = 0;
  remote_buffer remote_;
};

}  // namespace coverbs
