// The handler-carrying operation behind every async verbs function, and how one is started.
#pragma once

#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "coverbs/detail/invoke_handler.hpp"
#include "coverbs/detail/posting_queue.hpp"
#include "coverbs/error.hpp"

namespace coverbs::detail {

/// The error an operation ended with, from (in order) a failed post, a cancellation that the
/// flush confirmed, or the completion status. Success returns before any std::error_code is
/// made: converting one to Asio's error_code costs a dynamic_cast (Boost.System looks for a
/// category it wrapped), 2 % of an RDMA ping-pong round trip's instructions.
inline error_code result_error(const operation& op) {
  if (op.post_error != 0) return {op.post_error, boost::system::system_category()};
  if (op.status == IBV_WC_SUCCESS) return {};
  if (op.cancelled && op.status == IBV_WC_WR_FLUSH_ERR) return boost::asio::error::operation_aborted;
  return make_error_code(op.status);
}

/// Result policies: what value a completed operation hands to its handler.
struct bytes_result {
  using value_type = std::size_t;
  /// A failed request moved nothing the caller can rely on, as with Asio's sockets. Nor did a
  /// receive that a peer's write with immediate consumed: its bytes went to the written region
  /// (the work completion's byte_len counts them), none into the receive's buffer.
  static value_type value(const operation& op) noexcept {
    return op.status == IBV_WC_SUCCESS && op.post_error == 0 && !op.rdma_immediate ? op.byte_len : 0;
  }
};
struct immediate_result {
  using value_type = std::uint32_t;
  static value_type value(const operation& op) noexcept { return op.imm; }
};
/// A receive's length together with its immediate data (the stream protocol needs both).
struct received {
  std::size_t bytes = 0;
  std::uint32_t imm = 0;
  bool rdma_immediate = false;  ///< consumed by a peer's RDMA WRITE with immediate, not a SEND
};
struct received_result {
  using value_type = received;
  static value_type value(const operation& op) noexcept { return {op.byte_len, op.imm, op.rdma_immediate}; }
};
struct atomic_result {
  using value_type = std::uint64_t;
  static value_type value(const operation& op) noexcept {
    std::uint64_t old = 0;  // the device wrote the prior remote value into the local buffer
    if (op.status == IBV_WC_SUCCESS && op.post_error == 0) {
      std::memcpy(&old, reinterpret_cast<const void*>(op.sge.addr), sizeof old);
    }
    return old;
  }
};

template <class Result, class Handler>
class wr_operation final : public operation {
 public:
  // Operations come from the handler's allocator, by default Asio's per-thread recycling
  // cache: in steady state starting an operation allocates nothing.
  using allocator_type = typename std::allocator_traits<boost::asio::associated_allocator_t<
      Handler, boost::asio::recycling_allocator<void>>>::template rebind_alloc<wr_operation>;

  static wr_operation* create(Handler&& handler, const boost::asio::any_io_executor& io_executor) {
    allocator_type alloc(
        boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    wr_operation* op = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    return ::new (static_cast<void*>(op)) wr_operation(std::move(handler), io_executor);
  }

  /// Routes cancellation of the handler's slot to the queue that holds this operation, while
  /// one does (`owner`: cleared once its result is known).
  void watch_cancellation() {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) {
      slot.template emplace<canceller>(this);
    }
  }

 private:
  struct canceller {
    operation* op;
    void operator()(boost::asio::cancellation_type type) const {
      if (type != boost::asio::cancellation_type::none && op->owner != nullptr) op->owner->cancel(op, type);
    }
  };

  /// The work counted on the handler's own executor, if it has one (see handler_work).
  using work_type = handler_work_for<Handler>;

  wr_operation(Handler&& handler, const boost::asio::any_io_executor& io_executor)
      : operation(&do_complete, &do_destroy),
        handler_(std::move(handler)),
        io_executor_(io_executor),
        work_(track_handler_work(handler_, io_executor)) {}

  // What release() hands back. The work goes first, after the handler has been handed over.
  struct contents_type {
    Handler handler;
    boost::asio::any_io_executor io_executor;
    [[no_unique_address]] work_type work;
  };

  // Disconnects the handler's cancellation slot, frees the operation and hands back the
  // handler and I/O executor: the memory is free before the handler runs (a handler that starts
  // the next operation reuses it) or, when it is only destroyed, before whatever it owns goes.
  static contents_type release(wr_operation* self) noexcept {
    auto slot = boost::asio::get_associated_cancellation_slot(self->handler_);
    if (slot.is_connected()) slot.clear();
    contents_type contents{std::move(self->handler_), std::move(self->io_executor_), std::move(self->work_)};
    allocator_type alloc(
        boost::asio::get_associated_allocator(contents.handler, boost::asio::recycling_allocator<void>()));
    self->~wr_operation();
    std::allocator_traits<allocator_type>::deallocate(alloc, self, 1);
    return contents;
  }

  // The handler may own whatever owns this operation's queue, so it goes last.
  static void do_destroy(operation* base) { release(static_cast<wr_operation*>(base)); }

  static void do_complete(operation* base, bool defer) {
    auto* self = static_cast<wr_operation*>(base);
    const error_code ec = result_error(*self);
    const auto value = Result::value(*self);
    auto [handler, io_executor, work] = release(self);
    // Through the I/O executor, which hands over to the handler's associated executor (inline
    // when they are the same and we are on its thread). While the operation is pending the
    // completion loop's own wait keeps the I/O executor's context running.
    if (defer) return post_unerased(io_executor, boost::asio::append(std::move(handler), ec, value));
    invoke_handler(std::move(handler), io_executor, ec, value);
  }

  Handler handler_;
  boost::asio::any_io_executor io_executor_;
  [[no_unique_address]] work_type work_;
};

/// Completes `handler` with `ec` without starting anything (invalid arguments).
template <class Result, class Handler>
void fail_immediately(Handler&& handler, const boost::asio::any_io_executor& io_executor,
                      error_code ec) {
  boost::asio::post(io_executor, boost::asio::append(std::move(handler), ec, typename Result::value_type{}));
}

/// Creates the operation for `handler`, lets `fill` write its work request, and submits it.
/// `fill` receives the operation; its wr_id and scatter/gather list are already set.
template <class Result, class Handler, class Fill>
void start(Handler&& handler, posting_queue& queue, bool is_send, Fill&& fill) {
  using op_type = wr_operation<Result, std::decay_t<Handler>>;
  op_type* op = op_type::create(std::forward<Handler>(handler), queue.engine().executor);
  if (is_send) {
    op->wr.send.wr_id = reinterpret_cast<std::uint64_t>(static_cast<operation*>(op));
    op->wr.send.sg_list = &op->sge;
    op->wr.send.num_sge = 1;
    op->wr.send.send_flags = IBV_SEND_SIGNALED;
  } else {
    op->wr.recv.wr_id = reinterpret_cast<std::uint64_t>(static_cast<operation*>(op));
    op->wr.recv.sg_list = &op->sge;
    op->wr.recv.num_sge = 1;
  }
  fill(*static_cast<operation*>(op));
  try {
    op->watch_cancellation();  // the slot's memory may be allocated now
  } catch (...) {
    op->destroy(op);  // posted nowhere: it would hold its handler for ever
    throw;
  }
  queue.submit(op);
}

}  // namespace coverbs::detail
