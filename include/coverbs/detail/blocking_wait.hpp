// The synchronous calls of coverbs::socket. Asio's block in a system call and need no running
// io_context; a coverbs connection completes through its execution context, so a blocking
// call runs that context on the calling thread until its operation is done.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "coverbs/error.hpp"

namespace coverbs::detail {

/// Waits, on the calling thread, for one asynchronous operation on `executor`: run() posts its
/// start there and returns once the operation is over.
class blocking_wait {
  struct shared_state;

 public:
  /// What the operation's handler holds: calling it, or destroying it uncalled, says that the
  /// operation is over. Its slot cancels the operation.
  class ended {
   public:
    explicit ended(std::shared_ptr<shared_state> state) noexcept : state_(std::move(state)) {}
    ended(ended&& other) noexcept = default;
    ended& operator=(ended&& other) noexcept = delete;
    ended(const ended&) = delete;
    ended& operator=(const ended&) = delete;
    ~ended() { operator()(); }

    void operator()() noexcept;
    boost::asio::cancellation_slot slot() const noexcept;

   private:
    std::shared_ptr<shared_state> state_;
  };

  explicit blocking_wait(const boost::asio::any_io_executor& executor);
  blocking_wait(const blocking_wait&) = delete;
  blocking_wait& operator=(const blocking_wait&) = delete;
  /// Posts what run() held and settle() did not take, rather than lose it.
  ~blocking_wait() { post_held(); }

  /// `would_block` when this thread runs the executor's context already (inside a handler of
  /// it: an io_context, a thread_pool, or a strand over one): blocking there would stop the
  /// thread the operation needs, maybe the only one.
  error_code refusal() const;

  /// Posts `start(ended)` to the executor, and waits until it has returned and the handler it
  /// gave `ended` to has been called or destroyed. An io_context (the executor's, or a
  /// strand's over it) runs here meanwhile, restarted if it had stopped, beside any threads
  /// that run it too; another kind of context is left to its own threads, and where that is a
  /// thread_pool that has stopped (it runs nothing again), a start not yet run is given up and
  /// run() returns with the handler never called.
  ///
  /// An exception that `start` throws is rethrown here. One that another handler of the
  /// io_context throws while it runs here is rethrown at once where the start has not run (it
  /// then never does). Otherwise the operation is cancelled and waited for, since it may be
  /// using the caller's memory (what cannot be recalled, as a large TCP write the kernel is
  /// taking, ends when it ends), and the exception is held for settle().
  template <class Start>
  void run(Start&& start) {
    boost::asio::post(executor_, [state = state_, &start] {
      // Where the caller has given up (abandoned), its frame may be gone: touch none of it.
      if (!state->begin()) return;
      try {
        std::forward<Start>(start)(ended(state));
      } catch (...) {
        state->start_error = std::current_exception();
      }
      state->signal();
    });
    wait();
  }

  /// After run(): where another handler threw while the operation ran, rethrows the first
  /// such exception if the operation `failed` (cancelled by it, as a rule), or else posts it
  /// rather than lose the result (see post_later). Any later ones are posted after it, so
  /// that they leave in the order they were thrown.
  void settle(bool failed);

  /// Posts `e` to the io_context, to leave the next run() (or blocking call) that runs it, as
  /// if the handler that threw it had run then (on a context that several threads run, that
  /// may be another thread, as for any handler).
  void post_later(std::exception_ptr e) const;

 private:
  /// Shared with the posted start and the operation's handler, which may outlive the caller.
  struct shared_state {
    enum step { queued, started, abandoned };
    std::atomic<int> phase{queued};
    std::atomic<int> pending{2};  ///< the start's return, and the handler's end
    std::atomic<bool> done{false};
    std::exception_ptr start_error;              ///< written before the start's signal
    boost::asio::cancellation_signal canceller;  ///< emitted on the executor only

    bool begin() noexcept;
    bool abandon() noexcept;
    void signal() noexcept;
  };

  void wait();
  void hold(std::exception_ptr e) noexcept;
  void post_held();

  boost::asio::any_io_executor executor_;
  boost::asio::io_context* io_;  ///< null for another kind of context
  bool inside_;                  ///< constructed on a thread that runs the context
  std::shared_ptr<shared_state> state_;
  std::exception_ptr first_;              ///< thrown by another handler while the operation ran
  std::vector<std::exception_ptr> more_;  ///< and after it, before the operation's end
};

/// Whether this thread runs `executor`'s handlers now: a handler of its io_context or
/// thread_pool, or where `executor` is a strand over one, of that strand.
bool runs_context_here(const boost::asio::any_io_executor& executor);

/// Runs `start(handler)`, an operation completing with `void(error_code, Results...)`, to its
/// end: its error in `ec` (`operation_aborted` where the handler is destroyed uncalled), its
/// results passed to `store`. See blocking_wait::run for exceptions.
template <class Start, class Store>
void run_blocking_to(const boost::asio::any_io_executor& executor, error_code& ec, Start&& start,
                     Store store) {
  blocking_wait waiting(executor);
  ec = waiting.refusal();
  if (ec) return;
  ec = boost::asio::error::operation_aborted;
  // Started on the executor, not on this thread: another thread that runs the context (or the
  // pool, or the strand's) may be running the connection's internals meanwhile. `ec` and what
  // `store` refers to are alive until the handler's end: run() returns only after it.
  waiting.run([&](blocking_wait::ended end) {
    const auto slot = end.slot();
    std::forward<Start>(start)(boost::asio::bind_cancellation_slot(
        slot, [&ec, &store, end = std::move(end)](error_code e, auto... results) mutable {
          ec = e;
          store(std::move(results)...);
          end();
        }));
  });
  waiting.settle(static_cast<bool>(ec));
}

/// Runs `start(handler)`, an operation completing with `void(error_code)`, to its end.
template <class Start>
void run_blocking(const boost::asio::any_io_executor& executor, error_code& ec, Start&& start) {
  run_blocking_to(executor, ec, std::forward<Start>(start), [] {});
}

/// As above, for an operation completing with `void(error_code, Value)`: its value returned.
template <class Value, class Start>
Value run_blocking(const boost::asio::any_io_executor& executor, error_code& ec, Start&& start) {
  Value value{};
  run_blocking_to(executor, ec, std::forward<Start>(start), [&value](Value v) { value = std::move(v); });
  return value;
}

/// Runs `act(ec)`, which never waits, where the connection's internals may be touched: here
/// when this thread runs the executor's handlers (as an initiating function does), else posted
/// there and waited for as a blocking call is, so that an io_context nobody else runs takes in
/// what has arrived meanwhile; `would_block` from a handler of the same context that cannot
/// wait (another strand's). What tcp::socket's non-blocking calls do in one system call.
template <class Value, class Act>
Value run_now(const boost::asio::any_io_executor& executor, error_code& ec, Act act) {
  if (runs_context_here(executor)) return act(ec);
  return run_blocking<Value>(executor, ec, [&act](auto handler) {
    error_code e;
    const Value v = act(e);
    std::move(handler)(e, v);
  });
}

}  // namespace coverbs::detail
