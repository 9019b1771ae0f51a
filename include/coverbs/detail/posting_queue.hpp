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
                std::uint32_t capacity) noexcept;
  ~posting_queue();
  posting_queue(const posting_queue&) = delete;
  posting_queue& operator=(const posting_queue&) = delete;

  /// Posts `op` now, or queues it until a slot frees. Never completes it inline.
  void submit(operation* op);
  /// `op`, a request of this queue, completed: frees its slot and posts queued requests, whose
  /// post failures go to `done`.
  void on_completed(operation* op, op_queue& done);
  /// Cancellation: a queued request is withdrawn and aborted; a posted one cannot be
  /// recalled, so the QP moves to ERROR and the request ends with its flush completion.
  void cancel(operation* op);
  /// Aborts every queued (not yet posted) request with deferred handlers.
  void abort_waiting();
  /// For a completion engine that polls no more: takes out one request, queued or posted,
  /// for the caller to destroy (null when none is left).
  operation* take_abandoned() noexcept;

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
  op_list posted_;

  friend class completion_engine;  // links its queues through these
  posting_queue* prev_ = nullptr;
  posting_queue* next_ = nullptr;
};

}  // namespace coverbs::detail
