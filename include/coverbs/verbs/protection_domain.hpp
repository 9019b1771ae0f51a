// Protection domain: the scope in which memory keys and queue pairs are valid together.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

#include "coverbs/verbs/device.hpp"

namespace coverbs::verbs {

/// Owns an `ibv_pd`. Memory registered here is reachable only by queue pairs of the same domain.
class protection_domain {
 public:
  /// Allocates a domain on `dev`; throws std::system_error on failure.
  explicit protection_domain(const device& dev);
  /// Wraps a domain owned elsewhere (rdma_cm's default domain); it is not freed here.
  static protection_domain adopt(ibv_pd* pd) noexcept;

  /// The libibverbs handle.
  ibv_pd* native_handle() const noexcept { return pd_.get(); }

 private:
  struct deallocator {
    bool owned = true;
    void operator()(ibv_pd* pd) const noexcept {
      if (owned && pd != nullptr) ibv_dealloc_pd(pd);
    }
  };
  explicit protection_domain(ibv_pd* pd, bool owned) noexcept : pd_(pd, deallocator{owned}) {}
  std::unique_ptr<ibv_pd, deallocator> pd_;
};

}  // namespace coverbs::verbs
