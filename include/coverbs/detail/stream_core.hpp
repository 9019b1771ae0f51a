// The transport-independent half of a coverbs socket: pending user operations, the queue of
// arrived bytes and messages, end of stream and failure. RDMA and TCP transports implement
// only how bytes move; everything users observe is decided here, once.
#pragma once

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/socket_base.hpp>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>

#include "coverbs/detail/buffer_list.hpp"
#include "coverbs/detail/erased_handler.hpp"
#include "coverbs/detail/fifo.hpp"
#include "coverbs/detail/invoke_handler.hpp"
#include "coverbs/detail/operation_memory.hpp"
#include "coverbs/detail/rethrow_later.hpp"
#include "coverbs/detail/shutdown_service.hpp"
#include "coverbs/error.hpp"
#include "coverbs/remote_buffer.hpp"
#include "coverbs/verbs/memory_region.hpp"

namespace coverbs::detail {

using size_handler = erased_handler<void(error_code, std::size_t)>;
using value_handler = erased_handler<void(error_code, std::uint64_t)>;
using immediate_handler = erased_handler<void(error_code, std::uint32_t)>;
using wait_handler = erased_handler<void(error_code)>;

/// A one-sided operation on the peer's registered memory, as the socket hands it down.
struct one_sided_request {
  enum class kind { read, write, write_with_immediate, fetch_add, compare_swap };
  kind op = kind::read;
  verbs::local_buffer local;  ///< from registered_memory::slice (over TCP, its lkey is the rkey)
  remote_buffer remote;
  std::uint32_t immediate = 0;
  std::uint64_t compare_add = 0;  ///< fetch_add: the addend; compare_swap: the comparand
  std::uint64_t swap = 0;
};
using default_socket_token = boost::asio::default_completion_token_t<boost::asio::any_io_executor>;

/// What a connection fails with where a step of its transport cannot allocate.
inline error_code out_of_memory() noexcept {
  return make_error_code(boost::system::errc::not_enough_memory);
}

class stream_core : public handler_holder {
 public:
  /// Where a transport stops taking the peer's writes with immediate (TCP stops reading, RDMA
  /// re-posting their receives) until some are taken: the peer may send them as often as it
  /// likes, each costing memory here.
  static constexpr std::size_t max_held_immediates = 1u << 16;
  enum class op { read, write, receive, send, wait_read, wait_write, wait_error };

  explicit stream_core(boost::asio::any_io_executor executor)
      : handler_holder(executor), executor_(std::move(executor)) {}
  virtual ~stream_core() = default;
  stream_core(const stream_core&) = delete;
  stream_core& operator=(const stream_core&) = delete;

  const boost::asio::any_io_executor& get_executor() const noexcept { return executor_; }
  /// Where this connection's operations and their handlers are allocated (operation_memory).
  operation_allocator<void> allocator() const noexcept { return operation_allocator<void>(memory_.get()); }

  /// Stream read: at least one byte, or eof once the peer shut down and all was read.
  void read_some(const mutable_buffer_list& buffers, size_handler handler);
  /// Stream write: as many bytes as the transport takes now (at least one), else waits.
  void write_some(const const_buffer_list& buffers, size_handler handler);
  /// write_some (or, where `message`, send_message) for a handler not yet erased: where the
  /// transport takes the bytes at once (no such operation pending, nothing failed or shut,
  /// fewer than min_direct_bytes), the handler is posted as it is, without being stored,
  /// watched for cancellation and ended, which is most of the cost of a small write or send;
  /// otherwise it is erased and goes the way of write_some or send_message.
  /// `handler_executor` is the handler's default executor: the socket's.
  template <bool Message, class Handler>
  void write_unerased(const_buffer_list buffers, Handler&& handler,
                      const boost::asio::any_io_executor& handler_executor) {
    std::size_t n = 0;
    if (transmit_now(buffers, Message, n)) {
      return post_result(handler_executor, std::forward<Handler>(handler), allocator(), error_code(), n);
    }
    size_handler erased(std::forward<Handler>(handler), handler_executor, allocator());
    Message ? send_message(buffers, std::move(erased)) : write_some(buffers, std::move(erased));
  }
  /// Stream bytes received and not yet read: what the next read_some takes without waiting.
  std::size_t available() const noexcept;
  /// Someone waits for what the peer sends (a read, a receive, an immediate, a one-sided
  /// operation's answer) or asks what has come (available): a transport that reads only while
  /// input is wanted starts reading.
  virtual void want_input() {}
  /// Takes the next whole message; a too-small buffer gets message_size and keeps it queued.
  void receive_message(const mutable_buffer_list& buffers, size_handler handler);
  /// Sends `buffers` as one message (at most `max_message_size()` bytes).
  void send_message(const const_buffer_list& buffers, size_handler handler);
  /// Ends every pending user operation with operation_aborted; the connection stays usable.
  void cancel();
  /// Ends one kind of pending operation with operation_aborted (a cancellation slot's target).
  void cancel(op which);

  /// Takes the next immediate a peer's write_with_immediate delivered (queued when none waits).
  void receive_immediate(immediate_handler handler);

  /// Completes once the connection is ready for `which`, as tcp::socket::async_wait: to read
  /// when a read or receive would not wait (bytes, a message, end of stream or a failure are
  /// there), to write when a write takes bytes at once or fails at once, for an error once the
  /// connection has failed. Success in each case, operation_aborted once closed here; one wait
  /// of each kind at a time (in_progress).
  void wait(boost::asio::socket_base::wait_type which, wait_handler handler);
  /// read_some, receive_message, write_some (or, where `message`, send_message) as
  /// non-blocking calls: what they do without waiting, else `would_block` in `ec`
  /// (`in_progress` while an asynchronous one of the same kind is pending). Bytes are copied
  /// out of the caller's memory before the call returns.
  std::size_t read_now(const mutable_buffer_list& buffers, error_code& ec);
  std::size_t receive_now(const mutable_buffer_list& buffers, error_code& ec);
  std::size_t write_now(const_buffer_list buffers, bool message, error_code& ec);

  /// Read, write or write-with-immediate (whose local size start_transfer checked against
  /// the remote buffer): completes with the bytes moved.
  virtual void transfer(const one_sided_request& request, size_handler handler) = 0;
  /// Fetch-and-add or compare-and-swap: completes with the previous remote value.
  virtual void atomic(const one_sided_request& request, value_handler handler) = 0;
  /// Registers `memory` for the peer with `rights`; the key is valid on this connection only.
  /// `lkey` is filled for local use (checked as a device checks it, over TCP too) and `remote`
  /// is the descriptor for the peer.
  /// Returns the handle `deregister_memory` takes (not the rkey: rxe gives every registration
  /// without remote rights rkey 0).
  virtual std::uint32_t register_memory(std::span<std::byte> memory, verbs::access rights,
                               std::uint32_t& lkey, remote_buffer& remote) = 0;
  /// Ends a registration made by `register_memory`.
  virtual void deregister_memory(std::uint32_t handle) noexcept = 0;

  /// The socket's limits (socket_options; 0: none).
  void set_limits(std::size_t max_outstanding_operations, std::size_t max_registered_bytes) noexcept;
  /// `transfer`, unless the local buffer is larger than the remote one (`errc::buffer_too_small`)
  /// or the connection holds its limit of one-sided operations already
  /// (`errc::too_many_operations`): then the handler gets that error (posted) and nothing starts.
  void start_transfer(const one_sided_request& request, size_handler handler);
  /// `atomic`, under the same limit as `start_transfer`.
  void start_atomic(const one_sided_request& request, value_handler handler);
  /// `register_memory`, counted against the registered-bytes limit; past it, `ec` is
  /// `errc::registration_limit` and nothing is registered.
  std::uint32_t register_counted(std::span<std::byte> memory, verbs::access rights, std::uint32_t& lkey,
                                 remote_buffer& remote, error_code& ec);
  /// Ends a registration made by `register_counted` of `size` bytes.
  void deregister_counted(std::uint32_t handle, std::size_t size) noexcept;
  /// Keeps `token` until the socket is closed (an acceptor counts its open connections so).
  void keep_until_closed(std::shared_ptr<void> token) noexcept { open_token_ = std::move(token); }

  /// No more sends from this side: the peer reads eof after what was sent, and later writes
  /// and sends end with broken_pipe, as on a TCP socket.
  void shutdown_sending();
  /// No more input for this side's user, as after SHUT_RD on Linux: reads, receives and waits
  /// for an immediate end with eof once what is held is taken. Nothing tells the peer.
  void shutdown_receiving();
  /// The transport's half of shutdown_sending: tell the peer.
  virtual void shutdown_send() = 0;
  /// Tears the connection down; pending operations end with operation_aborted.
  virtual void close() = 0;
  /// Largest message `send_message` carries.
  virtual std::size_t max_message_size() const noexcept = 0;
  /// Transports send stream writes and messages of at least this many bytes from the
  /// caller's memory where they can: below it, copying into a buffer that several writes share
  /// costs less than a system call or work request per write.
  static constexpr std::size_t min_direct_bytes = 16 * 1024;
  /// Bytes written or sent so far from the caller's own memory, without a copy (RDMA: stream
  /// writes, and with zero_copy_messages messages, from memory registered on this connection;
  /// TCP: writes and messages of `min_direct_bytes` or more).
  std::uint64_t direct_bytes_written() const noexcept { return direct_total_; }
  /// Bytes read so far from the wire straight into a waiting reader's buffers (TCP only: RDMA
  /// receives into its pooled buffers).
  std::uint64_t direct_bytes_read() const noexcept { return direct_read_total_; }

 protected:
  struct segment {
    const std::byte* data;
    std::size_t size;
    std::uint32_t tag;  ///< handed back to `release` when consumed
  };

  // What the transport reports (on the executor).
  void deliver_bytes(const segment& s);
  void deliver_message(const segment& s);
  /// The input ended (the peer's end of stream, or shutdown_receiving's, which `defer`s).
  void deliver_end_of_stream(bool defer = false);
  /// A peer's write_with_immediate landed; its data is visible.
  void deliver_immediate(std::uint32_t immediate);
  /// `defer` posts the handlers: required when called from a user's call such as close(), whose
  /// caller may be destroyed by a handler that ran inside it (Asio never does that either).
  void deliver_failure(error_code ec, bool defer = false);
  /// The transport can take more: retries waiting writes and sends.
  void capacity_available();
  /// A write (`message` false) or message starts, after what the transport was asked before.
  virtual void payload_started(bool /*message*/) noexcept {}
  /// Immediates delivered that no one has taken yet.
  std::size_t immediates_held() const noexcept { return immediates_.size(); }
  /// A queued immediate was taken: a transport that stopped reading for them may go on.
  virtual void immediate_taken() {}
  bool failed() const noexcept { return failure_.has_value(); }
  /// Completes `handler` (a size_handler, value_handler or immediate_handler) with `results`:
  /// posted to the stream's executor when `defer`, else invoked here. Invoking an erased
  /// handler hands over to the user's handler's associated executor (inline where that is this
  /// thread's), so dispatching it through the stream's executor first would only repeat that
  /// check, at a sixth of a receive's instructions. A handler invoked here that throws does
  /// not unwind the transport's call, which has work left after it (returning a buffer,
  /// passing on credits, ending a second write, reading on): see rethrow_later.
  template <class Handler, class... Results>
  void hand_over(Handler&& handler, bool defer, Results... results) const {
    if (defer) {
      using call = posted_call<std::decay_t<Handler>, Results...>;
      return post_unerased(executor_, call{std::forward<Handler>(handler), {results...}});
    }
    invoke_or_rethrow_later(executor_, std::forward<Handler>(handler), results...);
  }
  /// Whether a user's read, receive, wait for an immediate, or wait to read or for an error
  /// is pending (over TCP both are only seen by reading).
  bool awaiting_input() const noexcept {
    return read_ || receive_ || immediate_waiter_ || waiters_[boost::asio::socket_base::wait_read] ||
           waiters_[boost::asio::socket_base::wait_error];
  }
  /// For the transport's destroy_handlers: destroys the pending user operations, invoking none.
  void destroy_pending() noexcept;
  /// The buffers of a read waiting for bytes (none are queued then), which the transport may
  /// fill straight from the wire and then end with `complete_waiting_read`; null if none waits.
  mutable_buffer_list* waiting_read() noexcept {
    return read_ && !failure_ && !end_of_stream_ ? &read_->buffers : nullptr;
  }
  /// Ends the waiting read with the `n` bytes the transport put into its buffers, `uncopied`
  /// of them read straight from the wire.
  void complete_waiting_read(std::size_t n, std::size_t uncopied);
  /// The buffers of a receive waiting for a message (none is queued then), which the
  /// transport may fill with the next message and then end with `complete_waiting_receive`;
  /// null if none waits.
  const mutable_buffer_list* waiting_receive() const noexcept {
    return receive_ && !failure_ && !end_of_stream_ ? &receive_->buffers : nullptr;
  }
  /// Ends the waiting receive with the `n`-byte message the transport put into its buffers,
  /// `uncopied` bytes of it read straight from the wire.
  void complete_waiting_receive(std::size_t n, std::size_t uncopied);

  // What the transport provides.
  /// A segment was consumed; its memory may be reused.
  virtual void release(std::uint32_t tag) = 0;
  /// Whether `transmit` would take bytes now (a credit, a buffer, room in the send queue).
  virtual bool writable() const noexcept = 0;
  /// Sends what it can of `buffers` now and returns how many bytes it took (0: none possible).
  /// For a message it takes all or nothing.
  virtual std::size_t transmit(const_buffer_list& buffers, bool message) = 0;
  /// Sends the first bytes of a stream write (or, where `message`, a whole message) from the
  /// caller's memory, without copying, and returns how many it took; the transport then calls
  /// `direct_done(message, ec)` once it no longer reads that memory. 0: it will not, and
  /// `transmit` copies instead.
  virtual std::size_t transmit_direct(const const_buffer_list&, bool /*message*/) { return 0; }
  /// Ends the write (or send) `transmit_direct` took: its bytes were handed on (or the
  /// connection failed).
  void direct_done(bool message, error_code ec);
  /// Whether the transport holds a write (or send) `transmit_direct` took and has not ended.
  bool direct_pending(bool message) const noexcept { return direct_bytes_[message] > 0; }

 private:
  struct pending_read {
    mutable_buffer_list buffers;
    size_handler handler;
  };
  struct pending_write {
    const_buffer_list buffers;
    size_handler handler;
  };
  /// For write_unerased: whether the transport took the write or message now (`n`: what it
  /// completes with); false leaves `buffers` untouched.
  bool transmit_now(const_buffer_list& buffers, bool message, std::size_t& n);
  void serve_read(bool defer);
  void serve_receive(bool defer);
  void serve_write(bool defer);
  void serve_send(bool defer);
  /// Moves queued stream bytes into `buffers`: how many, and in `used_up` the tag of the last
  /// segment consumed whole, which the caller releases (those before it are released here).
  std::size_t take_bytes(mutable_buffer_list& buffers, std::optional<std::uint32_t>& used_up);
  bool ready(boost::asio::socket_base::wait_type which) const noexcept;
  /// Completes the waits that are ready (all of them once failed).
  void serve_waits(bool defer);
  void end_wait(boost::asio::socket_base::wait_type which, error_code ec, bool defer);
  /// Disconnects `handler`'s cancellation slot (its canceller points at this stream) and hands
  /// it over with `ec` and `value`.
  template <class Handler, class Value>
  void complete(Handler& handler, error_code ec, Value value, bool defer);
  template <class Pending>
  void watch(Pending& pending, op which);
  /// Completes the pending operation (read_, write_, receive_ or send_) and clears it; then
  /// releases `used_up`, a segment's tag the operation consumed the last of.
  template <class Pending>
  void end_operation(std::optional<Pending>& pending, error_code ec, std::size_t n, bool defer,
                     std::optional<std::uint32_t> used_up = std::nullopt);
  error_code read_error() const;
  error_code write_error() const;
  /// What a write or send started now ends with before any byte moves: broken_pipe after
  /// shutdown(send), write_error() after a failure, else nothing.
  error_code sending_refusal() const;
  void fail_immediate_waiter(error_code ec, bool defer);

  boost::asio::any_io_executor executor_;
  operation_memory_ptr memory_{new operation_memory};
  fifo<segment> bytes_;
  std::size_t front_offset_ = 0;
  fifo<segment> messages_;
  bool end_of_stream_ = false;
  bool sending_shut_ = false;
  std::optional<error_code> failure_;
  std::optional<pending_read> read_, receive_;
  std::optional<pending_write> write_, send_;
  /// Bytes of write_ (and of send_) that the transport sends from the caller's memory; while
  /// it does, the operation cannot be recalled (nor completed by a failure) and ends in
  /// direct_done.
  std::array<std::size_t, 2> direct_bytes_{};
  std::uint64_t direct_total_ = 0, direct_read_total_ = 0;
  fifo<std::uint32_t> immediates_;
  std::optional<immediate_handler> immediate_waiter_;
  std::array<wait_handler, 3> waiters_;  ///< by wait_type: read, write, error
  std::size_t max_outstanding_ = 0, max_registered_ = 0, registered_ = 0;
  /// One-sided operations not yet completed; shared with their handlers, which may outlive this.
  std::shared_ptr<std::size_t> outstanding_;
  std::shared_ptr<void> open_token_;
};

}  // namespace coverbs::detail
