// The polling loop behind completion_service, shared with the queues that post into it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "coverbs/completion_service.hpp"
#include "coverbs/detail/operation.hpp"
#include "coverbs/detail/operation_memory.hpp"
#include "coverbs/detail/shutdown_service.hpp"

namespace coverbs::detail {

class posting_queue;

class completion_engine : public handler_holder, public std::enable_shared_from_this<completion_engine> {
 public:
  completion_engine(const boost::asio::any_io_executor& executor, const verbs::device& dev,
                    const completion_options& options);

  /// Called before a work request is posted: counts it and makes sure the loop runs. Arming
  /// before posting means a completion can never slip in between the post and the arm.
  void work_started();
  /// Undoes `work_started` for a request whose post failed.
  void work_abandoned() noexcept;
  /// Completes `op` later from the executor (used for failures found while initiating, since
  /// a handler must not run inside its initiating function).
  void complete_later(operation* op);
  /// Polls synchronously until `done()` holds or `timeout` passes, completing what it finds
  /// with deferred handlers. Used when a queue pair is destroyed with requests in flight.
  template <class Predicate>
  void drain_until(Predicate done, std::chrono::milliseconds timeout);
  /// As drain_until, ending too at the first pass that finds nothing new: what the CQ holds
  /// now, where no count says how much more may come.
  template <class Predicate>
  void drain_until_quiet(Predicate done, std::chrono::milliseconds timeout) {
    std::size_t polled = ~std::size_t{0};
    drain_until([&] { return done() || std::exchange(polled, completions_) == completions_; }, timeout);
  }
  /// With nothing outstanding, ends the loop's wait, which would keep io_context::run from
  /// returning (after drain_until took the last completions; work_abandoned's rule).
  void idle_if_done() noexcept;
  /// Stops the loop for good.
  void shutdown() noexcept;
  /// The execution context is shutting down: stops the loop for good and destroys the
  /// operations of every queue, posted or waiting. Their work requests may still be in the QP
  /// and the CQ, so nothing polls again; the QP goes with its owner, before this CQ.
  void destroy_handlers() noexcept override;
  /// True once destroy_handlers ran: the CQ is never polled again.
  bool abandoned() const noexcept { return abandoned_; }
  /// True once a poll of the CQ failed (fail_cq): nothing is posted or polled again.
  bool failed() const noexcept { return failed_; }
  /// Sets aside `entries` of the CQ for a queue that may have as many requests in flight
  /// (each raises a completion at the latest when flushed). Throws std::system_error
  /// (invalid_argument) where fewer are left: the CQ could overflow, which fails every QP on it.
  void reserve_entries(std::size_t entries);
  void release_entries(std::size_t entries) noexcept { reserved_entries_ -= entries; }
  /// Whether `srq` is the SRQ of a queue posting here (an async_shared_receive_queue of this
  /// service).
  bool posts_to(const ibv_srq* srq) const noexcept;
  /// Keeps `queue` (orphaned): its owner went, but requests are still posted there, which
  /// complete as their completions come, and keep the loop (and io_context::run) going as any
  /// pending operation does. Where the queue owns an SRQ, qp_left_srq ends it; shutdown ends
  /// the rest (their QPs are gone by then: destroyed before the service). Not freed once
  /// empty: a completed request's handler may still be on its way, and a cancel reaches its
  /// queue. No allocation: the queue stays in the list of attached ones.
  void adopt(std::unique_ptr<posting_queue> queue) noexcept;
  /// A QP that took its receives from `srq` is gone: an adopted queue that owns `srq`
  /// destroys it now if no other QP uses it, and what it still holds ends.
  void qp_left_srq(const ibv_srq* srq) noexcept;
  /// Lets go of `queue` and its operations for good: the device may still use their buffers.
  void leak(std::unique_ptr<posting_queue> queue) noexcept;
  /// Queues posting into this engine's CQ, found again by destroy_handlers.
  void attach(posting_queue& queue) noexcept;
  void detach(posting_queue& queue) noexcept;

  boost::asio::any_io_executor executor;
  const verbs::device& dev;
  completion_options options;
  std::optional<verbs::completion_channel> channel;
  verbs::completion_queue cq;
  std::size_t outstanding_ = 0;
  std::size_t completions_ = 0;  ///< polled from the CQ
  std::size_t events_ = 0;       ///< taken from the completion channel
  std::size_t channel_reads_ = 0;  ///< reads of the channel, empty ones included
  std::size_t arms_ = 0;           ///< successful ibv_req_notify_cq calls
  std::size_t lost_events_ = 0;    ///< waits ended by the lost-event check

  /// Adaptive mode: the current spin, from `options` and the waits learned so far.
  std::chrono::nanoseconds spin_budget() const noexcept;

 private:
  static constexpr std::size_t batch = 32;
  void start();
  /// The first adopted queue, or the first that owns `srq` where one is named; null if none.
  posting_queue* find_adopted(const ibv_srq* srq) const noexcept;
  /// How end_adopted ends the adopted queues: `leak` all of them (the device may still write
  /// into their buffers), or `abort` their requests, leaking only those whose SRQ is still used.
  enum class adopted_end { leak, abort };
  void end_adopted(adopted_end how) noexcept;
  void wait_for_event();
  /// Ends the standing wait: its handler gets operation_aborted and does nothing.
  void abandon_wait() noexcept;
  void on_event();
  /// What follows a wait that found `found` completions (already in `done`): the handlers,
  /// the event, the arm and the loop's next step. Inside a step (in_step_).
  void after_wait(op_queue& done, std::size_t found);
  /// The loop stops until the next work_started (nothing is outstanding), and the lost-event
  /// check's timer with it; a tick already queued is made stale.
  void go_idle() noexcept;
  /// As go_idle, at the end of a step: the timer stops from a handler posted behind this one,
  /// so that a loop started again meanwhile (by a completion handler of this step, which posts
  /// the next request) keeps it instead of stopping and restarting it.
  void go_idle_after_step();
  void stop_watch() noexcept;
  /// Starts the lost-event check's timer unless it runs (see completion_options).
  void watch();
  void on_watch_tick();
  /// A wait stood a whole period with no event: if the CQ holds completions, their event was
  /// lost; takes them and ends the wait as an event would have.
  void check_for_lost_event();
  /// Reads and acknowledges the channel's pending event, if any.
  void take_events();
  /// Makes sure the next completion raises an event (or one is pending already); false if the
  /// CQ could not be armed, so that no wait may begin.
  bool arm() noexcept;
  /// Whether a handler of loop `loop` may go on: the engine is open and started no loop since.
  bool current(std::uint64_t loop) const noexcept { return !closed_ && loop == loop_; }
  void on_poll_step();
  /// Posts the next poll step (busy and adaptive modes; event mode while arming fails).
  void poll_soon();
  /// Adaptive mode: whether the spin since the last completion has lasted `spin_budget()`.
  bool spin_over(bool found);
  /// Adaptive mode: a completion came `wait` after the spin before it started.
  void learn(std::chrono::nanoseconds wait) noexcept;
  /// Takes every available completion into `done`; returns how many. A failed poll calls
  /// fail_cq, and what was taken before it still counts.
  std::size_t collect(op_queue& done);
  /// The CQ could not be polled (ibv_poll_cq failed: a broken CQ, which the device will not
  /// mend): each QP posting here is reset, so that the device touches no buffer of theirs
  /// again, then every request ends with EIO (deferred) and the loop stops for good. Later
  /// posts fail at once with EIO.
  void fail_cq() noexcept;
  static void run_handlers(op_queue& done);
  /// Ends a step: `choose()` schedules the next one, then what the step found runs. A throw
  /// from the scheduling leaves the loop polling on (see the definition).
  template <class Choose>
  void end_step(op_queue& done, Choose choose);
  /// Runs `done` inside a step of loop `loop`; false (and the step is over) if a handler
  /// closed the engine meanwhile.
  bool run_handlers_in_step(op_queue& done, std::uint64_t loop);
  void drain_once(bool defer);

  std::optional<boost::asio::posix::stream_descriptor> descriptor_;
  /// The memory of the loop's own operations: the channel wait, the watch timer's wait and the
  /// posted stop. Asio's default, a per-thread cache of two blocks, is shared with the
  /// operations a wake-up completes: the wait, freed before their handlers ran, handed its
  /// block to the next operation they started, and the wait allocated anew.
  operation_memory_ptr wait_memory_{new operation_memory};
  std::optional<boost::asio::steady_timer> watch_timer_;  ///< the lost-event check's
  std::uint64_t watch_round_ = 0;    ///< counts watch()es: a tick cancelled too late is stale
  bool watching_ = false;            ///< the timer runs
  bool stop_posted_ = false;         ///< go_idle_after_step's handler is on its way
  bool waiting_ = false;             ///< a wait on the channel stands
  std::uint64_t waits_ = 0;          ///< waits begun
  std::uint64_t waits_at_tick_ = 0;  ///< `waits_` at the check's last tick
  posting_queue* queues_ = nullptr;
  std::size_t reserved_entries_ = 0;  ///< reserve_entries' sum for the queues that exist
  bool active_ = false;
  bool closed_ = false;
  bool abandoned_ = false;
  bool failed_ = false;
  std::chrono::steady_clock::time_point spin_start_{};    ///< the first empty poll of this spin
  std::chrono::steady_clock::time_point last_reading_{};  ///< the spin's latest clock reading
  std::chrono::nanoseconds typical_wait_{0};              ///< moving average of learned waits
  unsigned empty_polls_ = 0;                              ///< since the last completion
  bool arm_standing_ = false;  ///< armed since the last event taken: armed, or its event pending
  /// Counts start()s (and waits a lost-event check ended). A loop ends when nothing is
  /// outstanding, but work_abandoned() ends one from outside, and a wait it cancelled too late
  /// or a poll step already posted would run on beside the next loop; their handlers carry
  /// their loop's number and stop when it is old.
  std::uint64_t loop_ = 0;
  /// In on_event, on_poll_step or a lost-event check until the loop's next step is decided
  /// (handlers that run before it included): a post that fails there (a handler's, or a
  /// request that waited for room in its queue) must not stop the loop under the step, which
  /// would then go on beside the loop the next successful post starts; the step sees what is
  /// outstanding.
  bool in_step_ = false;
};

template <class Predicate>
void completion_engine::drain_until(Predicate done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!abandoned_ && !failed_ && !done() && std::chrono::steady_clock::now() < deadline) drain_once(true);
  idle_if_done();
}

}  // namespace coverbs::detail
