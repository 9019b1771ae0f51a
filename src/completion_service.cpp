#include "coverbs/completion_service.hpp"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/io_context.hpp>
#include <string>
#include <system_error>

#include "coverbs/detail/completion_engine.hpp"
#include "coverbs/detail/invoke_handler.hpp"
#include "coverbs/detail/posting_queue.hpp"
#include "device_ordering.hpp"

namespace coverbs {
namespace detail {

using device_ordering::polled;

namespace {

/// Raises a flag that a handler about to be registered lowers, before registering it: the
/// handler may run at once on another thread of the context. If the registration throws
/// (bad_alloc), nothing will lower it, so the guard does.
class raised_for_registration {
 public:
  explicit raised_for_registration(bool& flag) : flag_(flag) { flag_ = true; }
  raised_for_registration(const raised_for_registration&) = delete;
  raised_for_registration& operator=(const raised_for_registration&) = delete;
  ~raised_for_registration() {
    if (!registered_) flag_ = false;
  }
  /// The handler is registered: from now on it lowers the flag.
  void registered() noexcept { registered_ = true; }

 private:
  bool& flag_;
  bool registered_ = false;
};

}  // namespace

completion_engine::completion_engine(const boost::asio::any_io_executor& ex, const verbs::device& d,
                                     const completion_options& opts)
    : handler_holder(ex),
      executor(ex),
      dev(d),
      options(opts),
      channel(opts.mode == polling_mode::busy ? std::nullopt
                                              : std::make_optional<verbs::completion_channel>(d)),
      cq(d, opts.entries, channel ? &*channel : nullptr) {
  // The timer first: a descriptor that took the fd would close it as a later throw unwinds it,
  // and the completion channel would then close the same number again.
  if (channel && options.lost_event_check.count() > 0) watch_timer_.emplace(executor);
  if (channel) descriptor_.emplace(executor, channel->fd());
}

void completion_engine::work_started() {
  ++outstanding_;
  if (active_) return;
  try {
    start();
  } catch (...) {  // the loop's wait or timer could not be allocated: nothing was posted
    --outstanding_;
    go_idle();
    throw;
  }
}

void completion_engine::work_abandoned() noexcept {
  --outstanding_;
  idle_if_done();
}

void completion_engine::idle_if_done() noexcept {
  // A wait with nothing left to complete would keep io_context::run from returning. Inside a
  // step (a completion let a waiting request be posted) the step itself sees the count.
  if (outstanding_ == 0 && active_ && descriptor_ && !in_step_) {
    abandon_wait();
    go_idle();
  }
}

void completion_engine::complete_later(operation* op) { op->complete(op, true); }

void completion_engine::start() {
  if (closed_) return;
  active_ = true;
  ++loop_;
  if (options.mode == polling_mode::event) {
    if (arm()) {
      wait_for_event();
    } else {
      poll_soon();
    }
  } else {
    empty_polls_ = 0;
    poll_soon();
  }
}

// The state says "waiting" before the wait is registered: once it is, its handler may run on
// another thread of the context (a request posted from outside it starts the loop there), and
// clears it. A registration that throws (bad_alloc) clears it here instead.
void completion_engine::wait_for_event() {
  if (closed_) return;  // a poll just before failed (fail_cq): the descriptor is released
  raised_for_registration waiting(waiting_);
  ++waits_;
  if (watch_timer_ && !watching_) watch();
  descriptor_->async_wait(boost::asio::posix::descriptor_base::wait_read,
                          boost::asio::bind_allocator(
                              operation_allocator<void>(wait_memory_.get()),
                              [self = shared_from_this(), loop = loop_](const boost::system::error_code& ec) {
                                if (ec || !self->current(loop)) return;
                                self->waiting_ = false;
                                self->on_event();
                              }));
  waiting.registered();
}

void completion_engine::abandon_wait() noexcept {
  waiting_ = false;
  boost::system::error_code ignored;
  descriptor_->cancel(ignored);
}

void completion_engine::go_idle() noexcept {
  active_ = false;
  waiting_ = false;
  stop_watch();
}

// A loop of one request at a time goes idle at about every other completion (the next request is
// posted by the handler, after the step decided); stopping and restarting the timer each time
// cost timer updates (timerfd_settime system calls): verbs_ops_bench made 2,202 of them for
// its 4,402 event-mode WRITEs, and 18 with the stop deferred.
void completion_engine::go_idle_after_step() {
  active_ = false;
  waiting_ = false;
  if (!watching_ || stop_posted_) return;
  raised_for_registration posted(stop_posted_);
  post_unerased(executor, boost::asio::bind_allocator(operation_allocator<void>(wait_memory_.get()),
                                                      [self = shared_from_this()] {
                                                        self->stop_posted_ = false;
                                                        if (!self->active_) self->stop_watch();
                                                      }));
  posted.registered();
}

// A pending timer would keep io_context::run from returning.
void completion_engine::stop_watch() noexcept {
  if (!watching_) return;
  watching_ = false;
  ++watch_round_;
  watch_timer_->cancel();
}

// The timer is not restarted per wait (that would cost a timer update per completion): it
// ticks while the loop runs, and a tick checks a wait only if it is the one that stood at the
// tick before.
void completion_engine::watch() {
  raised_for_registration watching(watching_);
  waits_at_tick_ = waits_;
  watch_timer_->expires_after(options.lost_event_check);
  watch_timer_->async_wait(boost::asio::bind_allocator(
      operation_allocator<void>(wait_memory_.get()),
      [self = shared_from_this(), round = ++watch_round_](const boost::system::error_code& ec) {
        if (!ec && round == self->watch_round_) self->on_watch_tick();
      }));
  watching.registered();
}

void completion_engine::on_watch_tick() {
  watching_ = false;
  if (closed_ || !active_ || !waiting_) return;  // the next wait starts the timer again
  if (outstanding_ == 0) {
    // drain_until completed what the wait was for (a queue pair destroyed meanwhile): no event
    // will come, and the wait would keep io_context::run from returning.
    abandon_wait();
    go_idle();
    return;
  }
  if (waits_ == waits_at_tick_) check_for_lost_event();
  if (waiting_ && !watching_) watch();
}

void completion_engine::check_for_lost_event() {
  pollfd readable{.fd = channel->fd(), .events = POLLIN, .revents = 0};
  if (::poll(&readable, 1, 0) != 0) return;  // an event is there: the wait ends by itself
  in_step_ = true;
  op_queue done;
  const std::size_t found = collect(done);
  if (found == 0) {  // nothing came: the wait is for work still under way
    in_step_ = false;
    return;
  }
  ++lost_events_;
  ++loop_;  // the standing wait's handler is stale now
  abandon_wait();
  arm_standing_ = false;  // the arm raised nothing; the device may not count it as standing
  after_wait(done, found);
}

void completion_engine::on_event() {
  in_step_ = true;
  op_queue done;
  const std::size_t found = collect(done);
  after_wait(done, found);
}

void completion_engine::after_wait(op_queue& done, std::size_t found) {
  const std::uint64_t loop = loop_;
  // Adaptive mode sleeps only once a spin is over: what it waited since that spin began.
  const auto woke = options.mode == polling_mode::adaptive && found > 0
                        ? std::chrono::steady_clock::now()
                        : std::chrono::steady_clock::time_point{};
  // The handlers run before the event is taken and the CQ armed again: two system calls (7 and
  // 8 us in the test VM) that a handler answering the message it was given should not wait for.
  // The CQ can be polled before its event is read; no wait is pending meanwhile.
  if (!run_handlers_in_step(done, loop)) return;
  take_events();
  const bool armed = arm();
  // Completions that landed before the re-arm raise no event: poll once more after arming.
  const std::size_t late = collect(done);
  const bool spin_again = options.mode == polling_mode::adaptive && found + late > 0;
  if (spin_again) learn((found > 0 ? woke : std::chrono::steady_clock::now()) - spin_start_);
  end_step(done, [&] {
    if (outstanding_ == 0) {
      go_idle_after_step();
    } else if (spin_again || !armed) {
      empty_polls_ = 0;
      poll_soon();
    } else {
      // Nothing came: an event raised by a completion that a spin after an earlier arming took
      // (the CQ stays armed while adaptive mode spins). No wait ended here; sleep again.
      wait_for_event();
    }
  });
}

// Scheduling the next step allocates (the posted step, the wait's operation). Should that
// throw, the step must not end with the loop marked in its step and nothing to come: whatever
// was registered is made stale, the loop polls on (or, if even that cannot be posted, goes
// idle, and the next request starts it again), and what the step found still runs before the
// exception leaves run().
template <class Choose>
void completion_engine::end_step(op_queue& done, Choose choose) {
  try {
    choose();
  } catch (...) {
    in_step_ = false;
    ++loop_;
    if (descriptor_) abandon_wait();
    try {
      poll_soon();
    } catch (...) {
      go_idle();
    }
    run_handlers(done);
    throw;
  }
  in_step_ = false;
  run_handlers(done);
}

bool completion_engine::run_handlers_in_step(op_queue& done, std::uint64_t loop) {
  try {
    run_handlers(done);
  } catch (...) {
    // The step is cut short before it chose the loop's next one: a poll step goes on from
    // here (arming and waiting, or polling, as the mode has it) while the exception leaves.
    in_step_ = false;
    if (current(loop)) poll_soon();
    throw;
  }
  if (current(loop)) return true;
  in_step_ = false;  // a handler closed the engine
  return false;
}

// Every pending channel event must be taken and acknowledged, or the fd stays readable and the
// CQ cannot be destroyed. An armed CQ raises one event and is then disarmed, and arm() does not
// arm again while an arm stands (the CQ is armed, or its event is pending and will wake the
// wait), so one event at most is pending: one read takes it, without the read that finds the
// channel empty, a system call per wake-up that ib_send_lat -e does not make either. The
// exception: after a lost-event check the CQ is armed again with no event taken, and if that
// event was only late, two can be pending; a wait then takes each at its own wake-up.
void completion_engine::take_events() {
  if (!arm_standing_) return;  // nothing can have come
  ++channel_reads_;
  ibv_cq* cq_out = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(channel->native_handle(), &cq_out, &context) != 0) return;  // still armed
  arm_standing_ = false;
  cq.acknowledge(1);
  ++events_;
}

// A failed arm (which the verbs allow, though no provider is known to fail a valid CQ) must not
// leave the loop marked active with nothing to wake it: the loop polls on and tries again.
bool completion_engine::arm() noexcept {
  if (arm_standing_) return true;
  std::error_code ec;
  cq.request_notify(ec);
  if (ec) return false;
  ++arms_;
  arm_standing_ = true;
  return true;
}

void completion_engine::on_poll_step() {
  const std::uint64_t loop = loop_;
  in_step_ = true;
  op_queue done;
  // Busy mode polls several times per step: between steps the scheduler runs its reactor (an
  // epoll_wait system call) and the step is posted again, in the VM a fifth of a busy
  // ping-pong's CPU. Adaptive mode keeps one poll per step, which its spin clock counts.
  const unsigned polls = options.mode == polling_mode::busy ? 16 : 1;
  bool found = collect(done) > 0;
  for (unsigned i = 1; i < polls && !found; ++i) found = collect(done) > 0;
  // Whether the loop may arm and sleep now: adaptive mode once its spin is over (decided before
  // the handlers, which take time that no spin waited for); event mode, which polls only where
  // its CQ could not be armed, at every step.
  const bool may_sleep =
      options.mode == polling_mode::event || (options.mode == polling_mode::adaptive && spin_over(found));
  // What was found runs before the next step is posted, which would otherwise come first.
  if (found && !run_handlers_in_step(done, loop)) return;
  end_step(done, [&] {
    if (outstanding_ == 0) {
      go_idle_after_step();
    } else if (!may_sleep || !arm()) {
      poll_soon();
    } else if (collect(done) == 0) {
      wait_for_event();
    } else {
      if (options.mode == polling_mode::adaptive) learn(last_reading_ - spin_start_);
      empty_polls_ = 0;
      poll_soon();
    }
  });
}

void completion_engine::poll_soon() {
  post_unerased(executor, [self = shared_from_this(), loop = loop_] {
    if (self->current(loop)) self->on_poll_step();
  });
}

// Reading the clock is a system call where the clock source has no vDSO path (HPET in many
// VMs: 2.5 us in the test VM, more than a poll step), so busy mode never reads it and adaptive
// mode reads it when a spin starts (its first empty poll), then once per 16 empty polls, and
// when a completion ends a spin of 16 polls or more (16 polls can take a millisecond in the VM
// under ThreadSanitizer: the latest reading would understate the wait). A completion found
// sooner came right after another (a send's after the receive's, say): any spin catches
// that, and counting it as a wait of zero would halve the spin that the waits for replies need.
bool completion_engine::spin_over(bool found) {
  constexpr unsigned polls_per_clock_read = 16;
  if (found) {
    if (empty_polls_ >= polls_per_clock_read) learn(std::chrono::steady_clock::now() - spin_start_);
    empty_polls_ = 0;
    return false;
  }
  if (empty_polls_++ == 0) {
    spin_start_ = last_reading_ = std::chrono::steady_clock::now();
    return false;
  }
  if (empty_polls_ % polls_per_clock_read != 0) return false;
  last_reading_ = std::chrono::steady_clock::now();
  return last_reading_ - spin_start_ >= spin_budget();
}

// A wait longer than max_spin is an idle gap that no spin could have caught, and the spin before
// it was wasted: it shrinks the average by an eighth instead of pulling it towards itself, so a
// connection that is busy in bursts keeps about the spin its bursts need, and one whose waits
// became short (which teach nothing) does not keep a long spin for ever.
void completion_engine::learn(std::chrono::nanoseconds wait) noexcept {
  if (wait > options.max_spin) {
    typical_wait_ -= typical_wait_ / 8;
    return;
  }
  typical_wait_ += (wait - typical_wait_) / 8;
}

std::chrono::nanoseconds completion_engine::spin_budget() const noexcept {
  const std::chrono::nanoseconds low = options.spin;
  const std::chrono::nanoseconds high = std::max<std::chrono::nanoseconds>(options.max_spin, low);
  return std::clamp<std::chrono::nanoseconds>(2 * typical_wait_, low, high);
}

std::size_t completion_engine::collect(op_queue& done) {
  // A failed CQ is never polled again (a busy step polls on after a failed poll): a provider
  // may return entries after a failure, of requests that fail_cq ended and freed.
  if (failed_) return 0;
  std::array<ibv_wc, batch> wcs;
  std::size_t total = 0;
  for (;;) {
    std::size_t n = 0;
    try {
      n = cq.poll(wcs);
    } catch (const std::system_error&) {
      fail_cq();
      return total;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      auto* op = reinterpret_cast<operation*>(wc.wr_id);
      polled(op);
      op->status = wc.status;
      if (wc.status == IBV_WC_SUCCESS && (wc.opcode & IBV_WC_RECV) != 0) {
        op->byte_len = wc.byte_len;
        if ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) op->imm = ntohl(wc.imm_data);
        op->rdma_immediate = wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM;
      }
      --outstanding_;
      op->owner->on_completed(op, done);
    }
    total += n;
    completions_ += n;
    if (n < wcs.size()) return total;
  }
}

// A handler that throws leaves io_context::run, as Asio lets it (run may be called again):
// the operations found with it are completed all the same, posted.
void completion_engine::run_handlers(op_queue& done) {
  // Static: a handler may destroy the service that ran this loop.
  while (operation* op = done.pop()) {
    try {
      op->complete(op, false);
    } catch (...) {
      while (operation* rest = done.pop()) rest->complete(rest, true);
      throw;
    }
  }
}

void completion_engine::fail_cq() noexcept {
  if (failed_) return;
  failed_ = true;
  // Reset first: a request ends only once the device can no longer write into its buffer.
  for (posting_queue* q = queues_; q != nullptr; q = q->next_) q->discard_at_shutdown();
  // An adopted queue's QP may be one that refused RESET, or gone: what it holds may still be
  // written, so its requests stay the device's, leaked (their owner went before them).
  end_adopted(adopted_end::leak);
  // Deferred completions: no handler runs here, so the list of queues stays as it is.
  for (posting_queue* q = queues_; q != nullptr; q = q->next_) q->abort_all(EIO);
  shutdown();
}

void completion_engine::drain_once(bool defer) {
  op_queue done;
  collect(done);
  while (operation* op = done.pop()) op->complete(op, defer);
}

void completion_engine::shutdown() noexcept {
  // Once: a service destroyed after its context shut down (which called this already) must
  // not reach the timer's or the descriptor's services, gone with the context.
  if (closed_) return;
  closed_ = true;
  go_idle();
  // A timer that has waited cancels again when destroyed, which must not reach a reactor
  // already gone (the engine can outlive its execution context: see handler_holder); after
  // this cancel, that one does nothing.
  if (watch_timer_) watch_timer_->cancel();
  if (descriptor_) {
    boost::system::error_code ignored;
    descriptor_->cancel(ignored);
    descriptor_->release();  // the fd belongs to the completion channel
  }
  if (channel) {
    unsigned events = 0;
    ibv_cq* cq_out = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(channel->native_handle(), &cq_out, &context) == 0) ++events;
    cq.acknowledge(events);
  }
  // Nothing polls now. Each adopted queue holds this engine (whoever called holds it too).
  end_adopted(adopted_end::abort);
}

// The list is looked up afresh each time: destroying a handler may destroy queue pairs.
void completion_engine::end_adopted(adopted_end how) noexcept {
  while (posting_queue* q = find_adopted(nullptr)) {
    q->adopted_ = false;
    std::unique_ptr<posting_queue> owned(q);
    // An SRQ that a QP still uses (one that outlives its service, which it must not) may
    // still take messages into those buffers: they stay the device's, leaked.
    if (how == adopted_end::leak || !owned->destroy_srq()) {
      leak(std::move(owned));
      continue;
    }
    owned->abort_all();
  }
}

void completion_engine::adopt(std::unique_ptr<posting_queue> queue) noexcept {
  queue->orphan();
  if (abandoned_) {  // the context shut down: destroyed as Asio destroys pending operations
    queue->destroy_srq();
    return queue->abort_all();
  }
  // A service destroyed before its queue pairs, which it must not be: nothing polls any more,
  // and the device may still use the requests' buffers, so they stay with it, leaked.
  if (closed_) return leak(std::move(queue));
  queue.release()->adopted_ = true;
}

void completion_engine::leak(std::unique_ptr<posting_queue> queue) noexcept {
  detach(*queue);  // so that nothing finds its operations: not even destroy_handlers
  (void)queue.release();
}

posting_queue* completion_engine::find_adopted(const ibv_srq* srq) const noexcept {
  posting_queue* q = queues_;
  while (q != nullptr && !(q->adopted_ && (srq == nullptr || (q->owns_srq_ && q->native_ == srq))))
    q = q->next_;
  return q;
}

void completion_engine::qp_left_srq(const ibv_srq* srq) noexcept {
  posting_queue* q = find_adopted(srq);
  if (q == nullptr || !q->destroy_srq()) return;  // none kept, or other QPs use it still
  q->adopted_ = false;
  const std::unique_ptr<posting_queue> owned(q);
  owned->requests_discarded();
}

void completion_engine::destroy_handlers() noexcept {
  const auto self = weak_from_this().lock();  // a destroyed handler may own the last reference
  if (!self) return;
  abandoned_ = true;
  shutdown();
  // The engine may outlive the context (held by a completion_service destroyed after it, or
  // by a queue): its Asio objects go now, while the services they were made with exist.
  watch_timer_.reset();
  descriptor_.reset();
  // Nothing polls from now on, and the handlers go, with the buffers that some of them own: the
  // device must not write into those afterwards (a receive still posted would). Each QP is
  // reset once per queue of its, which does no harm.
  for (posting_queue* q = queues_; q != nullptr; q = q->next_) q->discard_at_shutdown();
  // One operation at a time, the queues looked up afresh: destroying a handler may destroy
  // queue pairs, whose queues then destroy their own operations and detach.
  for (;;) {
    operation* op = nullptr;
    for (posting_queue* q = queues_; q != nullptr && op == nullptr; q = q->next_) op = q->take_abandoned();
    if (op == nullptr) return;
    op->destroy(op);
  }
}

void completion_engine::reserve_entries(std::size_t entries) {
  const auto capacity = static_cast<std::size_t>(cq.capacity());
  const std::size_t left = capacity - reserved_entries_;  // never reserved past the capacity
  if (entries > left) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "coverbs: the queue needs " + std::to_string(entries) +
                                " completion queue entries; the completion service has " +
                                std::to_string(left) + " of " + std::to_string(capacity) +
                                " left (completion_options::entries)");
  }
  reserved_entries_ += entries;
}

bool completion_engine::posts_to(const ibv_srq* srq) const noexcept {
  for (const posting_queue* q = queues_; q != nullptr; q = q->next_) {
    if (q->kind_ == posting_queue::kind::shared_receive && !q->orphaned_ && q->native_ == srq) return true;
  }
  return false;
}

void completion_engine::attach(posting_queue& queue) noexcept {
  queue.next_ = queues_;
  if (queues_ != nullptr) queues_->prev_ = &queue;
  queues_ = &queue;
}

void completion_engine::detach(posting_queue& queue) noexcept {
  (queue.prev_ != nullptr ? queue.prev_->next_ : queues_) = queue.next_;
  if (queue.next_ != nullptr) queue.next_->prev_ = queue.prev_;
  queue.prev_ = queue.next_ = nullptr;
}

}  // namespace detail

// completion_service -------------------------------------------------------------------------

completion_service::completion_service(const executor_type& executor, const verbs::device& dev,
                                       const completion_options& options)
    : engine_(std::make_shared<detail::completion_engine>(executor, dev, options)) {}

completion_service::~completion_service() { engine_->shutdown(); }

completion_service::executor_type completion_service::get_executor() const noexcept {
  return engine_->executor;
}
verbs::completion_queue& completion_service::queue() noexcept { return engine_->cq; }
const verbs::device& completion_service::device() const noexcept { return engine_->dev; }
polling_mode completion_service::mode() const noexcept { return engine_->options.mode; }
std::size_t completion_service::outstanding() const noexcept { return engine_->outstanding_; }
std::size_t completion_service::completions() const noexcept {
  return engine_->completions_;
}
std::size_t completion_service::events() const noexcept {
  return engine_->events_;
}

std::size_t completion_service::channel_reads() const noexcept {
  return engine_->channel_reads_;
}
std::size_t completion_service::arms() const noexcept {
  return engine_->arms_;
}
std::size_t completion_service::lost_events() const noexcept {
  return engine_->lost_events_;
}
std::chrono::microseconds completion_service::spin_budget() const noexcept {
  return std::chrono::duration_cast<std::chrono::microseconds>(engine_->spin_budget());
}

}  // namespace coverbs
