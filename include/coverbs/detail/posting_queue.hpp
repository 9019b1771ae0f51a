// One queue that work requests are posted to (a QP's send or receive side, or an SRQ), with
// credits so that posting more than its depth waits instead of failing.
#pragma once

#include <infiniband/verbs.h>

#include <boost/asio/cancellation_type.hpp>

#include <cstdint>
#include <memory>

#include "coverbs/detail/completion_engine.hpp"
#include "coverbs/detail/operation.hpp"

namespace coverbs::detail {

class posting_queue {
 public:
  enum class kind { send, receive, shared_receive };

  /// Reserves room in the engine's CQ for `capacity` requests (and a send queue's error
  /// marker); throws std::system_error where the CQ has not that much left.
  posting_queue(std::shared_ptr<completion_engine> engine, kind k, void* native, std::uint32_t capacity);
  ~posting_queue();
  posting_queue(const posting_queue&) = delete;
  posting_queue& operator=(const posting_queue&) = delete;

  /// Posts `op` now (or, in a batch, when the batch closes), or queues it until a slot frees.
  /// Never completes it inline.
  void submit(operation* op);

  /// While one is open, the requests this queue posts are chained, and go to the device with
  /// one ibv_post_* call when the last open batch closes: one doorbell for a burst (as
  /// rdma-core advises posting lists), and under Soft-RoCE one system call, in which rxe sends
  /// the burst and hands what passes its per-call budget to a softirq. A request the device
  /// refuses then fails as a refused post does, through its handler, deferred.
  class batch {
   public:
    explicit batch(posting_queue& queue) noexcept : queue_(queue) { ++queue_.batch_depth_; }
    ~batch() {
      if (--queue_.batch_depth_ == 0) queue_.post_chain();
    }
    batch(const batch&) = delete;
    batch& operator=(const batch&) = delete;

   private:
    posting_queue& queue_;
  };
  /// `op`, a request of this queue, completed: it goes to `done` (the error marker excepted),
  /// its slot is freed and queued requests are posted, whose post failures go to `done` too.
  /// On a send queue, the unsignalled requests posted before `op` have completed as well (a
  /// QP's send queue completes in order): they go to `done` first, with success (a failed
  /// request raises its own completion, signalled or not).
  void on_completed(operation* op, op_queue& done);
  /// Cancellation: a queued request is withdrawn and aborted (any type); a posted one cannot
  /// be recalled, so only a terminal cancel acts on it: the QP moves to ERROR and the request
  /// ends with its flush completion. A partial or total one leaves it (and the QP) be, as
  /// those types promise to leave the I/O object as it was.
  void cancel(operation* op, boost::asio::cancellation_type type);
  /// Aborts every queued (not yet posted) request with deferred handlers.
  void abort_waiting();
  /// The QP is in the error state (moved there, or a failed receive says so). Send queue: an
  /// unsignalled request the device had finished before raises no completion now, so one
  /// signalled request is posted behind them; it is flushed at once, and its completion
  /// completes them. Receive queue: tells the send queue of its QP. Cannot throw: the
  /// unsignalled requests count as outstanding, so the completion loop runs already.
  void qp_in_error() noexcept;
  /// Receive queue: the send queue of the same QP, told when a receive fails.
  void pair_with(posting_queue& send_queue) noexcept { send_side_ = &send_queue; }
  /// Its owner goes while requests are still posted: from now on the queue posts nothing and
  /// touches neither its QP (or SRQ) nor the queue paired with it, which may go first.
  void orphan() noexcept;
  /// Shared receive queue: takes over `srq` (this queue's), to destroy (destroy_srq).
  void own_srq(ibv_srq* srq) noexcept { owns_srq_ = srq != nullptr; }
  /// Destroys the SRQ taken over by own_srq; true when it is gone (or none was taken), false
  /// while a QP still uses it.
  bool destroy_srq() noexcept;
  /// The QP or SRQ this queue posted to discarded the requests still posted (an SRQ or QP
  /// destroyed, a QP reset: none raises a completion for them; orphan() called before): what
  /// completed before and is still in the CQ is polled and completed as usual (mlx5 removes a
  /// reset QP's), the rest (and what waits) ends with operation_aborted, their buffers the
  /// callers' again.
  void requests_discarded() noexcept;
  /// The CQ is done with (the execution context shuts down, destroying the handlers, or a
  /// poll failed): a QP's queue that its owner still holds (not orphaned) has the QP discard
  /// what it holds (verbs::discard_posted), so that the device writes no more into buffers
  /// whose operations end.
  void discard_at_shutdown() noexcept;
  /// Ends every request still here with operation_aborted, or with `error` (an errno) where
  /// one is given (destroys them where the engine is abandoned): for a queue whose requests
  /// can complete no more.
  void abort_all(int error = 0) noexcept;
  /// Takes out one request, queued or posted, that can complete no more, for the caller to
  /// destroy or abort (null when none is left).
  operation* take_abandoned() noexcept;

  std::uint32_t in_flight() const noexcept { return in_flight_; }
  /// CQ entries this queue can need at once: its depth, and a send queue's error marker.
  std::size_t completion_entries() const noexcept { return capacity_ + (kind_ == kind::send ? 1 : 0); }
  completion_engine& engine() const noexcept { return *engine_; }

 private:
  int post(operation* op);
  /// The device post of `first` and the requests chained behind it; on failure `refused` is
  /// the first one it did not take (those before it are posted).
  int post_to_device(operation* first, operation*& refused) noexcept;
  /// An orphan whose requests all ended raises no more completions: its CQ room is free.
  void release_room_if_done() noexcept;
  /// Undoes post()'s accounting for a request the device refused.
  void unpost(operation* op) noexcept;
  /// Links `op` behind the requests an open batch holds.
  void chain(operation* op) noexcept;
  /// Posts the chain a batch held; requests the device refused fail as a refused post does.
  /// Called from ~batch: running out of memory while failing them ends the program (as in
  /// qp_in_error).
  void post_chain();
  /// Send queue: a request that asked for no completion gets one anyway when this many were
  /// posted without one in a row, so that unsignalled requests can never fill the queue.
  std::uint32_t max_unsignalled() const noexcept { return capacity_ / 2; }
  /// Send queue: whether `op`, about to be posted, raises no completion (it is signalled
  /// instead after max_unsignalled() without one).
  bool stays_unsignalled(operation& op) noexcept;

  std::shared_ptr<completion_engine> engine_;
  kind kind_;
  void* native_;
  std::uint32_t capacity_;
  std::uint32_t in_flight_ = 0;
  std::uint32_t unsignalled_run_ = 0;  ///< send queue: posted since the last signalled one
  std::uint32_t unsignalled_in_flight_ = 0;
  /// Send queue: the signalled request of qp_in_error; it has no handler.
  operation error_marker_{[](operation*, bool) {}, [](operation*) {}};  // never completed or destroyed
  bool marker_posted_ = false;
  posting_queue* send_side_ = nullptr;
  bool orphaned_ = false;
  bool adopted_ = false;   ///< owned by its engine (completion_engine::adopt)
  bool owns_srq_ = false;  ///< destroys native_, an SRQ, when it goes
  bool reserved_ = true;   ///< holds its completion_entries() in the engine's CQ
  op_queue waiting_;
  op_list posted_;
  std::uint32_t batch_depth_ = 0;
  operation* chain_head_ = nullptr;  ///< requests held by an open batch, linked through their wr
  operation* chain_tail_ = nullptr;

  friend class completion_engine;  // links its queues through these
  posting_queue* prev_ = nullptr;
  posting_queue* next_ = nullptr;
};

}  // namespace coverbs::detail
