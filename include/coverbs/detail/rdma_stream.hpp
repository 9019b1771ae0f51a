// The RDMA transport of a socket: credit-based flow control over pools of pre-registered
// buffers, so no memory is registered per operation and a sender never meets an empty
// receive queue (no receiver-not-ready retries).
#pragma once

#include <array>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "coverbs/async_queue_pair.hpp"
#include "coverbs/detail/fifo.hpp"
#include "coverbs/detail/stream_core.hpp"
#include "coverbs/detail/initiate.hpp"
#include "coverbs/detail/wr_operation.hpp"
#include "coverbs/verbs/memory_region.hpp"

namespace coverbs::detail {

/// One side's receive pool; each side learns the other's at connection time.
struct stream_geometry {
  std::uint16_t buffers = 32;
  std::uint32_t buffer_size = 64 * 1024;
};

/// Every stream message is a SEND with immediate data laid out like this.
namespace stream_imm {
constexpr std::uint32_t credits_mask = 0xffff;   ///< receive buffers the sender re-posted
constexpr std::uint32_t message_bit = 1u << 30;  ///< a boundary-keeping message, not stream bytes
constexpr std::uint32_t fin_bit = 1u << 31;      ///< the sender shut down its sending side
}  // namespace stream_imm

class rdma_stream final : public stream_core, public std::enable_shared_from_this<rdma_stream> {
 public:
  /// Receive buffers each side keeps beyond its data pool for zero-length control messages
  /// (credit reports, FIN). Their credits are implicit: the receiver re-posts them at once,
  /// so the sender counts one back when its send completes. Reporting them explicitly would
  /// need a message per report, and two peers would then report to each other for ever.
  static constexpr std::uint32_t control_slots = 4;

  /// `resources` keeps alive what the QP depends on (PD, completion service, cm id) until the
  /// last flush completion has been seen. Call `start()` before the peer may send and
  /// `set_peer()` once its pool is known; nothing is sent before that.
  rdma_stream(std::shared_ptr<void> resources, std::unique_ptr<async_queue_pair> qp,
              const verbs::protection_domain& pd, stream_geometry local);
  ~rdma_stream() override;

  /// Posts the whole receive pool.
  void start();
  /// Sizes the send pool after the peer's receive pool and opens the credit window.
  void set_peer(stream_geometry peer);
  /// How to tell the peer that the connection is over (rdma_cm: disconnect), once close() has
  /// let the last send finish or as soon as the connection fails here; without one the QP is
  /// simply moved to ERROR.
  void on_close(std::function<void()> disconnect) { disconnect_ = std::move(disconnect); }
  /// Whether large messages from registered memory go out uncopied (see
  /// socket_options::zero_copy_messages).
  void set_zero_copy_messages(bool on) noexcept { zero_copy_messages_ = on; }
  /// How long close() waits for what it still sends before it drops the connection (see
  /// socket_options::close_timeout).
  void set_close_timeout(std::chrono::milliseconds timeout) noexcept { close_timeout_ = timeout; }
  void shutdown_send() override;
  void close() override;
  std::size_t max_message_size() const noexcept override { return peer_.buffer_size; }
  /// What the stream keeps alive for its QP (see rdma_resources).
  const std::shared_ptr<void>& resources() const noexcept { return resources_; }
  /// The queue pair, for one-sided operations on the same connection.
  async_queue_pair& queue_pair() noexcept { return *qp_; }
  /// Reports that the connection manager saw the peer leave (rdma_cm DISCONNECTED).
  void peer_disconnected();
  void transfer(const one_sided_request& request, size_handler handler) override;
  void atomic(const one_sided_request& request, value_handler handler) override;
  std::uint32_t register_memory(std::span<std::byte> memory, verbs::access rights, std::uint32_t& lkey,
                       remote_buffer& remote) override;
  void deregister_memory(std::uint32_t handle) noexcept override;
  /// Work requests in flight are the completion service's to destroy (see completion_engine).
  void destroy_handlers() noexcept override;
  /// The sizes of the operations its sends and receives allocate from its operation_memory
  /// (tests make one fail).
  static std::size_t send_operation_size() noexcept;
  static std::size_t receive_operation_size() noexcept;
  /// And the size of a write with immediate's operation.
  static std::size_t immediate_operation_size() noexcept;

 private:
  struct receive_done;
  struct send_done;
  template <class Handler>
  struct counted_done;
  struct immediate_done;
  void release(std::uint32_t tag) override;
  void immediate_taken() override;
  bool writable() const noexcept override {
    return !free_send_.empty() && credits_ >= 1 && !fin_wanted_ && !closed_ && !local_failure_;
  }
  std::size_t transmit(const_buffer_list& buffers, bool message) override;
  std::size_t transmit_direct(const const_buffer_list& buffers, bool message) override;
  /// The fewest registered bytes a write must start with to go out uncopied.
  std::size_t direct_threshold() const noexcept;
  /// The pieces at the front of a write or message, each with the region that holds it (or null).
  struct located_pieces {
    std::array<boost::asio::const_buffer, const_buffer_list::capacity> pieces;
    std::array<const verbs::memory_region*, const_buffer_list::capacity> regions;
    std::size_t count;
  };
  located_pieces locate(const const_buffer_list& buffers) const noexcept;
  /// transmit_direct for a message: one SEND from the region that holds all of it, if one does.
  std::size_t transmit_direct_message(const const_buffer_list& buffers);
  /// One SEND of `n` bytes at `data`, in `region`, counted as a direct write's or message's;
  /// whether it was posted.
  bool post_direct(const std::byte* data, std::uint32_t n, const verbs::memory_region& region, bool message);
  /// Bytes of a stream write before the next piece that transmit_direct would send.
  std::size_t copyable_prefix(const const_buffer_list& buffers) const noexcept;
  /// The region registered on this connection that holds all of `bytes`, if one does.
  const verbs::memory_region* region_holding(boost::asio::const_buffer bytes) const noexcept;
  /// Whether the receive was posted: its operation could be allocated (see fail_soon).
  bool post_receive(std::uint32_t index);
  /// `index`: the send-pool slot the message takes (no_buffer: a control message), given back
  /// where the send could not be posted; `direct`: `data` is the caller's memory, part of a
  /// write that transmit_direct took. Whether the send was posted (see fail_soon).
  bool post_send(std::uint32_t index, verbs::local_buffer data, std::uint32_t flags, bool direct = false);
  /// A post's operation could not be allocated: the connection fails with `ec` (once). Nothing
  /// was counted or posted for it; the QP goes to error at once, so nothing posted after a gap
  /// reaches the peer, and its flushes deliver `ec` from their completions (failing from
  /// here would end the very operation that is posting).
  void fail_soon(error_code ec) noexcept;
  /// Whether the send about to take `index`, of `bytes` bytes, raises a completion of its own.
  bool signal_send(std::uint32_t index, bool direct, std::size_t bytes) const noexcept;
  /// After close(): sends what close() wants sent when it can, and closes the QP when no send
  /// is in flight.
  void end_after_close();
  /// Posts the FIN if it is wanted, not sent yet, and a control slot of the peer's is free.
  void send_fin();
  /// Whether set_peer() ran: the connection was established and the handshake accepted.
  bool connected() const noexcept { return send_mr_.has_value(); }
  /// Starts a one-sided operation of this side's with `start(h)`, `h` being `handler` counted in
  /// one_sided_in_flight_ until it runs. Where its operation cannot be allocated (bad_alloc),
  /// nothing was posted or counted and `handler` comes back, untouched: the start moves it
  /// only into an allocated operation.
  template <class Handler, class Start>
  std::optional<Handler> start_counted(Handler handler, Start start);
  /// start_counted for an operation the caller started: where it cannot be allocated, throws
  /// bad_alloc (as any initiating function that cannot allocate) and `handler` is not called.
  template <class Handler, class Start>
  void start_counted_or_throw(Handler handler, Start start);
  /// Whether `start` allocated (and posted) its operation; where it could not (bad_alloc), the
  /// connection fails (fail_soon).
  template <class Start>
  bool started(Start start);
  /// Past close() or a failure, a local one included: nothing more of the stream's is posted.
  bool posting_stopped() const noexcept { return closed_ || failed() || local_failure_; }
  void on_receive(std::uint32_t index, error_code ec, received r);
  void on_send(std::uint32_t index, error_code ec, bool direct, bool message);
  /// After each completion of the stream's own: a failure fail_soon left to the flushes is
  /// delivered here once nothing is posted (the last ones completed with success).
  void deliver_local_failure();
  void send_control_messages();
  void finish_close();
  /// Drops the connection if close() has not finished within close_timeout_.
  void start_close_timer();
  /// A free send-pool slot (the caller checked there is one): every stream send holds one.
  std::uint32_t take_send_slot() noexcept;

  struct waiting_immediate {
    one_sided_request request;
    size_handler handler;      ///< empty once withdrawn: passed over when its turn comes
    std::uint64_t number = 0;  ///< its place among those that ever waited, from 1
  };
  /// A cancel of any kind withdraws a write with immediate that waits for a credit: it is not
  /// posted yet, as a work request waiting for a send-queue slot.
  void withdraw_immediate(std::uint64_t number);
  /// Lets a cancel of `w`'s handler withdraw it (see withdraw_immediate).
  void watch_withdrawal(const waiting_immediate& w);
  /// `handler` comes back where the operation cannot be allocated (see start_counted).
  std::optional<size_handler> start_write_with_immediate(const one_sided_request& request,
                                                         size_handler handler);
  /// A write with immediate ended without taking the peer's receive: its credit is free again.
  void credit_unused();
  void start_waiting_immediates();
  void fail(error_code ec, bool defer = false);
  /// Tells the peer, once (see on_close).
  void disconnect();

  std::shared_ptr<void> resources_;
  const verbs::protection_domain& pd_;
  std::unique_ptr<async_queue_pair> qp_;
  stream_geometry local_, peer_;
  // Left uninitialised (the device writes them before anyone reads): zero-filling 4 MiB per
  // side was most of the time a connection took to set up.
  std::unique_ptr<std::byte[]> receive_memory_, send_memory_;
  verbs::memory_region receive_mr_;
  std::optional<verbs::memory_region> send_mr_;
  std::function<void()> disconnect_;
  std::chrono::milliseconds close_timeout_{10000};
  std::optional<boost::asio::steady_timer> close_timer_;  ///< from close() until finish_close()
  std::vector<std::uint32_t> free_send_;
  std::uint32_t credits_ = 0;           ///< peer receive buffers we may still fill
  std::uint32_t credits_to_return_ = 0;  ///< our re-posted buffers not yet reported
  std::uint32_t control_credits_ = control_slots;
  bool fin_wanted_ = false, fin_sent_ = false, closed_ = false, close_finished_ = false;
  bool zero_copy_messages_ = false;
  bool unsignalled_tail_ = false;  ///< the last send posted raises no completion of its own
  bool flush_wanted_ = false;      ///< close() waits for such sends
  std::uint32_t one_sided_in_flight_ = 0;  ///< this side's, started and not yet completed
  error_code local_failure_;               ///< see fail_soon
  std::uint32_t receives_posted_ = 0, sends_posted_ = 0;
  std::unordered_map<std::uint32_t, std::unique_ptr<verbs::memory_region>> regions_;
  std::multimap<const std::byte*, const verbs::memory_region*> regions_by_address_;
  /// Sends in flight of the direct write ([false]) and the direct message ([true]), and the
  /// first error one of them met.
  std::array<std::uint32_t, 2> direct_sends_{};
  std::array<error_code, 2> direct_error_{};
  /// Regions deregistered while a direct send may still read them: freed when none is left.
  std::vector<std::unique_ptr<verbs::memory_region>> retired_regions_;
  fifo<waiting_immediate> waiting_immediates_;  ///< each needs a peer receive credit
  std::uint64_t immediates_waited_ = 0;         ///< writes with immediate that ever waited
  std::uint64_t fin_after_immediate_ = 0;       ///< the last of them started before shutdown_send
  /// Receives that writes with immediate took while max_held_immediates were held: re-posted
  /// (and their credits returned) as the application takes immediates.
  std::vector<std::uint32_t> held_receives_;
};

}  // namespace coverbs::detail
