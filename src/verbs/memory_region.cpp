#include "coverbs/verbs/memory_region.hpp"

#include <stdexcept>

#include "coverbs/detail/throw_error.hpp"

namespace coverbs::verbs {
namespace {

void check_range(std::size_t offset, std::size_t length, std::size_t size) {
  if (offset > size || length > size - offset || length > UINT32_MAX) {
    throw std::out_of_range("coverbs: slice outside the memory region");
  }
}

}  // namespace

memory_region::memory_region(const protection_domain& pd, std::span<std::byte> memory,
                             access rights) {
  if (has(rights, access::remote_write) || has(rights, access::remote_atomic)) {
    rights = rights | access::local_write;
  }
  mr_.reset(ibv_reg_mr(pd.native_handle(), memory.data(), memory.size(), static_cast<int>(rights)));
  if (!mr_) detail::throw_errno("ibv_reg_mr");
}

local_buffer memory_region::slice(std::size_t offset, std::size_t length) const {
  check_range(offset, length, mr_->length);
  return {static_cast<std::byte*>(mr_->addr) + offset, static_cast<std::uint32_t>(length), lkey()};
}

remote_buffer memory_region::remote(std::size_t offset, std::size_t length) const {
  check_range(offset, length, mr_->length);
  return {reinterpret_cast<std::uint64_t>(mr_->addr) + offset, rkey(),
          static_cast<std::uint32_t>(length)};
}

}  // namespace coverbs::verbs
