#include "coverbs/detail/blocking_wait.hpp"

#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {
// The io_context behind a socket's executor: its own, or a strand's over it; null for another
// kind of context (a thread_pool, say).
asio::io_context* io_context_of(const asio::any_io_executor& executor) {
  using plain = asio::io_context::executor_type;
  if (const auto* e = executor.target<plain>()) return &e->context();
  if (const auto* s = executor.target<asio::strand<plain>>()) return &s->get_inner_executor().context();
  return nullptr;
}

// Whether this thread runs the context behind `executor`, of the kinds Asio has.
bool runs_here(const asio::any_io_executor& executor, asio::io_context* io) {
  using pool = asio::thread_pool::executor_type;
  if (io != nullptr) return io->get_executor().running_in_this_thread();
  if (const auto* e = executor.target<pool>()) return e->running_in_this_thread();
  if (const auto* s = executor.target<asio::strand<pool>>()) {
    return s->get_inner_executor().running_in_this_thread();
  }
  return false;
}

// What a wait on another kind of context sleeps on. Not a member: the waiter may return, and
// destroy its blocking_wait, as soon as it sees done_, so finish() must not touch the object
// after setting it (an atomic's notify_all would). Those waits are rare, and all share these.
std::mutex finished_mutex;
std::condition_variable finished;
}  // namespace

blocking_wait::blocking_wait(const asio::any_io_executor& executor)
    : io_(io_context_of(executor)), inside_(runs_here(executor, io_)) {}

error_code blocking_wait::refusal() const {
  return inside_ ? error_code(asio::error::would_block) : error_code();
}

void blocking_wait::finish() noexcept {
  {
    const std::lock_guard lock(finished_mutex);
    done_.store(true, std::memory_order_release);
  }
  finished.notify_all();
}

void blocking_wait::wait() {
  if (io_ == nullptr) {
    std::unique_lock lock(finished_mutex);
    finished.wait(lock, [this] { return done_.load(std::memory_order_acquire); });
    return;
  }
  // run_one returns after any handler, ours or not, at once; the limit bounds the wait only
  // when another thread that runs the context runs ours.
  while (!done_.load(std::memory_order_acquire)) {
    if (io_->stopped()) io_->restart();
    io_->run_one_for(std::chrono::milliseconds(20));
  }
}

}  // namespace coverbs::detail
