// A shared receive queue bound to a completion service.
#pragma once

#include <memory>

#include "coverbs/completion_service.hpp"
#include "coverbs/detail/posting_queue.hpp"
#include "coverbs/verbs/shared_receive_queue.hpp"

namespace coverbs {

/// Receives posted here are consumed by whichever attached QP gets a message first; they
/// complete on the service's executor. Attach QPs by setting `queue_pair_options::srq` to
/// `&native()` on QPs of the same completion_service (a receive completes on the CQ of the QP
/// that took it, whose service reserved room for the SRQ's depth), and destroy them before the
/// SRQ: its receives still posted then end with operation_aborted (destroyed first, the SRQ
/// holds none of their buffers). An SRQ destroyed first stays (ibv_destroy_srq refuses), its
/// receives with the service, completed as messages take them (and keeping io_context::run
/// going); it goes with the last of those QPs that is an async_queue_pair's own, or else with
/// the service, and what it still holds ends with operation_aborted.
class async_shared_receive_queue {
 public:
  /// Creates an SRQ in `pd` completing through `service`. Throws std::system_error, also where
  /// the service's CQ has no room left for its depth.
  async_shared_receive_queue(completion_service& service, const verbs::protection_domain& pd,
                             const verbs::shared_receive_queue_options& options = {})
      : srq_(pd, options),
        queue_(std::make_unique<detail::posting_queue>(service.engine(),
                                                       detail::posting_queue::kind::shared_receive,
                                                       srq_.native_handle(), options.max_wr)) {}
  ~async_shared_receive_queue() {
    queue_->orphan();
    queue_->abort_waiting();  // posted nowhere now
    if (srq_.destroy()) {
      queue_->requests_discarded();
      return;
    }
    // A QP still uses it: the SRQ cannot go, nor can its receives be recalled. They stay with
    // the service, completed as messages take them; the SRQ goes with the last QP that used it
    // (or with the service), and what it still holds is aborted then.
    queue_->own_srq(srq_.release());
    queue_->engine().adopt(std::move(queue_));
  }
  async_shared_receive_queue(const async_shared_receive_queue&) = delete;
  async_shared_receive_queue& operator=(const async_shared_receive_queue&) = delete;

  /// The underlying verbs SRQ.
  verbs::shared_receive_queue& native() noexcept { return srq_; }
  /// Internal: where receives are posted.
  detail::posting_queue& receive_queue() noexcept { return *queue_; }

 private:
  verbs::shared_receive_queue srq_;
  std::unique_ptr<detail::posting_queue> queue_;
};

}  // namespace coverbs
