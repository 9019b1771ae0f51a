#include "coverbs/detail/blocking_wait.hpp"

#include <boost/asio/strand.hpp>
#include <chrono>

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
}  // namespace

blocking_wait::blocking_wait(const asio::any_io_executor& executor) : io_(io_context_of(executor)) {}

error_code blocking_wait::refusal() const {
  const bool inside = io_ != nullptr && io_->get_executor().running_in_this_thread();
  return inside ? error_code(asio::error::would_block) : error_code();
}

void blocking_wait::finish() noexcept {
  done_.store(true, std::memory_order_release);
  done_.notify_all();
}

void blocking_wait::wait() {
  if (io_ == nullptr) {
    done_.wait(false, std::memory_order_acquire);
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
