// Completion service: turns a completion queue into resumptions on an Asio executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <memory>

#include "coverbs/verbs/completion_queue.hpp"
#include "coverbs/verbs/device.hpp"

namespace coverbs {

namespace detail {
class completion_engine;
}

/// How the service learns that work completed.
enum class polling_mode {
  event,     ///< sleep in the reactor on the completion channel (default; no CPU while idle)
  busy,      ///< poll the CQ from the executor continuously while operations are pending
  adaptive,  ///< poll for a while after each completion (learned; see completion_options), then sleep
};

/// Settings of a completion service.
struct completion_options {
  polling_mode mode = polling_mode::event;
  /// Adaptive mode: the shortest spin. After each completion the CQ is polled for twice the
  /// moving average (weight 1/8) of the recent waits for a completion, but never less than
  /// this, before the service arms and sleeps; so a spin that would end just before the usual
  /// reply does not waste itself. A completion right after another (within 16 polls) teaches
  /// nothing; a wait beyond `max_spin` (an idle gap) shrinks the average by an eighth. The
  /// clock is read every 16 empty polls, when a completion ends a longer spin, and once per
  /// wake-up.
  std::chrono::microseconds spin{50};
  /// Adaptive mode: the longest spin. Equal to `spin`, the spin is fixed.
  std::chrono::microseconds max_spin{1000};
  /// Completion queue depth (the device may round it up). Each queue pair on the service
  /// needs its send depth + 1 + its receive depth, each SRQ its depth: one past what is left
  /// is refused with std::system_error, since an overflowing CQ fails every QP on it.
  int entries = 4096;
  /// Event and adaptive modes: how long a wait for the completion channel may stand before
  /// the CQ is polled once, in case a completion raised no event. A device should never lose
  /// one, but some have (Soft-RoCE in Linux 6.1 decides whether to raise it outside the CQ's
  /// lock, racing the arm; rdma-core's mana provider dropped arms until 2026); the wait would
  /// then last until the next completion on the CQ: for ever, if the peers wait on each other.
  /// A wait is checked after standing one to two periods; the timer runs only while operations
  /// are pending, so it costs one wake-up per period on a busy or waiting connection and nothing
  /// on an idle service. Zero turns the check off.
  std::chrono::milliseconds lost_event_check{1000};
  /// How long destroying an async_queue_pair with requests in flight polls for their flush
  /// completions. Past it, the QP discards what it still holds (through RESET, and back to
  /// ERROR), raising no completions: those requests end with operation_aborted.
  std::chrono::milliseconds flush_timeout{2000};
};

/// Owns one completion queue (and its channel) of a device and runs its polling loop on an
/// executor: every operation on queue pairs that use `queue()` completes on that executor,
/// in the thread running it, without hopping through other threads. The loop runs only while
/// operations are pending, so an idle service does not keep `io_context::run` from returning.
/// The service, its queue pairs and their operations are not thread-safe, as one Asio I/O
/// object is not: where several threads run the io_context, give the service a strand
/// (`make_strand(io)`) and start operations from it. A CQ that the device fails to poll
/// (ibv_poll_cq returns an error) is broken for good: its queue pairs are reset, every pending
/// operation ends with `std::errc::io_error`, and so does every later one.
class completion_service {
 public:
  using executor_type = boost::asio::any_io_executor;

  /// Creates the CQ on `dev`. The device must outlive the service.
  completion_service(const executor_type& executor, const verbs::device& dev,
                     const completion_options& options = {});
  /// Stops polling, and ends with operation_aborted what it kept (see
  /// async_shared_receive_queue). Queue pairs using `queue()` must be destroyed first.
  ~completion_service();
  completion_service(const completion_service&) = delete;
  completion_service& operator=(const completion_service&) = delete;

  /// The executor on which completions run.
  executor_type get_executor() const noexcept;
  /// The completion queue to create queue pairs with.
  verbs::completion_queue& queue() noexcept;
  /// The device the queue belongs to.
  const verbs::device& device() const noexcept;
  /// The configured mode.
  polling_mode mode() const noexcept;
  /// Operations posted and not yet completed.
  std::size_t outstanding() const noexcept;
  /// Work completions taken from the CQ so far. A send posted unsignalled (the RDMA stream's
  /// copied sends, mostly) raises none: a later signalled one completes it.
  std::size_t completions() const noexcept;
  /// Completion-channel events taken so far (event and adaptive modes): one per wake-up, as the
  /// CQ is armed again only once its event has been taken.
  std::size_t events() const noexcept;
  /// Reads of the completion channel so far, each a system call; a read that finds no event
  /// (a wake-up for nothing) makes this exceed `events()`.
  std::size_t channel_reads() const noexcept;
  /// Times the CQ was armed (ibv_req_notify_cq), each a system call. An arm stands until its
  /// event is taken and is not repeated meanwhile, so this exceeds `events()` by at most one
  /// (plus `lost_events()`).
  std::size_t arms() const noexcept;
  /// Waits that the lost-event check (see completion_options) ended: completions were in the
  /// CQ, and no event had come for them yet (a late one, under load, counts too). The CQ is
  /// armed again after each.
  std::size_t lost_events() const noexcept;
  /// Adaptive mode: how long the service now polls after a completion before it sleeps.
  std::chrono::microseconds spin_budget() const noexcept;

  /// Internal: the engine shared with queue pairs.
  const std::shared_ptr<detail::completion_engine>& engine() const noexcept { return engine_; }

 private:
  std::shared_ptr<detail::completion_engine> engine_;
};

}  // namespace coverbs
