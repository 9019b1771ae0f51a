// The TCP transport of a socket: the framed protocol of docs/tcp-fallback-protocol.md on an
// Asio TCP socket, feeding the same stream_core as RDMA.
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "coverbs/detail/fifo.hpp"
#include "coverbs/detail/stream_core.hpp"
#include "coverbs/wire/frame.hpp"
#include "coverbs/wire/region_table.hpp"

namespace coverbs::detail {

class tcp_stream final : public stream_core, public std::enable_shared_from_this<tcp_stream> {
 public:
  /// Request frames a requester leaves unanswered at most (the protocol's rule, like an RDMA
  /// initiator depth).
  static constexpr std::uint32_t max_unanswered = 16;
  /// Responses queued before reading the peer's requests pauses. A peer that keeps to its
  /// window has no more waiting than the window, each counted out as its bytes leave; but a
  /// response that left may reach the peer, and bring its next request, before this side sees
  /// the write's completion: one more then pauses reading only until it does. Only a peer that
  /// ignores the window queues more, and TCP holds it back once this side stops reading.
  static constexpr std::size_t max_queued_responses = max_unanswered + 1;
  /// Frames gathered into one write at most (a direct one counts as one frame).
  static constexpr std::size_t max_gathered_frames = 32;

  /// Takes a connected socket; `max_message` bounds the messages this side sends. On the side
  /// that `connecting`, a connection that ends before the peer's hello was refused: operations
  /// end with connection_refused (an acceptor at its limit resets connections so).
  tcp_stream(boost::asio::ip::tcp::socket socket, std::size_t max_message, bool connecting = false);
  ~tcp_stream() override;

  /// Sends hello and starts reading frames.
  void start();
  void shutdown_send() override;
  /// As closing a TCP socket: the frames already queued (what writes and sends reported taken)
  /// still go out, then the end of the stream, for up to the close timeout.
  void close() override;
  /// How long close() lets queued frames reach the peer (socket_options::close_timeout).
  void set_close_timeout(std::chrono::milliseconds timeout) noexcept { close_timeout_ = timeout; }
  /// Messages are single frames, so the peer's payload limit bounds them too.
  std::size_t max_message_size() const noexcept override {
    return std::min<std::size_t>(max_message_, limit_ != 0 ? limit_ : wire::max_payload_size);
  }
  /// The regions a peer may reach with one-sided operations.
  wire::region_table& regions() noexcept { return regions_; }
  boost::asio::ip::tcp::socket& socket() noexcept { return socket_; }
  void transfer(const one_sided_request& request, size_handler handler) override;
  void atomic(const one_sided_request& request, value_handler handler) override;
  std::uint32_t register_memory(std::span<std::byte> memory, verbs::access rights, std::uint32_t& lkey,
                                remote_buffer& remote) override;
  void deregister_memory(std::uint32_t handle) noexcept override;
  void destroy_handlers() noexcept override;
  void want_input() noexcept override;
  /// Read system calls that brought bytes, for tests and diagnostics.
  std::uint64_t socket_reads() const noexcept { return socket_reads_; }

 private:
  // A user's one-sided operation, from its start until its last response (or, withdrawn, until
  // it is the oldest).
  struct one_sided_op {
    one_sided_request request;
    size_handler on_size;      // transfers
    value_handler on_value;    // atomics
    std::uint32_t frames = 0;  // frames it needs; known once the payload limit is
    std::uint32_t sent = 0;
    std::uint32_t answered = 0;
    /// Its local buffer failed the lkey check (local_access): nothing of it or after it goes
    /// out, and it fails the connection once the frames before it are answered.
    error_code local_error{};
    std::uint64_t number = 0;  ///< its place among the operations started, from 1
    /// Cancelled before any frame of it went out, as a work request withdrawn while it waits for
    /// a slot: its handler has run, and it stays in its place, passed over without frames, so
    /// that the payloads and close frame ordered after it are not held back nor let out early.
    bool withdrawn = false;
    /// A terminal cancel came with frames of it out: the connection fails, it ends aborted.
    bool cancelled = false;
  };
  struct outgoing_frame {
    std::vector<std::byte> bytes;
    bool response = false;  ///< an answer to the peer, until it is counted out (on_write_some)
    /// A header whose payload is the caller's memory: direct_payload_[direct_message], which
    /// that side's transmit_direct holds until the frame is written.
    bool direct = false;
    bool direct_message = false;
  };

  void release(std::uint32_t tag) override;
  void immediate_taken() override;
  /// The end of close(): shuts the socket down and closes it, whatever is still queued.
  void finish_close();
  /// Closed, and not lingering: nothing more is written.
  bool sending_stopped() const noexcept { return closed_ && !lingering_; }
  /// Both kinds: a non-blocking send that found its requests unsent waits with wait_write too.
  bool writable() const noexcept override { return takes_payload(false) && takes_payload(true); }
  void payload_started(bool message) noexcept override { payload_after_[message] = requests_started_; }
  std::size_t transmit(const_buffer_list& buffers, bool message) override;
  std::size_t transmit_direct(const const_buffer_list& buffers, bool message) override;

  // Receiving.
  void read_frames();
  void read_frames_anew();
  void resume_reading();
  void read_frames_later();
  void fill_inbox();
  bool input_wanted() const noexcept;
  bool read_after_large_frame();
  void return_to_inbox(const mutable_buffer_list& buffers, std::size_t from, std::size_t count);
  void on_inbox(error_code ec, std::size_t n);
  bool large_payload_in_hand() const noexcept;
  bool decode_inbox_header();
  error_code check_sequence() const;
  error_code check_response() const;
  bool take_payload();
  bool take_data();
  bool read_data_directly(mutable_buffer_list& reader, std::size_t pre_read = 0);
  bool next_data_frame();
  const mutable_buffer_list* receiver_for_message() const noexcept;
  bool receive_message_directly(const mutable_buffer_list& receiver, std::size_t pre_read = 0);
  void wait_readable();
  std::size_t read_past_inbox(std::span<boost::asio::mutable_buffer> into, std::size_t pieces,
                              std::size_t wanted, std::size_t next, error_code& ec);
  bool take_segment(std::size_t size);
  bool fill_payload(std::span<std::byte> into);
  void on_payload(error_code ec);
  void handle_frame();
  void on_hello();
  void on_stream_frame();
  void on_close();

  // Responder.
  void start_write();
  bool take_write();
  void answer_write(error_code ec);
  void answer_read();
  void answer_atomic();
  void refuse(error_code ec);

  // Requester.
  void start_operation(one_sided_op op);
  /// Points `op`'s cancellation slot (if its handler has one) at cancel_operation.
  void watch(const one_sided_op& op);
  /// Over RDMA a request still waiting for a send-queue slot is withdrawn by any cancel, and a
  /// posted one only by a terminal cancel, which puts the queue pair in error: the same here,
  /// with "posted" meaning a frame of it went out.
  void cancel_operation(std::uint64_t number, boost::asio::cancellation_type type);
  void send_requests();
  /// Withdrawn operations that send_requests has passed over leave once they are the oldest.
  void drop_withdrawn();
  void requests_sent_on();
  void send_request_frame(one_sided_op& op);
  wire::frame_header request_header(const one_sided_op& op, std::uint64_t offset);
  void on_response();
  std::uint32_t part_length(const one_sided_op& op, std::uint32_t part) const noexcept;
  void finish(one_sided_op& op, error_code ec, std::uint64_t value, bool defer);
  /// The checks a device makes of a request's local buffer before its part `part` (0-based)
  /// touches it: the lkey names one of this connection's regions, holding those bytes.
  error_code local_access(const one_sided_op& op, std::uint32_t part) const noexcept;
  /// If the oldest operation failed its local check and nothing of it is unanswered, fails the
  /// connection as a queue pair in error after a local protection error.
  void fail_on_local_error();

  // Sending.
  std::vector<std::byte> take_frame(std::size_t payload);
  /// Queues a frame without payload behind what is queued (hello, close).
  void send_frame(const wire::frame_header& h);
  /// Queues a header whose payload is `payload`, the caller's memory (a write's or a message's).
  std::size_t send_direct_frame(const wire::frame_header& h, const const_buffer_list& payload);
  /// Writes `h` into the frame's first bytes and queues it, writing now if nothing is.
  void queue_frame(const wire::frame_header& h, outgoing_frame f);
  /// Sends a frame of `h` and the first `h.payload_length` bytes of `payload` (which it
  /// consumes), leaving no reference to the caller's memory; a `response` counts against the
  /// peer's unread responses until TCP has taken it whole.
  void send_copied(const wire::frame_header& h, const_buffer_list& payload, bool response = false);
  /// A response frame without payload, as send_copied sends it.
  void send_response(const wire::frame_header& h);
  /// Queues bytes that are already on the wire's format, writing now if nothing is queued.
  void queue_bytes(outgoing_frame f);
  /// With nothing queued or being written, writes `header` and `n` bytes of `payload` by one
  /// non-blocking system call, as an Asio socket's write does; returns how much it took.
  std::size_t write_at_once(std::span<const std::byte> header, const const_buffer_list& payload,
                            std::size_t n);
  /// Whether stream data or a message can be queued now (the peer's limits known, room left).
  bool takes_payload(bool message) const noexcept;
  void send_close_when_due();
  void write_next();
  /// Writes what is left of gather_ (a system call may take only part of it).
  void write_gathered();
  void on_write_some(error_code ec, std::size_t n);
  void read_payload();
  void on_payload_part(error_code ec, std::size_t n);
  void on_written(error_code ec);

  // Ends the connection: stream operations see `stream_ec`, the oldest outstanding operation
  // `first`, every other one `rest`; a `tell_peer` other than ok goes out in a close frame.
  // `defer` posts the handlers (from a user's call, as deliver_failure's).
  void fail(error_code stream_ec, error_code first, error_code rest, wire::frame_status tell_peer,
            bool defer = false);
  /// Closes the socket so that the peer sees a reset: nothing queued goes out after a gap.
  void reset_socket() noexcept;
  /// Runs a step of the stream's own from the scheduler (a completion, a posted turn): where it
  /// cannot allocate, the connection fails (fail_for_memory). Whether it ran whole.
  template <class Step>
  bool guarded(Step&& step) {
    return run_guarded(std::forward<Step>(step), false);
  }
  /// guarded() for a step inside a user's call (an initiating function, a cancel), where no
  /// handler may complete: the failure's are posted.
  template <class Step>
  bool guarded_in_call(Step&& step) {
    return run_guarded(std::forward<Step>(step), true);
  }
  template <class Step>
  bool run_guarded(Step&& step, bool inside_user_call) {
    try {
      std::forward<Step>(step)();
    } catch (const std::bad_alloc&) {
      fail_for_memory(inside_user_call);
      return false;
    }
    return true;
  }
  /// A step could not allocate, perhaps halfway through changing what the connection holds (a
  /// header taken without its payload, part of a frame written): nothing of it can be trusted.
  /// The socket is reset at once, and every operation ends as in a failed connection (reads
  /// and receives with not_enough_memory, writes broken_pipe, one-sided operations flushed),
  /// from here or, `inside_user_call`, from a posted turn.
  void fail_for_memory(bool inside_user_call) noexcept;
  /// fail_for_memory's end of the operations.
  void end_for_memory() noexcept;
  /// Ends the direct writes (write, message) still pending with `ec`.
  void end_direct_writes(error_code ec);
  fifo<one_sided_op> take_operations();
  /// Ends `ops` (taken out by take_operations): the oldest with `first`, the rest with `rest`.
  void finish_all(fifo<one_sided_op>& ops, error_code first, error_code rest, bool defer);
  void protocol_error();
  void connection_lost(error_code ec);
  /// A free slot (or a new one) holding `size` bytes.
  std::uint32_t take_slot(std::size_t size);
  /// The slot reads land in, with the bytes it keeps moved to its front and the rest free: a
  /// fresh one if segments hold this one.
  std::span<std::byte> writable_inbox();
  std::span<std::byte> inbox() noexcept { return slots_[inbox_slot_]; }

  boost::asio::ip::tcp::socket socket_;
  std::size_t max_message_;
  std::uint32_t limit_ = 0;  ///< negotiated payload limit; 0 until the peer's hello
  /// Payloads of received data and messages, and the inbox: bytes read past the frame in hand
  /// (the next frames, or their start, read by the same call). A payload that came whole in
  /// the inbox is handed out from there; the inbox then moves to another slot for the next
  /// read while the segments in it are held.
  std::vector<std::vector<std::byte>> slots_;
  std::vector<std::uint32_t> slot_users_;  ///< segments handed out from each slot
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t inbox_slot_;
  std::size_t inbox_begin_ = 0, inbox_end_ = 0;
  std::span<std::byte> payload_;  ///< the part of the payload being read that has not arrived
  wire::frame_header header_;
  std::size_t data_left_ = 0;       ///< bytes of the data frame in hand not yet taken
  bool yielded_ = false;            ///< take_data waited a turn for a reader
  bool write_in_hand_ = false;      ///< a write frame's payload is being taken (take_write)
  std::size_t write_done_ = 0;      ///< bytes of that payload taken
  error_code write_error_;          ///< why that write is refused, if it is
  segment payload_segment_{};       ///< the payload of the data or message frame in hand
  std::vector<std::byte> scratch_;  ///< read responses' payloads; refused writes' (dropped)
  std::size_t held_bytes_ = 0;
  bool read_paused_ = false, reading_ = false;
  /// Reading stopped between frames, since no one waited for input (input_wanted).
  bool inbox_idle_ = false;
  /// Memory was registered for the peer, or the peer sent requests: its requests are answered
  /// without waiting for this side's user, as an RDMA device answers them.
  bool answers_peer_ = false;
  unsigned reads_this_turn_ = 0;  ///< socket reads since read_frames_anew
  std::uint64_t socket_reads_ = 0;
  bool closed_ = false;        ///< close() was called
  bool lingering_ = false;     ///< closed, with queued frames still going out (finish_close ends it)
  std::chrono::milliseconds close_timeout_{10000};
  std::optional<boost::asio::steady_timer> close_timer_;  ///< while lingering
  bool broken_ = false;        ///< the connection failed (or was closed): nothing new starts
  bool stream_ended_ = false;  ///< this side sent close(ok)
  bool peer_ended_ = false;    ///< the peer sent close(ok)
  bool failure_sent_ = false;  ///< this side sent a failing close
  bool connecting_ = false;    ///< this side connected; the other accepted
  fifo<outgoing_frame> outgoing_;
  std::vector<std::vector<std::byte>> spare_frames_;
  std::size_t spare_bytes_ = 0;  ///< capacity held by spare_frames_
  /// The frames being written, a direct one's payload pieces included.
  std::array<boost::asio::const_buffer, max_gathered_frames + const_buffer_list::capacity> gather_;
  std::size_t gathered_ = 0;                       ///< frames in gather_
  std::size_t gather_begin_ = 0, gather_end_ = 0;  ///< pieces of gather_ not yet written
  /// The caller's memory that queued direct frames carry (transmit_direct): a stream write's,
  /// then a message's.
  struct direct_payload {
    std::array<boost::asio::const_buffer, const_buffer_list::capacity> pieces;
    std::size_t count = 0;
  };
  std::array<direct_payload, 2> direct_payload_;
  std::size_t outgoing_bytes_ = 0;
  std::uint32_t responses_queued_ = 0;  ///< responses in outgoing_ not yet written whole
  bool writing_ = false;                ///< write_next's sequence runs, until outgoing_ is empty
  bool write_under_way_ = false;        ///< one of its socket writes is started and not completed
  fifo<one_sided_op> operations_;       ///< started and not completed (or withdrawn), in order
  std::size_t next_to_send_ = 0;        ///< index in operations_ of the first not sent nor passed
  std::uint64_t requests_started_ = 0;  ///< one-sided operations started, ever
  std::uint64_t requests_sent_ = 0;     ///< ... whose request frames have all gone out (or withdrawn)
  /// How many operations the latest write's and message's payload goes out after (those started
  /// before it), as an RC queue pair's SEND after the WRITEs posted before it.
  std::array<std::uint64_t, 2> payload_after_{};
  std::optional<std::uint64_t> close_after_;  ///< the same for shutdown's close frame
  std::uint64_t next_request_id_ = 1;
  std::uint32_t unanswered_ = 0;  ///< request frames sent whose response has not arrived
  bool local_failure_posted_ = false;  ///< fail_on_local_error is on its way (send_requests)
  bool memory_failed_ = false;         ///< fail_for_memory ran
  wire::region_table regions_;
};

}  // namespace coverbs::detail
