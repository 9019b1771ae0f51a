// Readiness: a connection's waits (tcp::socket::async_wait) and its non-blocking calls, which
// ask the same question: would a read, receive, write or send go ahead now?
#include <boost/asio/error.hpp>

#include "coverbs/detail/stream_core.hpp"

namespace coverbs::detail {

namespace error = boost::asio::error;
using wait_type = boost::asio::socket_base::wait_type;

bool stream_core::ready(wait_type which) const noexcept {
  switch (which) {
    case boost::asio::socket_base::wait_read:
      return !bytes_.empty() || !messages_.empty() || end_of_stream_ || failure_;
    case boost::asio::socket_base::wait_write: return sending_refusal() || writable();
    case boost::asio::socket_base::wait_error: return failure_.has_value();
  }
  return false;
}

void stream_core::wait(wait_type which, wait_handler handler) {
  if (which < 0 || which >= static_cast<int>(waiters_.size())) {
    return hand_over(std::move(handler), true, error_code(error::invalid_argument));
  }
  if (waiters_[which]) return hand_over(std::move(handler), true, error_code(error::in_progress));
  waiters_[which] = std::move(handler);
  auto slot = boost::asio::get_associated_cancellation_slot(waiters_[which]);
  if (slot.is_connected()) {
    slot.assign(
        [this, which](boost::asio::cancellation_type) { end_wait(which, error::operation_aborted, true); });
  }
  serve_waits(true);
  // Over TCP bytes, the end of the stream and a reset alike are seen by reading.
  if (which != boost::asio::socket_base::wait_write && waiters_[which]) want_input();
}

void stream_core::serve_waits(bool defer) {
  // Closed here: a wait ends as an operation would, aborted; a failure of the connection
  // itself makes it readable and writable (the next call reports the error), as with TCP.
  const bool closed = failure_ == error_code(error::operation_aborted);
  for (const wait_type which : {boost::asio::socket_base::wait_read, boost::asio::socket_base::wait_write,
                                boost::asio::socket_base::wait_error}) {
    if (waiters_[which] && ready(which)) {
      end_wait(which, closed ? error_code(error::operation_aborted) : error_code(), defer);
    }
  }
}

void stream_core::end_wait(wait_type which, error_code ec, bool defer) {
  if (!waiters_[which]) return;
  wait_handler h = std::move(waiters_[which]);
  auto slot = boost::asio::get_associated_cancellation_slot(h);
  if (slot.is_connected()) slot.clear();
  hand_over(std::move(h), defer, ec);
}

std::size_t stream_core::read_now(const mutable_buffer_list& buffers, error_code& ec) {
  ec = {};
  if (read_) ec = error::in_progress;
  if (ec || buffers.empty()) return 0;
  mutable_buffer_list into = buffers;
  std::optional<std::uint32_t> used_up;
  const std::size_t n = take_bytes(into, used_up);
  if (used_up) release(*used_up);
  if (n > 0) return n;
  if (end_of_stream_ || failure_) {
    ec = read_error();
  } else {
    ec = error::would_block;
    want_input();  // so that what arrives is there for the next call
  }
  return 0;
}

std::size_t stream_core::receive_now(const mutable_buffer_list& buffers, error_code& ec) {
  ec = {};
  if (receive_) {
    ec = error::in_progress;
  } else if (buffers.truncated()) {
    ec = error::invalid_argument;  // as async_receive's
  } else if (messages_.empty()) {
    ec = end_of_stream_ || failure_ ? read_error() : error_code(error::would_block);
    if (ec == error::would_block) want_input();
  } else if (buffers.bytes() < messages_.front().size) {
    ec = error::message_size;  // stays queued, as for async_receive
  }
  if (ec) return 0;
  const segment s = messages_.front();
  mutable_buffer_list into = buffers;
  into.put(s.data, s.size);
  messages_.pop_front();
  release(s.tag);
  return s.size;
}

std::size_t stream_core::write_now(const_buffer_list buffers, bool message, error_code& ec) {
  const std::size_t size = buffers.bytes();
  const bool pending = message ? send_.has_value() : write_.has_value();
  // Writing no bytes to a stream does nothing, as on a TCP socket, even shut down or failed.
  if (!message && size == 0 && !pending) return ec = {}, 0;
  ec = pending ? error_code(error::in_progress) : sending_refusal();
  if (!ec && message && buffers.truncated()) ec = error::invalid_argument;  // as async_send's
  if (!ec && message && size > max_message_size()) ec = error::message_size;
  if (ec) return 0;
  // It starts now: after the one-sided requests started before it, as an asynchronous one
  // does (a retry after would_block starts again, behind those started meanwhile).
  payload_started(message);
  // transmit copies (the caller's memory is free on return); it takes none without a credit,
  // a buffer or room in the send queue.
  const std::size_t n = transmit(buffers, message);
  if (n == 0) ec = error::would_block;
  return n == 0 ? 0 : message ? size : n;
}

}  // namespace coverbs::detail
