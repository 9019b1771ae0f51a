// The synchronous calls of coverbs::socket. Asio's block in a system call and need no running
// io_context; a coverbs connection completes through its execution context, so a blocking
// call runs that context on the calling thread until its operation is done.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <utility>

#include "coverbs/error.hpp"

namespace coverbs::detail {

/// Waits, on the calling thread, for one asynchronous operation on `executor`: start it with a
/// handler that calls finish(), then call wait().
class blocking_wait {
 public:
  explicit blocking_wait(const boost::asio::any_io_executor& executor);
  blocking_wait(const blocking_wait&) = delete;
  blocking_wait& operator=(const blocking_wait&) = delete;

  /// `would_block` when this thread runs the executor's context already (inside a handler of
  /// it: an io_context, a thread_pool, or a strand over one): blocking there would stop the
  /// thread the operation needs, maybe the only one.
  error_code refusal() const;
  /// Called by the operation's handler, on whichever thread runs it.
  void finish() noexcept;
  /// Returns once finish() was called. An io_context (the executor's, or a strand's over it)
  /// runs here meanwhile, restarted if it had stopped, beside any threads that run it too;
  /// another kind of context is left to its own threads.
  void wait();

 private:
  boost::asio::io_context* io_;  ///< null for another kind of context
  bool inside_;                  ///< constructed on a thread that runs the context
  std::atomic<bool> done_{false};
};

/// Runs `start(handler)`, an operation completing with `void(error_code)`, to its end: its
/// error in `ec`.
template <class Start>
void run_blocking(const boost::asio::any_io_executor& executor, error_code& ec, Start&& start) {
  blocking_wait waiting(executor);
  ec = waiting.refusal();
  if (ec) return;
  // Started on the executor, not on this thread: another thread that runs the context (or the
  // pool, or the strand's) may be running the connection's internals meanwhile.
  boost::asio::post(executor, [&] {
    std::forward<Start>(start)([&](error_code e) {
      ec = e;
      waiting.finish();
    });
  });
  waiting.wait();
}

/// As above, for an operation completing with `void(error_code, Value)`: its value returned.
template <class Value, class Start>
Value run_blocking(const boost::asio::any_io_executor& executor, error_code& ec, Start&& start) {
  Value value{};
  run_blocking(executor, ec, [&](auto finished) {
    std::forward<Start>(start)([&value, finished = std::move(finished)](error_code e, Value v) mutable {
      value = std::move(v);
      finished(e);
    });
  });
  return value;
}

}  // namespace coverbs::detail
