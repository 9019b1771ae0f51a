#include "coverbs/verbs/shared_receive_queue.hpp"

#include "coverbs/detail/throw_error.hpp"

namespace coverbs::verbs {

shared_receive_queue::shared_receive_queue(const protection_domain& pd,
                                           const shared_receive_queue_options& options)
    : options_(options) {
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = options.max_wr;
  attr.attr.max_sge = options.max_sge;
  srq_.reset(ibv_create_srq(pd.native_handle(), &attr));
  if (!srq_) detail::throw_errno("ibv_create_srq");
}

bool shared_receive_queue::destroy() noexcept {
  if (!srq_) return true;
  if (ibv_destroy_srq(srq_.get()) != 0) return false;
  (void)srq_.release();  // destroyed already
  return true;
}

}  // namespace coverbs::verbs
