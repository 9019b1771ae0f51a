#include "coverbs/verbs/protection_domain.hpp"

#include "coverbs/detail/throw_error.hpp"

namespace coverbs::verbs {

protection_domain::protection_domain(const device& dev)
    : pd_(ibv_alloc_pd(dev.native_handle()), deallocator{true}) {
  if (!pd_) detail::throw_errno("ibv_alloc_pd");
}

protection_domain protection_domain::adopt(ibv_pd* pd) noexcept { return protection_domain(pd, false); }

}  // namespace coverbs::verbs
