// posting_queue: a queue pair's (or shared receive queue's) side of the completion service:
// work requests posted in batches up to the queue's capacity, the rest waiting in order, and
// each completion matched to its operation, unsignalled ones included.
#include "coverbs/detail/posting_queue.hpp"

#include <boost/asio/post.hpp>
#include <cerrno>
#include <utility>

#include "coverbs/verbs/queue_pair.hpp"
#include "device_ordering.hpp"

namespace coverbs::detail {

using device_ordering::polled;
using device_ordering::posted;

namespace {
// The request chained behind `op` in a batch (each work request's wr_id is its operation).
operation* chained_after(const operation& op, bool send) noexcept {
  const std::uint64_t id = send ? (op.wr.send.next != nullptr ? op.wr.send.next->wr_id : 0)
                                : (op.wr.recv.next != nullptr ? op.wr.recv.next->wr_id : 0);
  return reinterpret_cast<operation*>(id);
}
// Whether a send queue's request raises a completion of its own.
bool signalled(const operation& op) noexcept {
  return (op.wr.send.send_flags & IBV_SEND_SIGNALED) != 0;
}
// An operation whose result is known leaves its queue for good: its handler's cancellation
// slot, still connected until the handler runs, must reach the queue no more, which a handler
// run before it may have destroyed with its queue pair.
void leave_queue(operation& op) noexcept {
  op.owner = nullptr;
}

// A request ended without the device, as if flushed after a cancel: operation_aborted.
void mark_aborted(operation& op) noexcept {
  op.cancelled = true;
  op.status = IBV_WC_WR_FLUSH_ERR;
  leave_queue(op);
}

void finish(op_queue& done, operation* op) noexcept {
  leave_queue(*op);
  done.push(op);
}
}  // namespace

posting_queue::posting_queue(std::shared_ptr<completion_engine> engine, kind k, void* native,
                             std::uint32_t capacity)
    : engine_(std::move(engine)), kind_(k), native_(native), capacity_(capacity) {
  engine_->reserve_entries(completion_entries());
  engine_->attach(*this);
}

posting_queue::~posting_queue() {
  engine_->detach(*this);
  if (reserved_) engine_->release_entries(completion_entries());
  destroy_srq();  // refused only where a QP outlives the service, which it must not
}

bool posting_queue::destroy_srq() noexcept {
  if (!owns_srq_) return true;
  if (ibv_destroy_srq(static_cast<ibv_srq*>(native_)) != 0) return false;
  owns_srq_ = false;
  return true;
}

void posting_queue::release_room_if_done() noexcept {
  if (orphaned_ && in_flight_ == 0 && std::exchange(reserved_, false)) {
    engine_->release_entries(completion_entries());
  }
}

void posting_queue::submit(operation* op) {
  op->owner = this;
  if (capacity_ == 0) {
    // A queue of depth 0 (the receive side of a QP that takes its receives from an SRQ) would
    // keep the request waiting for ever: it is refused, as ibv_post_recv refuses it there.
    op->post_error = EINVAL;
    return engine_->complete_later(op);
  }
  if (!waiting_.empty() || in_flight_ >= capacity_) {
    waiting_.push(op);
    return;
  }
  int err = 0;
  try {
    err = post(op);
  } catch (...) {
    // Only work_started throws, before anything changed: the request was never posted, and
    // its operation goes as with any initiating function that throws (its handler destroyed).
    op->destroy(op);
    throw;
  }
  if (err != 0) {
    op->post_error = err;
    engine_->complete_later(op);
  }
}

bool posting_queue::stays_unsignalled(operation& op) noexcept {
  if (kind_ != kind::send) return false;
  if (!signalled(op) && ++unsignalled_run_ >= max_unsignalled()) op.wr.send.send_flags |= IBV_SEND_SIGNALED;
  if (signalled(op)) {
    unsignalled_run_ = 0;
    return false;
  }
  return true;
}

int posting_queue::post(operation* op) {
  if (engine_->failed()) return EIO;  // nothing would ever poll its completion
  engine_->work_started();
  ++in_flight_;
  if (stays_unsignalled(*op)) ++unsignalled_in_flight_;
  // Everything written and listed before the post: the device may complete it before
  // ibv_post_* returns, and the thread that polls the completion then unlists it and frees it
  // (TSan found the list written after).
  posted_.push(op);
  if (batch_depth_ > 0) {
    chain(op);  // annotated as posted when the chain goes (chain() writes it until then)
    return 0;
  }
  posted(op);
  operation* refused = nullptr;
  const int rc = post_to_device(op, refused);
  if (rc != 0) unpost(op);
  return rc;
}

int posting_queue::post_to_device(operation* first, operation*& refused) noexcept {
  int rc = 0;
  switch (kind_) {
    case kind::send: {
      ibv_send_wr* bad = nullptr;
      rc = ibv_post_send(static_cast<ibv_qp*>(native_), &first->wr.send, &bad);
      // Every rdma-core provider names the refused request; without it the whole chain counts
      // as refused.
      if (rc != 0) refused = bad != nullptr ? reinterpret_cast<operation*>(bad->wr_id) : first;
      break;
    }
    case kind::receive:
    case kind::shared_receive: {
      ibv_recv_wr* bad = nullptr;
      rc = kind_ == kind::receive ? ibv_post_recv(static_cast<ibv_qp*>(native_), &first->wr.recv, &bad)
                                  : ibv_post_srq_recv(static_cast<ibv_srq*>(native_), &first->wr.recv, &bad);
      if (rc != 0) refused = bad != nullptr ? reinterpret_cast<operation*>(bad->wr_id) : first;
      break;
    }
  }
  return rc;
}

void posting_queue::unpost(operation* op) noexcept {
  posted_.erase(op);
  --in_flight_;
  if (kind_ == kind::send && !signalled(*op)) --unsignalled_in_flight_;
  engine_->work_abandoned();
}

void posting_queue::chain(operation* op) noexcept {
  if (kind_ == kind::send) {
    op->wr.send.next = nullptr;
    if (chain_tail_ != nullptr) chain_tail_->wr.send.next = &op->wr.send;
  } else {
    op->wr.recv.next = nullptr;
    if (chain_tail_ != nullptr) chain_tail_->wr.recv.next = &op->wr.recv;
  }
  if (chain_head_ == nullptr) chain_head_ = op;
  chain_tail_ = op;
}

void posting_queue::post_chain() {
  operation* const first = std::exchange(chain_head_, nullptr);
  chain_tail_ = nullptr;
  if (first == nullptr) return;
  for (operation* op = first; op != nullptr; op = chained_after(*op, kind_ == kind::send)) posted(op);
  operation* refused = nullptr;
  const int rc = post_to_device(first, refused);
  // The device took the requests before the refused one; that one and the rest were never
  // posted, and fail as a refused single post does.
  for (operation* op = rc != 0 ? refused : nullptr; op != nullptr;) {
    operation* const after = chained_after(*op, kind_ == kind::send);
    unpost(op);
    if (op == &error_marker_) {
      marker_posted_ = false;
    } else {
      op->post_error = rc;
      engine_->complete_later(op);
    }
    op = after;
  }
}

void posting_queue::on_completed(operation* op, op_queue& done) {
  if (kind_ == kind::send) {
    for (operation* earlier = posted_.front(); earlier != op && !signalled(*earlier);
         earlier = posted_.front()) {
      posted_.erase(earlier);
      polled(earlier);
      earlier->status = IBV_WC_SUCCESS;
      --in_flight_;
      --unsignalled_in_flight_;
      --engine_->outstanding_;
      finish(done, earlier);
    }
    if (!signalled(*op)) --unsignalled_in_flight_;
  } else if (op->status != IBV_WC_SUCCESS) {
    qp_in_error();
  }
  posted_.erase(op);
  --in_flight_;
  release_room_if_done();
  // The marker has no handler, and lives in this queue, which a handler of the same batch
  // may destroy: it never goes to `done`, so it is free for another post at once.
  if (op == &error_marker_) {
    marker_posted_ = false;
  } else {
    finish(done, op);
  }
  // An orphan posts nothing: its QP or SRQ may be gone (what waits is aborted instead).
  while (!orphaned_ && !waiting_.empty() && in_flight_ < capacity_) {
    operation* next = waiting_.pop();
    if (int err = post(next); err != 0) {
      next->post_error = err;
      finish(done, next);
    }
  }
}

namespace {
// Completes a withdrawn request when it runs; destroys it, unrun, when the execution context
// shuts down first, so that its handler (and whatever that owns) is freed, not leaked.
class deferred_abort {
 public:
  explicit deferred_abort(operation* op) noexcept : op_(op) {}
  deferred_abort(deferred_abort&& other) noexcept : op_(std::exchange(other.op_, nullptr)) {}
  deferred_abort& operator=(deferred_abort&&) = delete;
  ~deferred_abort() {
    if (op_ != nullptr) op_->destroy(op_);
  }
  void operator()() {
    operation* op = std::exchange(op_, nullptr);
    op->complete(op, false);
  }

 private:
  operation* op_;
};
}  // namespace

void posting_queue::cancel(operation* op, boost::asio::cancellation_type type) {
  if (waiting_.erase(op)) {
    mark_aborted(*op);
    // Posted, not completed here: cancel() runs inside the handler's cancellation slot, which
    // completing would clear under its own feet.
    boost::asio::post(engine_->executor, deferred_abort(op));
    return;
  }
  // Neither waiting nor posted: its result is known (polled, implied, withdrawn, failed to
  // post) and its handler on its way. A handler earlier in the same batch of completions may
  // cancel it; too late, as in Asio, and putting the QP in error would fail the connection
  // for nothing.
  if (!posted_.contains(op)) return;
  if ((type & boost::asio::cancellation_type::terminal) == boost::asio::cancellation_type::none) return;
  op->cancelled = true;
  if (kind_ != kind::shared_receive && !orphaned_) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(static_cast<ibv_qp*>(native_), &attr, IBV_QP_STATE);
    qp_in_error();
  }
  // An SRQ cannot be put in error for one request: the receive stays posted until a message
  // consumes it, and `cancelled` is cleared by nobody, so it still reports its data.
}

void posting_queue::qp_in_error() noexcept {
  if (kind_ == kind::receive && send_side_ != nullptr) return send_side_->qp_in_error();
  if (kind_ != kind::send || unsignalled_in_flight_ == 0 || marker_posted_ || orphaned_) return;
  // An RDMA WRITE of nothing: were the QP not in error after all, it would still touch no
  // memory and take no receive of the peer's.
  error_marker_.owner = this;
  error_marker_.wr.send = {};
  error_marker_.wr.send.wr_id = reinterpret_cast<std::uint64_t>(&error_marker_);
  error_marker_.wr.send.opcode = IBV_WR_RDMA_WRITE;
  error_marker_.wr.send.send_flags = IBV_SEND_SIGNALED;
  marker_posted_ = post(&error_marker_) == 0;
}

void posting_queue::abort_waiting() {
  while (operation* op = waiting_.pop()) {
    mark_aborted(*op);
    op->complete(op, true);
  }
}

void posting_queue::orphan() noexcept {
  orphaned_ = true;
  send_side_ = nullptr;
  release_room_if_done();
}

void posting_queue::requests_discarded() noexcept {
  // Completions the device made before it discarded the rest may still be in the CQ: polled
  // first, they complete their requests with their results, and a request aborted below is
  // never polled.
  engine_->drain_until_quiet([&] { return in_flight_ == 0; },
                             std::chrono::milliseconds(100));  // another queue's may keep coming
  abort_all();
}

void posting_queue::discard_at_shutdown() noexcept {
  // An SRQ cannot be reset, but the QPs that take its receives can: theirs are attached too
  // (an SRQ serves only QPs of its own service). A QP with nothing posted is reset all the
  // same: it may take an SRQ's receives. An orphan's QP may be gone.
  if (kind_ == kind::shared_receive || orphaned_) return;
  auto* qp = static_cast<ibv_qp*>(native_);
  if (!verbs::discard_posted(qp)) verbs::move_to_error(qp);  // RESET refused: in error it writes nothing
}

void posting_queue::abort_all(int error) noexcept {
  while (operation* op = take_abandoned()) {
    if (engine_->abandoned()) {
      op->destroy(op);
      continue;
    }
    if (error != 0) {
      op->post_error = error;
      leave_queue(*op);
    } else {
      mark_aborted(*op);
    }
    op->complete(op, true);
  }
}

operation* posting_queue::take_abandoned() noexcept {
  if (operation* op = waiting_.pop()) return op;
  operation* op = posted_.pop();
  if (op != nullptr) {
    --in_flight_;
    engine_->work_abandoned();  // the loop may stop: its wait would keep io_context::run going
  }
  return op;
}

}  // namespace coverbs::detail
