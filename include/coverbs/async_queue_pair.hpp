// A queue pair bound to a completion service: the I/O object the async verbs functions act on.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>

#include "coverbs/completion_service.hpp"
#include "coverbs/detail/posting_queue.hpp"
#include "coverbs/verbs/queue_pair.hpp"

namespace coverbs {

/// An RC queue pair whose send and receive completions run on its completion service's
/// executor. Posting beyond the queue depth waits for a free slot instead of failing.
class async_queue_pair {
 public:
  using executor_type = boost::asio::any_io_executor;

  /// Creates a QP in `pd` whose send and receive queues complete through `service`. Throws
  /// std::system_error, also where the service's CQ has no room left for the QP's depths (see
  /// completion_options::entries) or `options.srq` is not an async_shared_receive_queue's of
  /// the same service.
  async_queue_pair(completion_service& service, const verbs::protection_domain& pd,
                   const verbs::queue_pair_options& options = {});
  /// Takes over `qp`, which must have been created with `service.queue()` as both CQs (for
  /// example by rdma_cm's rdma_create_qp). Throws as above.
  async_queue_pair(completion_service& service, verbs::queue_pair&& qp);
  /// Moves the QP to ERROR, polls for the flush of requests in flight (for at most
  /// completion_options::flush_timeout), and aborts queued ones: no handler is lost and no
  /// buffer is released while the device may use it. Where the flush is late, the QP discards
  /// what it holds (verbs::queue_pair::discard_posted, or destroyed where that fails), and
  /// those requests end with operation_aborted; an rdma_cm QP refusing it leaves them with
  /// the service, completed as their completions come.
  ~async_queue_pair();
  async_queue_pair(const async_queue_pair&) = delete;
  async_queue_pair& operator=(const async_queue_pair&) = delete;

  /// The executor on which this QP's operations complete.
  executor_type get_executor() const noexcept;
  /// The underlying verbs QP (state transitions, native handle).
  verbs::queue_pair& native() noexcept { return qp_; }
  /// This QP's address for a peer, using `gid`.
  verbs::queue_pair_address address(const verbs::gid_entry& gid) const noexcept {
    return qp_.address(gid);
  }
  /// Connects to `peer` (RESET to RTS). Throws std::system_error.
  void connect(const verbs::queue_pair_address& peer, const verbs::connect_options& options) {
    qp_.connect(peer, options);
  }
  /// Moves the QP to ERROR: every pending operation completes with a flush error (an
  /// unsignalled send the device had already finished, with success).
  void close() noexcept;
  /// The largest send that is copied inline (no registered memory needed for it).
  std::uint32_t max_inline() const noexcept { return qp_.options().max_inline_data; }

  /// Internal: where send-side work requests (send, read, write, atomics) are posted.
  detail::posting_queue& send_queue() noexcept { return *send_; }
  /// Internal: where receives are posted.
  detail::posting_queue& receive_queue() noexcept { return *receive_; }

 private:
  std::uint32_t in_flight() const noexcept { return send_->in_flight() + receive_->in_flight(); }
  void discard_late_requests() noexcept;

  std::shared_ptr<detail::completion_engine> engine_;
  verbs::queue_pair qp_;
  // Held apart: a queue whose requests outlast this object goes to the engine (adopt).
  std::unique_ptr<detail::posting_queue> send_;
  std::unique_ptr<detail::posting_queue> receive_;
};

}  // namespace coverbs
