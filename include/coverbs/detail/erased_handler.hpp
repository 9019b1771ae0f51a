// A completion handler stored by a connection until its operation ends, with its type erased.
//
// Why not asio::any_completion_handler: handing one of those to asio::dispatch or post makes
// Asio ask for its associated executor, which it can only give as an any_completion_executor
// wrapping the handler's own executor (an any_io_executor does not fit its small buffer): two
// heap allocations per completed operation. An erased_handler instead reports no associated
// executor, so dispatching it costs nothing, and when invoked it dispatches the handler it holds
// with that handler's real type, which Asio does without allocating.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <type_traits>
#include <utility>

#include "coverbs/detail/invoke_handler.hpp"
#include "coverbs/detail/operation_memory.hpp"

namespace coverbs::detail {

template <class Signature>
class erased_handler;

template <class... Args>
class erased_handler<void(Args...)> {
 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;
  using allocator_type = operation_allocator<void>;

  erased_handler() noexcept = default;

  /// Takes `handler`; when invoked it runs on the handler's associated executor, by default
  /// `io_executor` (inline when that is this thread's). Storage comes from the handler's
  /// allocator, by default the connection's `memory`, which also serves the posts that
  /// complete it: none in steady state.
  template <class Handler>
  erased_handler(Handler&& handler, const boost::asio::any_io_executor& io_executor,
                 const operation_allocator<void>& memory)
      : impl_(holder<std::decay_t<Handler>>::create(std::forward<Handler>(handler), io_executor, memory)),
        memory_(memory) {}

  // The memory is copied, not moved: Asio may ask a moved-from handler for its allocator.
  erased_handler(erased_handler&& other) noexcept
      : impl_(std::exchange(other.impl_, nullptr)), memory_(other.memory_) {}
  erased_handler& operator=(erased_handler&& other) noexcept {
    if (this != &other) {
      reset();
      impl_ = std::exchange(other.impl_, nullptr);
      memory_ = other.memory_;
    }
    return *this;
  }
  erased_handler(const erased_handler&) = delete;
  erased_handler& operator=(const erased_handler&) = delete;
  /// Destroys the held handler without invoking it.
  ~erased_handler() { reset(); }

  explicit operator bool() const noexcept { return impl_ != nullptr; }

  /// The held handler's cancellation slot (Asio finds it through this member).
  cancellation_slot_type get_cancellation_slot() const noexcept {
    return impl_ != nullptr ? impl_->slot : cancellation_slot_type();
  }

  /// Disconnects the held handler's cancellation slot from whatever canceller a connection
  /// installed there: once the operation's result is known, or before the handler goes.
  void clear_cancellation_slot() const noexcept {
    if (auto slot = get_cancellation_slot(); slot.is_connected()) slot.clear();
  }

  /// The connection's operation memory (Asio allocates the posts of this handler from it).
  allocator_type get_allocator() const noexcept { return memory_; }

  /// Completes the held handler with `args`; this erased_handler is empty afterwards.
  void operator()(Args... args) {
    base* impl = std::exchange(impl_, nullptr);
    impl->invoke(impl, memory_, std::move(args)...);
  }

  void reset() noexcept {
    if (base* impl = std::exchange(impl_, nullptr)) impl->destroy(impl, memory_);
  }

 private:
  // The connection's memory is not kept here: the erased_handler holds it and passes it in.
  struct base {
    void (*invoke)(base*, const allocator_type&, Args...);
    void (*destroy)(base*, const allocator_type&) noexcept;
    cancellation_slot_type slot;
  };

  template <class Handler>
  struct holder final : base {
    using holder_allocator = typename std::allocator_traits<
        boost::asio::associated_allocator_t<Handler, allocator_type>>::template rebind_alloc<holder>;

    holder(Handler&& h, const boost::asio::any_io_executor& ex)
        : base{&do_invoke, &do_destroy, boost::asio::get_associated_cancellation_slot(h)},
          handler(std::move(h)),
          io_executor(keep_io_executor(handler, ex)) {}  // `handler` is the member, initialized
    using io_executor_type = io_executor_for<Handler>;

    static holder_allocator allocator_of(const Handler& h, const allocator_type& memory) {
      return holder_allocator(boost::asio::get_associated_allocator(h, memory));
    }

    static base* create(Handler&& h, const boost::asio::any_io_executor& ex, const allocator_type& memory) {
      holder_allocator alloc = allocator_of(h, memory);
      holder* p = std::allocator_traits<holder_allocator>::allocate(alloc, 1);
      try {
        return ::new (static_cast<void*>(p)) holder(std::move(h), ex);
      } catch (...) {
        std::allocator_traits<holder_allocator>::deallocate(alloc, p, 1);
        throw;
      }
    }

    // Frees this holder and hands back its contents, so that the memory is free before the
    // handler runs and a handler starting the next operation reuses it.
    static std::pair<Handler, io_executor_type> take(base* b, const allocator_type& memory) noexcept {
      auto* self = static_cast<holder*>(b);
      std::pair<Handler, io_executor_type> contents(std::move(self->handler), std::move(self->io_executor));
      holder_allocator alloc = allocator_of(contents.first, memory);
      self->~holder();
      std::allocator_traits<holder_allocator>::deallocate(alloc, self, 1);
      return contents;
    }

    static void do_invoke(base* b, const allocator_type& memory, Args... args) {
      auto [h, ex] = take(b, memory);
      invoke_handler(std::move(h), ex, std::move(args)...);
    }

    static void do_destroy(base* b, const allocator_type& memory) noexcept { take(b, memory); }

    Handler handler;
    [[no_unique_address]] io_executor_type io_executor;
  };

  base* impl_ = nullptr;
  allocator_type memory_{nullptr};
};

}  // namespace coverbs::detail
