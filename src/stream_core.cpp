#include "coverbs/detail/stream_core.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <type_traits>
#include <utility>

namespace coverbs::detail {

// A slot among a connection's one-sided operations, given back when the operation's handler
// runs or, should it never run, when the handler is destroyed.
class operation_slot {
 public:
  explicit operation_slot(std::shared_ptr<std::size_t> count) noexcept : count_(std::move(count)) {
    ++*count_;
  }
  operation_slot(operation_slot&&) noexcept = default;
  operation_slot& operator=(operation_slot&&) = delete;
  ~operation_slot() { release(); }
  void release() noexcept {
    if (count_) --*count_;
    count_.reset();
  }

 private:
  std::shared_ptr<std::size_t> count_;
};

template <class Handler>
struct counted_handler {
  Handler handler;
  operation_slot slot;

  template <class... Args>
  void operator()(Args... args) {
    slot.release();  // first, so that the handler may start the next operation
    std::move(handler)(std::move(args)...);
  }
};

}  // namespace coverbs::detail

namespace boost::asio {

// The wrapped handler keeps the user's executor, allocator and cancellation slot.
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct associator<Associator, coverbs::detail::counted_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const coverbs::detail::counted_handler<Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler);
  }
  static auto get(const coverbs::detail::counted_handler<Handler>& h, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.handler, c);
  }
};

}  // namespace boost::asio

namespace coverbs::detail {

namespace error = boost::asio::error;

void stream_core::set_limits(std::size_t max_outstanding_operations,
                             std::size_t max_registered_bytes) noexcept {
  max_outstanding_ = max_outstanding_operations;
  max_registered_ = max_registered_bytes;
  if (max_outstanding_ != 0 && !outstanding_) outstanding_ = std::make_shared<std::size_t>(0);
}

void stream_core::start_transfer(const one_sided_request& request, size_handler handler) {
  // Refused before a transport sees it, so that neither has to undo anything: over RDMA a
  // write with immediate takes a receive credit as it starts, which a refusal would leak.
  if (request.local.size > request.remote.length) {
    return complete(handler, make_error_code(errc::buffer_too_small), 0, true);
  }
  if (max_outstanding_ == 0) return transfer(request, std::move(handler));
  if (*outstanding_ >= max_outstanding_) {
    return complete(handler, make_error_code(errc::too_many_operations), 0, true);
  }
  transfer(request,
           size_handler(counted_handler<size_handler>{std::move(handler), operation_slot(outstanding_)}, executor_, allocator()));
}

void stream_core::start_atomic(const one_sided_request& request, value_handler handler) {
  if (max_outstanding_ == 0) return atomic(request, std::move(handler));
  if (*outstanding_ >= max_outstanding_) {
    const error_code ec = make_error_code(errc::too_many_operations);
    hand_over(std::move(handler), true, ec, std::uint64_t{0});
    return;
  }
  atomic(request,
         value_handler(counted_handler<value_handler>{std::move(handler), operation_slot(outstanding_)}, executor_, allocator()));
}

std::uint32_t stream_core::register_counted(std::span<std::byte> memory, verbs::access rights,
                                            std::uint32_t& lkey, remote_buffer& remote, error_code& ec) {
  ec = {};
  if (max_registered_ != 0 &&
      (registered_ > max_registered_ || memory.size() > max_registered_ - registered_)) {
    ec = make_error_code(errc::registration_limit);
    return 0;
  }
  const std::uint32_t handle = register_memory(memory, rights, lkey, remote);
  registered_ += memory.size();
  return handle;
}

void stream_core::deregister_counted(std::uint32_t handle, std::size_t size) noexcept {
  registered_ -= size;
  deregister_memory(handle);
}

template <class Pending>
void stream_core::watch(Pending& pending, op which) {
  auto slot = boost::asio::get_associated_cancellation_slot(pending.handler);
  if (slot.is_connected()) {
    slot.assign([this, which](boost::asio::cancellation_type) { cancel(which); });
  }
}

template <class Handler, class Value>
void stream_core::complete(Handler& handler, error_code ec, Value value, bool defer) {
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  if (slot.is_connected()) slot.clear();
  // A handler never runs inside its initiating function: completions found there are posted.
  // Both hand over to the handler's own associated executor.
  hand_over(std::move(handler), defer, ec, value);
}

// The operation is over before its handler runs: the handler may start the next one. It is
// also over before `used_up` is released (which may send a credit), so that nothing release()
// sets off finds it; and a handler run here runs before the release: returning a buffer (over
// RDMA, posting it again, 1 us in the test VM) is not what a handler that answers should wait
// for. Its reply then carries the credits returned before; this one goes with the next.
template <class Pending>
void stream_core::end_operation(std::optional<Pending>& pending, error_code ec, std::size_t n, bool defer,
                                std::optional<std::uint32_t> used_up) {
  auto h = std::move(pending->handler);
  pending.reset();
  if (used_up && defer) release(*used_up);
  complete(h, ec, n, defer);
  if (used_up && !defer) release(*used_up);
}

// The peer's end of stream stands whatever becomes of the connection afterwards (a write or
// credit report that finds the peer gone, a reset): reads see eof, as on a TCP socket after
// its FIN, unless this side closed or the peer broke the protocol.
error_code stream_core::read_error() const {
  if (!failure_) return error::eof;
  const bool stands = end_of_stream_ && *failure_ != error::operation_aborted &&
                      *failure_ != make_error_code(errc::malformed_frame);
  return stands ? error_code(error::eof) : *failure_;
}

// Writes into a failed connection see broken_pipe, as on a TCP socket, unless it was closed
// here or never established.
error_code stream_core::write_error() const {
  if (*failure_ == error::operation_aborted || *failure_ == error::connection_refused) return *failure_;
  return error::broken_pipe;
}

error_code stream_core::sending_refusal() const {
  if (sending_shut_) return error::broken_pipe;
  return failure_ ? write_error() : error_code();
}

void stream_core::read_some(const mutable_buffer_list& buffers, size_handler handler) {
  if (read_) return complete(handler, error::in_progress, 0, true);
  read_.emplace(buffers, std::move(handler));
  watch(*read_, op::read);
  serve_read(true);
  if (read_) want_input();
}

void stream_core::serve_read(bool defer) {
  if (!read_) return;
  if (read_->buffers.empty()) return end_operation(read_, {}, 0, defer);  // Asio: at once
  if (bytes_.empty() && !end_of_stream_ && !failure_) return;             // wait for bytes
  std::optional<std::uint32_t> last;  // the last segment used up: end_operation returns it
  const std::size_t total = take_bytes(read_->buffers, last);
  if (total == 0 && !end_of_stream_ && !failure_) return;  // wait for bytes
  end_operation(read_, total > 0 ? error_code{} : read_error(), total, defer, last);
}

std::size_t stream_core::take_bytes(mutable_buffer_list& buffers, std::optional<std::uint32_t>& used_up) {
  std::size_t total = 0;
  while (!bytes_.empty() && !buffers.empty()) {
    segment& s = bytes_.front();
    const std::size_t n = buffers.put(s.data + front_offset_, s.size - front_offset_);
    total += n;
    front_offset_ += n;
    if (front_offset_ == s.size) {
      if (used_up) release(*used_up);
      used_up = s.tag;
      bytes_.pop_front();
      front_offset_ = 0;
    }
  }
  return total;
}

void stream_core::complete_waiting_read(std::size_t n, std::size_t uncopied) {
  direct_read_total_ += uncopied;
  end_operation(read_, {}, n, false);
}

void stream_core::complete_waiting_receive(std::size_t n, std::size_t uncopied) {
  direct_read_total_ += uncopied;
  end_operation(receive_, {}, n, false);
}

std::size_t stream_core::available() const noexcept {
  std::size_t total = 0;
  for (const segment& s : bytes_) total += s.size;
  return total - front_offset_;
}

// A message goes whole, so one gathered from (or scattered into) more buffers than a list holds
// is refused rather than cut short.
void stream_core::receive_message(const mutable_buffer_list& buffers, size_handler handler) {
  if (receive_) return complete(handler, error::in_progress, 0, true);
  if (buffers.truncated()) return complete(handler, error::invalid_argument, 0, true);
  receive_.emplace(buffers, std::move(handler));
  watch(*receive_, op::receive);
  serve_receive(true);
  if (receive_) want_input();
}

void stream_core::serve_receive(bool defer) {
  if (!receive_) return;
  if (messages_.empty()) {
    if (!end_of_stream_ && !failure_) return;
    return end_operation(receive_, read_error(), 0, defer);
  }
  const segment s = messages_.front();
  // Too large for the buffers: it stays queued, so no data is lost.
  if (receive_->buffers.bytes() < s.size) return end_operation(receive_, error::message_size, 0, defer);
  receive_->buffers.put(s.data, s.size);
  messages_.pop_front();
  end_operation(receive_, {}, s.size, defer, s.tag);
}

void stream_core::write_some(const const_buffer_list& buffers, size_handler handler) {
  if (write_) return complete(handler, error::in_progress, 0, true);
  write_.emplace(buffers, std::move(handler));
  watch(*write_, op::write);
  serve_write(true);
}

bool stream_core::transmit_now(const_buffer_list& buffers, bool message, std::size_t& n) {
  const std::size_t size = buffers.bytes();
  // Below min_direct_bytes neither transport's transmit_direct takes the bytes; errors, an
  // empty write and a message too large are left to write_some and send_message.
  if (message ? send_.has_value() : write_.has_value()) return false;  // refused as in progress
  if (message && buffers.truncated()) return false;                    // refused by send_message
  payload_started(message);
  if (sending_refusal() || size >= min_direct_bytes) return false;
  if (!message) return size > 0 && (n = transmit(buffers, false)) > 0;
  n = size;
  return size <= max_message_size() && transmit(buffers, true) > 0;  // at least 1 when taken
}

void stream_core::shutdown_sending() {
  sending_shut_ = true;
  shutdown_send();
  serve_write(true);
  serve_send(true);
  serve_waits(true);
}

void stream_core::shutdown_receiving() {
  deliver_end_of_stream(true);  // from the user's call: handlers are posted
}

void stream_core::serve_write(bool defer) {
  if (!write_ || direct_pending(false)) return;
  // Writing no bytes to a stream does nothing, as on a TCP socket, even shut down or failed.
  const error_code ec = write_->buffers.empty() ? error_code() : sending_refusal();
  std::size_t n = 0;
  if (!ec && !write_->buffers.empty()) {
    if ((direct_bytes_[false] = transmit_direct(write_->buffers, false)) > 0) return;
    n = transmit(write_->buffers, false);
    if (n == 0) return;  // no credit or buffer now; capacity_available() retries
  }
  end_operation(write_, ec, n, defer);
}

void stream_core::direct_done(bool message, error_code ec) {
  const std::size_t n = std::exchange(direct_bytes_[message], 0);
  if (!ec) direct_total_ += n;
  std::optional<pending_write>& pending = message ? send_ : write_;
  if (!pending) return;  // destroyed with the context
  if (ec && failure_) ec = write_error();
  end_operation(pending, ec, ec ? 0 : n, false);
}

void stream_core::send_message(const const_buffer_list& buffers, size_handler handler) {
  if (send_) return complete(handler, error::in_progress, 0, true);
  if (buffers.truncated()) return complete(handler, error::invalid_argument, 0, true);  // see above
  if (buffers.bytes() > max_message_size()) return complete(handler, error::message_size, 0, true);
  send_.emplace(buffers, std::move(handler));
  watch(*send_, op::send);
  serve_send(true);
}

void stream_core::serve_send(bool defer) {
  if (!send_ || direct_pending(true)) return;
  const error_code ec = sending_refusal();
  const std::size_t size = send_->buffers.bytes();
  if (!ec) {
    if (size >= min_direct_bytes && (direct_bytes_[true] = transmit_direct(send_->buffers, true)) > 0) return;
    if (transmit(send_->buffers, true) == 0) return;  // transports return at least 1 when they took it
  }
  end_operation(send_, ec, ec ? 0 : size, defer);
}

void stream_core::cancel() {
  for (op which :
       {op::read, op::write, op::receive, op::send, op::wait_read, op::wait_write, op::wait_error}) {
    cancel(which);
  }
  fail_immediate_waiter(error::operation_aborted, true);
}

void stream_core::cancel(op which) {
  auto abort = [&](auto& pending) {
    if (pending) end_operation(pending, error::operation_aborted, 0, true);
  };
  switch (which) {
    case op::read: return abort(read_);
    // Bytes the transport is sending from the caller's memory cannot be recalled (the peer's
    // framing counts them already): the operation ends once they are out, or when the connection fails or
    // closes.
    case op::write: return direct_pending(false) ? void() : abort(write_);
    case op::receive: return abort(receive_);
    case op::send: return direct_pending(true) ? void() : abort(send_);
    case op::wait_read: return end_wait(boost::asio::socket_base::wait_read, error::operation_aborted, true);
    case op::wait_write:
      return end_wait(boost::asio::socket_base::wait_write, error::operation_aborted, true);
    case op::wait_error:
      return end_wait(boost::asio::socket_base::wait_error, error::operation_aborted, true);
  }
}

void stream_core::receive_immediate(immediate_handler handler) {
  auto finish = [&](error_code ec, std::uint32_t value) { hand_over(std::move(handler), true, ec, value); };
  if (immediate_waiter_) return finish(error::in_progress, 0);
  if (!immediates_.empty()) {
    const std::uint32_t value = immediates_.front();
    immediates_.pop_front();
    immediate_taken();
    return finish({}, value);
  }
  if (failure_ || end_of_stream_) return finish(read_error(), 0);
  immediate_waiter_.emplace(std::move(handler));
  auto slot = boost::asio::get_associated_cancellation_slot(*immediate_waiter_);
  if (slot.is_connected()) {
    slot.assign([this](boost::asio::cancellation_type) { fail_immediate_waiter(error::operation_aborted, true); });
  }
  want_input();
}

void stream_core::fail_immediate_waiter(error_code ec, bool defer) {
  if (!immediate_waiter_) return;
  auto h = std::move(*immediate_waiter_);
  immediate_waiter_.reset();
  complete(h, ec, std::uint32_t{0}, defer);
}

void stream_core::deliver_immediate(std::uint32_t immediate) {
  if (!immediate_waiter_) {
    immediates_.push_back(immediate);
    return;
  }
  auto h = std::move(*immediate_waiter_);
  immediate_waiter_.reset();
  complete(h, error_code{}, immediate, false);
}

void stream_core::deliver_bytes(const segment& s) {
  bytes_.push_back(s);
  serve_read(false);
  serve_waits(false);
}

void stream_core::deliver_message(const segment& s) {
  messages_.push_back(s);
  serve_receive(false);
  serve_waits(false);
}

void stream_core::deliver_end_of_stream(bool defer) {
  end_of_stream_ = true;
  fail_immediate_waiter(error::eof, defer);
  serve_read(defer);
  serve_receive(defer);
  serve_waits(defer);
}

void stream_core::deliver_failure(error_code ec, bool defer) {
  if (failure_) return;
  failure_ = ec;
  fail_immediate_waiter(read_error(), defer);
  serve_read(defer);
  serve_receive(defer);
  serve_write(defer);
  serve_send(defer);
  serve_waits(defer);
}

void stream_core::destroy_pending() noexcept {
  // All taken out before any is destroyed: destroying one may close this stream (its socket
  // lives in the coroutine frame), which would otherwise post the others.
  auto take = [](auto& pending) {
    using handler = std::remove_reference_t<decltype(pending->handler)>;
    handler h = pending ? handler(std::move(pending->handler)) : handler();
    pending.reset();
    return h;
  };
  size_handler read = take(read_), receive = take(receive_), write = take(write_), send = take(send_);
  immediate_handler immediate =
      immediate_waiter_ ? immediate_handler(std::move(*immediate_waiter_)) : immediate_handler();
  immediate_waiter_.reset();
  std::array<wait_handler, 3> waiters = std::move(waiters_);
  auto forget_slot = [](auto& h) {
    if (!h) return;
    auto slot = boost::asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) slot.clear();  // its canceller points at this stream
  };
  forget_slot(read);
  forget_slot(receive);
  forget_slot(write);
  forget_slot(send);
  forget_slot(immediate);
  for (wait_handler& h : waiters) forget_slot(h);
}

void stream_core::capacity_available() {
  serve_write(false);
  serve_send(false);
  if (waiters_[boost::asio::socket_base::wait_write]) serve_waits(false);
}

}  // namespace coverbs::detail
