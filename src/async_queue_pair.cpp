#include "coverbs/async_queue_pair.hpp"

#include <chrono>
#include <memory>
#include <system_error>

#include "coverbs/verbs/shared_receive_queue.hpp"

namespace coverbs {
namespace {

// An SRQ's receives complete on the CQ of the QP that takes them, with its queue as their
// owner: a service other than the SRQ's would poll operations of a queue it does not know,
// and no room was reserved for them in its CQ. A bare verbs SRQ's receives are no operations.
void check_srq(const verbs::queue_pair_options& options, const detail::completion_engine& engine) {
  if (options.srq != nullptr && !engine.posts_to(options.srq->native_handle())) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "coverbs: a queue pair's SRQ must be an async_shared_receive_queue of the "
                            "same completion_service");
  }
}

}  // namespace

async_queue_pair::async_queue_pair(completion_service& service, const verbs::protection_domain& pd,
                                   const verbs::queue_pair_options& options)
    : engine_(service.engine()),
      qp_(pd, service.queue(), service.queue(), options),
      send_(std::make_unique<detail::posting_queue>(engine_, detail::posting_queue::kind::send,
                                                    qp_.native_handle(), options.max_send_wr)),
      receive_(std::make_unique<detail::posting_queue>(engine_, detail::posting_queue::kind::receive,
                                                       qp_.native_handle(),
                                                       options.srq != nullptr ? 0 : options.max_recv_wr)) {
  check_srq(options, *engine_);
  receive_->pair_with(*send_);
}

async_queue_pair::async_queue_pair(completion_service& service, verbs::queue_pair&& qp)
    : engine_(service.engine()),
      qp_(std::move(qp)),
      send_(std::make_unique<detail::posting_queue>(engine_, detail::posting_queue::kind::send,
                                                    qp_.native_handle(), qp_.options().max_send_wr)),
      receive_(std::make_unique<detail::posting_queue>(
          engine_, detail::posting_queue::kind::receive, qp_.native_handle(),
          qp_.options().srq != nullptr ? 0 : qp_.options().max_recv_wr)) {
  check_srq(qp_.options(), *engine_);
  receive_->pair_with(*send_);
}

async_queue_pair::~async_queue_pair() {
  if (engine_->abandoned()) {
    // Its context shut down, so its CQ is never polled again: nothing can complete what is
    // left, which is destroyed as Asio destroys pending operations.
    send_->abort_all();
    receive_->abort_all();
    return;
  }
  const ibv_qp* native = qp_.native_handle();
  ibv_srq* const srq = native != nullptr ? native->srq : nullptr;
  // Receives this QP took from its SRQ are the SRQ's queue's, so in_flight() does not count
  // them, and some devices (mlx5) remove a QP's completions from the CQ as it is reset or
  // destroyed: one that took a message and was not polled yet would never end. In error, the
  // QP also flushes those it holds part of a message for; what the CQ then holds is polled.
  if (in_flight() > 0 || srq != nullptr) {
    close();
    engine_->drain_until([this] { return in_flight() == 0; }, engine_->options.flush_timeout);
    if (srq != nullptr) engine_->drain_until_quiet([] { return false; }, std::chrono::milliseconds(100));
  }
  send_->abort_waiting();
  receive_->abort_waiting();
  if (in_flight() > 0) discard_late_requests();  // which may destroy the QP
  // An SRQ destroyed while this QP used it waited for it (ibv_destroy_srq refused).
  if (srq != nullptr && !qp_.adopted() && qp_.destroy()) engine_->qp_left_srq(srq);
}

void async_queue_pair::discard_late_requests() noexcept {
  // The flush is late. Completions that may still come name these operations, so the queues
  // must not go while they can.
  send_->orphan();
  receive_->orphan();
  // A QP of its own that will not reset is destroyed instead, which discards them too.
  if (qp_.discard_posted() || (!qp_.adopted() && qp_.destroy())) {
    send_->requests_discarded();
    receive_->requests_discarded();
    return;
  }
  for (auto* q : {&send_, &receive_}) {
    if ((*q)->in_flight() > 0) engine_->adopt(std::move(*q));
  }
}

void async_queue_pair::close() noexcept {
  qp_.to_error();
  send_->qp_in_error();
}

async_queue_pair::executor_type async_queue_pair::get_executor() const noexcept {
  return engine_->executor;
}

}  // namespace coverbs
