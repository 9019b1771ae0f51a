// tcp_stream: failure and close, and a step that runs out of memory (fail_for_memory).
// Receiving is in tcp_stream.cpp, sending in tcp_stream_send.cpp, the one-sided operations in
// tcp_stream_one_sided.cpp.
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/post.hpp>
#include <new>
#include <utility>

#include "coverbs/detail/tcp_stream.hpp"
#include "tcp_stream_shared.hpp"

namespace coverbs::detail {

using namespace tcp_stream_shared;

// --- failure and close --------------------------------------------------------------------

void tcp_stream::fail(error_code stream_ec, error_code first, error_code rest, frame_status tell_peer,
                      bool defer) {
  if (broken_) return;
  broken_ = true;
  if (tell_peer != frame_status::ok && !failure_sent_) {
    failure_sent_ = true;
    try {
      send_frame({.type = frame_type::close, .status = tell_peer});
    } catch (const std::bad_alloc&) {
      reset_socket();  // the peer learns of the failure, not its reason
    }
  }
  fifo<one_sided_op> ops = take_operations();
  finish_all(ops, first, rest, defer);
  deliver_failure(stream_ec, defer);
  // A write or send from the caller's memory ends only once the socket has taken all of it.
  // A peer that is gone or failed the connection itself reads no more, so that never happens:
  // as a queue pair in error flushes its sends, the failure ends it (on_written), dropping what
  // is queued with it. Where this side tells the peer why it fails (a refused request: the
  // peer is healthy and reading), the frames go out behind it, the write then ends normally.
  if (!closed_ && tell_peer == frame_status::ok && (direct_pending(false) || direct_pending(true))) {
    error_code ignored;
    socket_.cancel(ignored);
  }
}

// Taken out before any handler runs: handlers may run inline and start operations.
fifo<tcp_stream::one_sided_op> tcp_stream::take_operations() {
  fifo<one_sided_op> ops = operations_.take();
  for (auto& op : ops) disconnect(op);  // none reaches this stream, whatever a handler does
  next_to_send_ = 0;
  unanswered_ = 0;
  return ops;
}

void tcp_stream::finish_all(fifo<one_sided_op>& ops, error_code first, error_code rest, bool defer) {
  bool oldest = true;
  for (auto& op : ops) {
    if (op.withdrawn) continue;  // it ended then
    finish(op, std::exchange(oldest, false) ? first : rest, 0, defer);
  }
}

void tcp_stream::protocol_error() {
  fail(malformed(), malformed(), malformed(), frame_status::protocol_error);
}

// The connection ended without a failing close: requests still unanswered never will be, as
// when an RC requester's peer stops answering.
void tcp_stream::connection_lost(error_code ec) {
  if (connecting_ && limit_ == 0) ec = error::connection_refused;  // see the constructor
  fail(ec, make_error_code(wc_errc::retry_exceeded), flushed(), frame_status::ok);
}

// The context is shutting down: nothing runs any more, so nothing new may start either.
void tcp_stream::destroy_handlers() noexcept {
  const auto self = weak_from_this().lock();
  if (!self) return;  // being destroyed already
  broken_ = true;
  lingering_ = false;
  close_timer_.reset();  // while the timer service exists: this stream may outlive the context
  const fifo<one_sided_op> ops = take_operations();
  destroy_pending();
}

void tcp_stream::close() {
  if (closed_) return;
  // Frames are queued only while the socket cannot take them: a connection that works gets
  // them out, as the kernel sends a closed TCP socket's bytes. Cut off, the peer would miss
  // bytes of writes that completed here, and see a frame end early (a reset, not an eof). Not
  // while one-sided operations of this side's are outstanding, as over RDMA: closing flushes
  // them, and their request frames must not reach the peer after that (nor its answers arrive
  // unread, which would make the kernel reset the connection). A connection that failed here
  // lingers too while it owes the peer its failing close (a refused request, a malformed
  // frame): the answers queued before it and the reason go out, as a device's NAK does
  // whatever its application does; its own operations are flushed already.
  const bool owes_the_peer = broken_ && failure_sent_;
  lingering_ = (!broken_ || owes_the_peer) && writing_ && socket_.is_open() && close_timeout_.count() > 0 &&
               std::all_of(operations_.begin(), operations_.end(),
                           [](const one_sided_op& op) { return op.withdrawn; });
  closed_ = true;
  broken_ = true;
  try {
    fifo<one_sided_op> ops = take_operations();
    deliver_failure(error::operation_aborted, true);
    // As when a queue pair is torn down: what was started and not answered is flushed.
    finish_all(ops, flushed(), flushed(), true);
    if (!lingering_) return finish_close();
    // A peer that reads nothing would hold this stream, and io_context::run, for ever.
    close_timer_.emplace(get_executor(), close_timeout_);
    close_timer_->async_wait([weak = weak_from_this()](error_code ec) {
      if (auto self = weak.lock(); self && !ec) self->finish_close();
    });
  } catch (const std::bad_alloc&) {
    // Called by destructors and noexcept moves: never a throw. The operations from the one
    // whose handler could not be posted on are not run (destroyed, those taken out at once,
    // the stream's with it); the peer is told by a reset.
    reset_socket();
  }
}

// --- running out of memory ----------------------------------------------------------------

void tcp_stream::reset_socket() noexcept {
  lingering_ = false;
  if (close_timer_) close_timer_->cancel();  // nothing is left to linger for
  error_code ignored;
  socket_.set_option(boost::asio::socket_base::linger(true, 0), ignored);
  socket_.close(ignored);  // what is under way ends with operation_aborted
}

// As rdma_stream::fail_soon: the peer is not told why (a failing close would have to be
// allocated), and the one-sided operations end flushed, as a queue pair in error ends them.
void tcp_stream::fail_for_memory(bool inside_user_call) noexcept {
  reset_socket();
  broken_ = true;
  const bool again = std::exchange(memory_failed_, true);
  // From the scheduler it ends them (again: end_for_memory ends only what is left), where a
  // failure inside a user's call may not have been able to post its end.
  if (!inside_user_call) return end_for_memory();
  if (again) return;
  try {
    if (auto self = weak_from_this().lock()) {
      boost::asio::post(get_executor(),
                        boost::asio::bind_allocator(allocator(), [self] { self->end_for_memory(); }));
    }
  } catch (const std::bad_alloc&) {
    // Nothing left to post with: operations waiting now wait until close(), which ends them.
  }
}

// Each part under its own try: a handler that cannot be handed over to an executor of its own
// is dropped (not run), with those after it in that part; the next parts still end theirs.
void tcp_stream::end_for_memory() noexcept {
  try {
    if (!closed_) {  // close() ended these
      fifo<one_sided_op> ops = take_operations();
      finish_all(ops, flushed(), flushed(), false);
    }
  } catch (const std::bad_alloc&) {
  }
  try {
    if (!closed_) deliver_failure(out_of_memory(), false);
  } catch (const std::bad_alloc&) {
  }
  // A write from the caller's memory ends when its socket write does (on_written); where a
  // failed step left none under way, it ends here. (The socket is closed: nothing reads
  // that memory any more.)
  try {
    if (!write_under_way_) end_direct_writes(error::broken_pipe);
  } catch (const std::bad_alloc&) {
  }
}

void tcp_stream::end_direct_writes(error_code ec) {
  for (const bool message : {false, true}) {
    if (direct_pending(message)) direct_done(message, ec);
  }
}

void tcp_stream::finish_close() {
  lingering_ = false;
  if (close_timer_) close_timer_->cancel();
  boost::system::error_code ignored;
  socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);  // a write still under way ends with operation_aborted (on_written)
}

}  // namespace coverbs::detail
