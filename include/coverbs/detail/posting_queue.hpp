// One queue that work requests are posted to (a QP's send or receive side, or an SRQ), with
// credits so that posting more than its depth waits instead of failing.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "coverbs/detail/completion_engine.hpp"
#include "coverbs/detail/operation.hpp"

namespace coverbs::detail {

class posting_queue {
 public:
  enum class kind { send, receive, shared_receive };

  posting_queue(std::shared_ptr<completion_engine> engine, kind k, void* native,
                std::uint32_t capacity) noexcept
      : engine_(std::move(engine)), kind_(k), native_(native), capacity_(capacity) {}

  /// Posts `op` now, or queues it until a slot frees. Never completes it inline.
  void submit(operation* op);
  /// A request of this queue completed: frees its slot and posts queued requests, whose post
  /// failures go to `done`.
  void on_completed(op_queue& done);
  /// Cancellation: a queued request is withdrawn and aborted; a posted one cannot be
  /// recalled, so the QP moves to ERROR and the request ends with its flush completion.
  void cancel(operation* op);
  /// Aborts every queued (not yet posted) request with deferred handlers.
  void abort_waiting();

  std::uint32_t in_flight() const noexcept { return in_flight_; }
  completion_engine& engine() const noexcept { return *engine_; }

 private:
  int post(operation* op);

  std::shared_ptr<completion_engine> engine_;
  kind kind_;
  void* native_;
  std::uint32_t capacity_;
  std::uint32_t in_flight_ = 0;
  op_queue waiting_;
};

}  // namespace coverbs::detail
