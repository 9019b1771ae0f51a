// Shared receive queue: one pool of posted receives serving many queue pairs.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "coverbs/verbs/protection_domain.hpp"

namespace coverbs::verbs {

/// Sizes of a new SRQ.
struct shared_receive_queue_options {
  std::uint32_t max_wr = 256;
  std::uint32_t max_sge = 1;
};

/// Owns an `ibv_srq`.
class shared_receive_queue {
 public:
  /// Creates an SRQ in `pd`; throws std::system_error on failure.
  shared_receive_queue(const protection_domain& pd, const shared_receive_queue_options& options = {});

  /// The libibverbs handle.
  ibv_srq* native_handle() const noexcept { return srq_.get(); }
  /// Destroys the SRQ now (as ibv_destroy_srq, which refuses while a QP uses it): true when
  /// it is gone, and with it every receive posted to it.
  bool destroy() noexcept;
  /// Gives up the SRQ: the caller destroys it (ibv_destroy_srq).
  ibv_srq* release() noexcept { return srq_.release(); }
  /// The sizes asked for.
  const shared_receive_queue_options& options() const noexcept { return options_; }

 private:
  struct destroyer {
    void operator()(ibv_srq* srq) const noexcept { ibv_destroy_srq(srq); }
  };
  std::unique_ptr<ibv_srq, destroyer> srq_;
  shared_receive_queue_options options_;
};

}  // namespace coverbs::verbs
