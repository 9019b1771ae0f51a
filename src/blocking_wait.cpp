#include "coverbs/detail/blocking_wait.hpp"

#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

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

// The thread_pool behind a socket's executor: its own, or a strand's over it; null for another
// kind of context.
asio::thread_pool* thread_pool_of(const asio::any_io_executor& executor) {
  using plain = asio::thread_pool::executor_type;
  if (const auto* e = executor.target<plain>()) return &e->context();
  if (const auto* s = executor.target<asio::strand<plain>>()) return &s->get_inner_executor().context();
  return nullptr;
}

// Whether this thread runs the context behind `executor`, of the kinds Asio has.
bool runs_here(const asio::any_io_executor& executor, asio::io_context* io) {
  if (io != nullptr) return io->get_executor().running_in_this_thread();
  asio::thread_pool* pool = thread_pool_of(executor);
  return pool != nullptr && pool->get_executor().running_in_this_thread();
}

// Whether `executor`'s thread_pool has stopped: by stop(), or by join() once it ran out of
// work. A stopped pool runs nothing again (it has no restart()). Asio has no public query for
// it; the pool's scheduler is a service of the pool, and says.
bool pool_stopped(const asio::any_io_executor& executor) {
  asio::thread_pool* pool = thread_pool_of(executor);
  return pool != nullptr && asio::use_service<asio::detail::scheduler>(*pool).stopped();
}

// What a wait on another kind of context sleeps on. Not in the shared state: those waits are
// rare, and all share these.
std::mutex finished_mutex;
std::condition_variable finished;
// How often such a wait looks whether its pool has stopped.
constexpr std::chrono::milliseconds pool_check_interval(50);
}  // namespace

bool blocking_wait::shared_state::begin() noexcept {
  int expected = queued;
  return phase.compare_exchange_strong(expected, started, std::memory_order_acq_rel);
}

bool blocking_wait::shared_state::abandon() noexcept {
  int expected = queued;
  return phase.compare_exchange_strong(expected, abandoned, std::memory_order_acq_rel);
}

void blocking_wait::shared_state::signal() noexcept {
  if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    const std::lock_guard lock(finished_mutex);
    done.store(true, std::memory_order_release);
  }
  finished.notify_all();
}

void blocking_wait::ended::operator()() noexcept {
  // The local keeps the state alive through signal(), after which the waiter may return.
  if (const std::shared_ptr<shared_state> state = std::exchange(state_, nullptr)) state->signal();
}

asio::cancellation_slot blocking_wait::ended::slot() const noexcept {
  return state_->canceller.slot();
}

blocking_wait::blocking_wait(const asio::any_io_executor& executor)
    : executor_(executor),
      io_(io_context_of(executor)),
      inside_(runs_here(executor, io_)),
      state_(std::make_shared<shared_state>()) {}

bool runs_context_here(const asio::any_io_executor& executor) {
  // On a strand, only the strand's own handlers may touch what it guards: another strand's
  // may run beside it on another thread of the context.
  if (const auto* s = executor.target<asio::strand<asio::io_context::executor_type>>()) {
    return s->running_in_this_thread();
  }
  if (const auto* s = executor.target<asio::strand<asio::thread_pool::executor_type>>()) {
    return s->running_in_this_thread();
  }
  return runs_here(executor, io_context_of(executor));
}

error_code blocking_wait::refusal() const {
  return inside_ ? error_code(asio::error::would_block) : error_code();
}

void blocking_wait::post_later(std::exception_ptr e) const {
  if (io_ != nullptr) asio::post(*io_, [e = std::move(e)] { std::rethrow_exception(e); });
}

// noexcept: with the operation under way, nothing may leave wait() before its end (a failure
// to allocate here ends the program instead).
void blocking_wait::hold(std::exception_ptr e) noexcept {
  if (first_) return more_.push_back(std::move(e));
  first_ = std::move(e);
  asio::post(executor_, [s = state_] { s->canceller.emit(asio::cancellation_type::terminal); });
}

// Takes them all first: a post that fails part way (out of memory) leaves nothing half-moved
// for the destructor to post again.
void blocking_wait::post_held() {
  std::exception_ptr first = std::exchange(first_, nullptr);
  const std::vector<std::exception_ptr> more = std::exchange(more_, {});
  if (first) post_later(std::move(first));
  for (const std::exception_ptr& e : more) post_later(e);
}

void blocking_wait::settle(bool failed) {
  const std::exception_ptr rethrown = failed ? std::exchange(first_, nullptr) : nullptr;
  post_held();
  if (rethrown) std::rethrow_exception(rethrown);
}

void blocking_wait::wait() {
  shared_state& state = *state_;
  if (io_ == nullptr) {
    std::unique_lock lock(finished_mutex);
    const auto ended = [&] { return state.done.load(std::memory_order_acquire); };
    // A start still queued on a stopped pool would never run: the call ends with
    // operation_aborted. One that has begun may be using the caller's memory (a posted work
    // request reading it, say), so its end is waited for, however long, and the pool is not
    // looked at again (another thread may destroy it once the operation has ended).
    while (state.phase.load(std::memory_order_acquire) == shared_state::queued &&
           !finished.wait_for(lock, pool_check_interval, ended)) {
      if (pool_stopped(executor_) && state.abandon()) return;
    }
    finished.wait(lock, ended);
  }
  while (!state.done.load(std::memory_order_acquire)) {
    try {
      if (io_->stopped()) io_->restart();
      // run_one returns after any handler, ours or not, at once; the limit bounds the wait
      // only when another thread that runs the context runs ours.
      io_->run_one_for(std::chrono::milliseconds(20));
    } catch (...) {
      if (state.abandon()) throw;  // nothing under way: as Asio's run() would, at once
      hold(std::current_exception());
    }
  }
  if (state.start_error) {
    post_held();
    std::rethrow_exception(state.start_error);
  }
}

}  // namespace coverbs::detail
