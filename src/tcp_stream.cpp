// tcp_stream: receiving frames and handing them out. Sending is in tcp_stream_send.cpp, the
// one-sided operations in tcp_stream_one_sided.cpp, failure and close in tcp_stream_failure.cpp.
#include "coverbs/detail/tcp_stream.hpp"

#include <algorithm>
#include <limits>

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/error.hpp>
#include <cstring>
#include <utility>

#include "tcp_stream_shared.hpp"

namespace coverbs::detail {

using namespace tcp_stream_shared;

namespace {
// Received bytes held for the application before reading pauses (TCP then holds the peer back).
constexpr std::size_t max_held_bytes = 4u << 20;
// One read takes up to this much: a burst of small frames per system call.
constexpr std::size_t inbox_size = 16 * 1024;
constexpr std::size_t whole_inbox = std::numeric_limits<std::size_t>::max();  // read_past_inbox
// A payload of this size or more that arrived whole in the inbox is handed out from there,
// uncopied; the slot then counts whole against max_held_bytes until its last segment is
// consumed. Smaller ones are copied into a slot of their own size, so that a reader that
// leaves many tiny messages unread holds the peer back by their bytes, not by 16 KiB each.
constexpr std::size_t min_inbox_segment = 2 * 1024;
// What a held slot counts at least: keeping it costs memory of its own (the slot, the segment's
// place in a queue), so that a peer cannot make an unread stream of empty or one-byte frames
// grow without bound.
constexpr std::size_t min_held_cost = 256;
std::size_t held_cost(std::size_t slot_capacity) {
  return std::max(slot_capacity, min_held_cost);
}
// A free slot taken for a use whose cost is less than 1/max_slack of its capacity is
// reallocated at that size.
constexpr std::size_t max_slack = 4;
// Non-blocking reads done inside read_frames before it goes back to the scheduler: handlers it
// completes start the next read at once, which a peer writing faster than they read would keep
// fed for ever, starving every other handler of the context (timers, other connections).
constexpr unsigned reads_per_turn = 16;

// The stream ended inside a frame: the peer went away while writing (killed, crashed), which
// is not an orderly end, and not a malformed frame either.
const error_code truncated = error::connection_reset;

frame_type response_to(kind k) {
  switch (k) {
    case kind::read: return frame_type::read_response;
    case kind::write:
    case kind::write_with_immediate: return frame_type::write_response;
    case kind::fetch_add:
    case kind::compare_swap: return frame_type::atomic_response;
  }
  return frame_type::close;
}

// Frames the peer's one-sided operations send, for this side's library to answer.
bool is_request(frame_type t) {
  return t == frame_type::write || t == frame_type::write_with_immediate || t == frame_type::read_request ||
         t == frame_type::atomic_fetch_add || t == frame_type::atomic_compare_swap;
}

}  // namespace

tcp_stream::tcp_stream(boost::asio::ip::tcp::socket socket, std::size_t max_message, bool connecting)
    : stream_core(socket.get_executor()),
      socket_(std::move(socket)),
      max_message_(std::min<std::size_t>(max_message, wire::max_payload_size)),
      connecting_(connecting) {
  socket_.set_option(boost::asio::ip::tcp::no_delay(true));
  socket_.non_blocking(true);  // read_data_directly reads without waiting
  inbox_slot_ = take_slot(inbox_size);
}

tcp_stream::~tcp_stream() = default;

void tcp_stream::start() {
  send_frame({.type = frame_type::hello, .length = wire::max_payload_size});
  read_frames();
}

// --- receiving ----------------------------------------------------------------------------

// Frames already in the inbox are handled in this loop, not by recursion: one system call can
// bring a burst of hundreds of small frames.
void tcp_stream::read_frames() {
  while (!closed_ && !broken_ && !reading_) {
    // A peer that runs ahead of the application, or that asks more than its window and does
    // not read the answers, is held back by TCP flow control once we stop reading. A peer
    // within its window is not (but for a moment, max_queued_responses): it may be waiting for
    // us to take its bytes before it can take our answers.
    if (held_bytes_ >= max_held_bytes || immediates_held() >= max_held_immediates ||
        responses_queued_ >= max_queued_responses) {
      read_paused_ = true;
      return;
    }
    read_paused_ = false;
    if (reads_this_turn_ >= reads_per_turn) return read_frames_later();  // which starts the count anew
    if (data_left_ > 0) {  // a data frame's payload, or what a reader left of it
      if (!take_data()) return;
      continue;
    }
    if (write_in_hand_) {
      if (!take_write()) return;
      continue;
    }
    if (inbox_end_ - inbox_begin_ < wire::header_size) {
      if (large_payload_in_hand()) {
        if (!read_after_large_frame()) return;
        continue;
      }
      inbox_idle_ = !input_wanted();
      if (inbox_idle_) return;
      return fill_inbox();
    }
    if (!decode_inbox_header()) return protocol_error();
    inbox_begin_ += wire::header_size;
    if (header_.type == frame_type::data) {  // taken now: the checks above still hold
      data_left_ = header_.payload_length;
      if (!take_data()) return;
      continue;
    }
    answers_peer_ = answers_peer_ || is_request(header_.type);
    if (header_.type == frame_type::write || header_.type == frame_type::write_with_immediate) {
      start_write();
      continue;
    }
    if (const mutable_buffer_list* receiver = receiver_for_message()) {
      if (!receive_message_directly(*receiver)) return;
      continue;
    }
    if (!take_payload()) return;  // the rest is on its way; on_payload goes on
    handle_frame();
  }
}

// Between frames, the next read waits until someone wants input, as a read on an Asio socket
// starts only when its caller asks. A read kept posted at all times is made as soon as a frame
// has been handled, when the answer to it cannot have come yet: one failed system call per
// round trip, which costs a microsecond here (bench/analysis.md, session 37). Input is wanted
// while a user waits for it (want_input), before the peer's hello, with part of a frame in
// hand, with one-sided operations of ours unanswered, where the peer's requests must be
// answered without this side's user (answers_peer_), while frames of ours wait for TCP (the
// peer may be waiting for an answer, or have failed the connection), and after the peer's
// close (what comes then is answered, or is a protocol error). After a large frame the next
// header is looked for at once all the same (read_after_large_frame): another likely follows.
bool tcp_stream::input_wanted() const noexcept {
  return awaiting_input() || answers_peer_ || limit_ == 0 || inbox_end_ > inbox_begin_ ||
         !operations_.empty() || writing_ || peer_ended_;
}

// noexcept: it runs inside user's calls whose operation is stored by then (a read, a one-sided
// operation, a queued write): a read that cannot be allocated fails the connection, which ends
// that operation with the others.
void tcp_stream::want_input() noexcept {
  if (!inbox_idle_ || closed_ || broken_) return;
  inbox_idle_ = false;                      // before the start, as reading_ is
  guarded_in_call([this] { fill_inbox(); });  // Asio completes it later, never inside this call
}

// Reading resumes from a user's call (a read that consumed bytes, a write): handling frames
// there could complete that very operation inside its initiating function, so it is posted.
void tcp_stream::resume_reading() {
  if (!read_paused_) return;
  read_paused_ = false;
  read_frames_later();
}

void tcp_stream::immediate_taken() {
  guarded_in_call([this] { resume_reading(); });
}

void tcp_stream::read_frames_later() {
  post_unerased(get_executor(), boost::asio::bind_allocator(allocator(), [self = shared_from_this()] {
                  self->guarded([&] { self->read_frames_anew(); });
                }));
}

// read_frames entered from the scheduler (a completion, or a posted turn): the reads of the
// turn before count no more.
void tcp_stream::read_frames_anew() {
  reads_this_turn_ = 0;
  read_frames();
}

// Reads at least the rest of a header, and as much more as has arrived: the frames that follow
// a small frame usually come with it.
void tcp_stream::fill_inbox() {
  const std::span<std::byte> inbox = writable_inbox();
  const std::size_t have = inbox_end_;
  // Set before the start, like all the state its completion reads, and undone if the start
  // throws: a failure to start leaves no read marked as under way.
  reading_ = true;
  try {
    // One read_some: read_frames comes back here while the header is not complete.
    socket_.async_read_some(
        boost::asio::buffer(inbox) + have,
        boost::asio::bind_allocator(allocator(), [self = shared_from_this()](error_code ec, std::size_t n) {
          self->guarded([&] { self->on_inbox(ec, n); });
        }));
  } catch (...) {
    reading_ = false;
    throw;
  }
}

void tcp_stream::on_inbox(error_code ec, std::size_t n) {
  reading_ = false;
  socket_reads_ += n > 0;
  inbox_end_ += n;
  if (closed_ || broken_) return;
  if (ec) return connection_lost(ec == error::eof && inbox_end_ > inbox_begin_ ? truncated : ec);
  read_frames_anew();
}

// After a large data frame or message another likely follows. Its header and payload are read
// by one system call, the payload straight into the read or receive waiting for it, as a read
// on an Asio socket reads into the caller's buffer; where none waits, only the header is read,
// so that the payload can still go straight in later. The read is non-blocking and made only
// once the socket is readable (wait_readable), so no pending system call holds the caller's
// memory and a cancel still ends the operation at once. The frame that comes decides what may
// stay in the caller's buffers: the payload of the kind awaited, with room for a message;
// anything else goes back to the inbox. False while waiting for the socket, or with the
// connection lost.
bool tcp_stream::read_after_large_frame() {
  const std::span<std::byte> inbox = writable_inbox();
  const std::size_t have = inbox_end_;
  const bool message = header_.type == frame_type::message;
  mutable_buffer_list* read = message ? nullptr : waiting_read();
  const mutable_buffer_list* target = message ? waiting_receive() : read;
  const std::size_t expected =
      target != nullptr ? std::min<std::size_t>(header_.payload_length, target->bytes()) : 0;
  std::array<boost::asio::mutable_buffer, mutable_buffer_list::capacity + 1> into;
  into[0] = boost::asio::buffer(inbox.data() + have, wire::header_size - have);
  const std::size_t pieces =
      1 + (expected > 0 ? target->view_front(expected, std::span(into).subspan(1)) : 0);
  error_code ec;
  const std::size_t got = socket_.read_some(std::span(into.data(), pieces), ec);
  ++reads_this_turn_;
  socket_reads_ += got > 0;
  if (got == 0) {
    if (ec == error::would_block) {
      wait_readable();
    } else {
      connection_lost(ec == error::eof && have > 0 ? truncated : ec ? ec : error::eof);
    }
    return false;
  }
  const std::size_t header_part = std::min(got, wire::header_size - have);
  inbox_end_ += header_part;
  const std::size_t landed = got - header_part;  // in the target's buffers, after a whole header
  if (landed == 0) return true;                  // read_frames decodes what came
  if (!decode_inbox_header()) {
    protocol_error();
    return false;
  }
  const std::size_t length = header_.payload_length;
  const bool stays = message ? header_.type == frame_type::message && target->bytes() >= length
                             : header_.type == frame_type::data;
  const std::size_t kept = stays ? std::min(landed, length) : 0;
  return_to_inbox(*target, kept, landed - kept);
  if (kept == 0) return true;  // read_frames goes on from the inbox, header and all
  inbox_begin_ += wire::header_size;
  if (message) return receive_message_directly(*target, kept);
  data_left_ = length;
  return read_data_directly(*read, kept);
}

// Bytes [from, from + count) of `buffers`, which came after a frame's payload or instead of it,
// are appended to the inbox, grown where needed (nothing points into it: writable_inbox saw to
// that).
void tcp_stream::return_to_inbox(const mutable_buffer_list& buffers, std::size_t from, std::size_t count) {
  if (count == 0) return;
  if (inbox().size() < inbox_end_ + count) slots_[inbox_slot_].resize(inbox_end_ + count);
  inbox_end_ += buffers.copy(from, count, inbox().data() + inbox_end_);
}

// A data frame or message large enough to have come from the sender's own buffers, after
// which another likely follows.
bool tcp_stream::large_payload_in_hand() const noexcept {
  return (header_.type == frame_type::data || header_.type == frame_type::message) &&
         header_.payload_length >= min_direct_bytes;
}

// The header at the front of the inbox, into header_ (the inbox keeps it); false when it is
// malformed or out of turn.
bool tcp_stream::decode_inbox_header() {
  const std::uint32_t limit = limit_ != 0 ? limit_ : wire::max_payload_size;
  const std::span<const std::byte, wire::header_size> header(inbox().data() + inbox_begin_,
                                                             wire::header_size);
  if (wire::decode_header(header, header_, limit)) return false;
  // Stream data is in turn between the peer's hello and its close: check_sequence's rule.
  if (header_.type == frame_type::data) return limit_ != 0 && !peer_ended_;
  return !check_sequence();
}

// The rules that need the connection's state; decode_header has checked the frame on its own.
error_code tcp_stream::check_sequence() const {
  if ((limit_ == 0) != (header_.type == frame_type::hello)) return malformed();  // hello first, once
  switch (header_.type) {
    case frame_type::data: return peer_ended_ ? malformed() : error_code();
    case frame_type::message:  // one frame carries a whole message
      return peer_ended_ || header_.payload_length != header_.length ? malformed() : error_code();
    case frame_type::close:
      return peer_ended_ && header_.status == frame_status::ok ? malformed() : error_code();
    case frame_type::read_response:
    case frame_type::atomic_response:
    case frame_type::write_response: return check_response();
    default: return {};
  }
}

// Responses come in request order, so each must answer the oldest unanswered request frame.
error_code tcp_stream::check_response() const {
  if (unanswered_ == 0 || header_.request_id != next_request_id_ - unanswered_) return malformed();
  const one_sided_op& op = operations_.front();
  if (header_.type != response_to(op.request.op)) return malformed();
  if (header_.type == frame_type::read_response && header_.length != part_length(op, op.answered)) {
    return malformed();
  }
  return {};
}

// decode_header bounded the payload by the negotiated limit, so this allocates at most that.
// True when the payload is whole already.
bool tcp_stream::take_payload() {
  if (header_.type == frame_type::message) return take_segment(header_.payload_length);
  scratch_.resize(header_.payload_length);
  return fill_payload(scratch_);
}

// Stream bytes have no boundaries, so a waiting reader takes a data frame's payload straight into
// its buffers, as much as it can (from the socket itself where the inbox has no more of it, as a
// read on an Asio socket would); with no reader waiting, the rest becomes a segment. False while
// a read is on its way.
bool tcp_stream::take_data() {
  if (mutable_buffer_list* reader = waiting_read()) {
    yielded_ = false;
    return read_data_directly(*reader);
  }
  // Not all of it has come: a reader whose handler was posted may read again in a moment and
  // then take it straight into its buffers. One turn later, with still no reader, it goes into
  // a slot.
  if (inbox_end_ - inbox_begin_ < data_left_ && !yielded_) {
    yielded_ = true;
    read_frames_later();
    return false;
  }
  yielded_ = false;
  if (!take_segment(std::exchange(data_left_, 0))) return false;  // on_payload delivers it
  on_stream_frame();
  return true;
}

// What the inbox holds of the payload, then one non-blocking read of the rest into the reader's
// buffers; where they take the frame's end, whatever follows it is read into the inbox. While
// the reader has room, the data frames that follow in the inbox go on filling it, so that a
// stream of small writes costs the reader one completion per inbox, not one per write, as on
// an Asio socket, where one read takes whatever has arrived.
bool tcp_stream::read_data_directly(mutable_buffer_list& reader, std::size_t pre_read) {
  // `pre_read` bytes of the payload are in the reader's buffers already, by this turn's read.
  reader.consume(pre_read);
  data_left_ -= pre_read;
  std::size_t n = pre_read;
  std::size_t uncopied = pre_read;
  bool socket_read = pre_read > 0;
  error_code ec;
  for (;;) {
    const std::size_t copied =
        reader.put(inbox().data() + inbox_begin_, std::min(data_left_, inbox_end_ - inbox_begin_));
    inbox_begin_ += copied;
    data_left_ -= copied;
    n += copied;
    if (data_left_ > 0 && !reader.empty() && !socket_read) {  // so the inbox is empty
      socket_read = true;
      const std::size_t wanted = std::min(data_left_, reader.bytes());
      std::array<boost::asio::mutable_buffer, mutable_buffer_list::capacity + 1> into;
      const std::size_t pieces = reader.view_front(wanted, into);
      // After a large frame, which a large write sent, another one likely follows: then only
      // its header goes to the inbox, so that the reader's next read takes its payload
      // uncopied too.
      const std::size_t next = wanted < data_left_        ? 0
                               : large_payload_in_hand() ? wire::header_size
                                                         : whole_inbox;
      const std::size_t taken = read_past_inbox(into, pieces, wanted, next, ec);
      reader.consume(taken);
      n += taken;
      uncopied += taken;
      data_left_ -= taken;
      if (ec) break;
      continue;
    }
    if (data_left_ > 0 || reader.empty() || !next_data_frame()) break;
  }
  if (n == 0 && ec == error::would_block) {
    wait_readable();
    return false;
  }
  if (n > 0) complete_waiting_read(n, uncopied);
  if (ec && ec != error::would_block) {
    connection_lost(ec == error::eof ? truncated : ec);
    return false;
  }
  return true;
}

// Where the frame in hand is a message, large or already whole in the inbox, the receive that
// waits for it with room enough; null otherwise.
const mutable_buffer_list* tcp_stream::receiver_for_message() const noexcept {
  const mutable_buffer_list* receiver = header_.type == frame_type::message ? waiting_receive() : nullptr;
  const std::size_t size = header_.payload_length;
  if (receiver == nullptr || receiver->bytes() < size) return nullptr;
  return size >= min_direct_bytes || inbox_end_ - inbox_begin_ >= size ? receiver : nullptr;
}

// The message goes into the waiting receive's buffers as it comes, from the inbox and then
// (a large one) by one non-blocking read from the socket, without the copy through a slot or
// the queue of received messages. Where the socket does not hold all of it yet, what came is
// copied into a slot and the rest follows there, as without this path (the receive may be
// cancelled meanwhile, and the message must then stay whole for the next one). False while
// the rest is on its way, or with the connection lost.
bool tcp_stream::receive_message_directly(const mutable_buffer_list& receiver, std::size_t pre_read) {
  const std::size_t size = header_.payload_length;
  mutable_buffer_list into = receiver;  // the receive keeps its buffers until it completes
  into.consume(pre_read);               // read there already, by this turn's read
  const std::size_t copied =
      into.put(inbox().data() + inbox_begin_, std::min(size - pre_read, inbox_end_ - inbox_begin_));
  inbox_begin_ += copied;
  const std::size_t ready = pre_read + copied;
  std::size_t uncopied = 0;
  error_code ec;
  if (ready < size) {  // so the inbox is empty
    std::array<boost::asio::mutable_buffer, mutable_buffer_list::capacity + 1> pieces;
    const std::size_t count = into.view_front(size - ready, pieces);
    uncopied = read_past_inbox(pieces, count, size - ready, wire::header_size, ec);
  }
  if (ready + uncopied == size) {
    complete_waiting_receive(size, pre_read + uncopied);
    return true;
  }
  if (ec && ec != error::would_block) {
    connection_lost(ec == error::eof ? truncated : ec);  // a message is lost whole, as on RDMA
    return false;
  }
  const std::uint32_t slot = take_slot(size);
  receiver.copy(0, ready + uncopied, slots_[slot].data());  // what came, into the slot
  payload_segment_ = {slots_[slot].data(), size, slot};
  return fill_payload(std::span(slots_[slot]).subspan(ready + uncopied));  // the inbox is empty: false
}

// Takes the next frame's header from the inbox when it is whole there and heads a data frame;
// anything else stays for read_frames.
bool tcp_stream::next_data_frame() {
  if (inbox_end_ - inbox_begin_ < wire::header_size) return false;
  if (!decode_inbox_header() || header_.type != frame_type::data) return false;
  inbox_begin_ += wire::header_size;
  data_left_ = header_.payload_length;
  return true;
}

// One non-blocking read into the first `pieces` buffers of `into` (room for one more), which
// want `wanted` bytes, and into the emptied inbox after them, up to `next` bytes (0: none), so
// that the frames that follow come with the same system call. Returns the bytes that went into
// the buffers; the rest is in the inbox.
std::size_t tcp_stream::read_past_inbox(std::span<boost::asio::mutable_buffer> into, std::size_t pieces,
                                        std::size_t wanted, std::size_t next, error_code& ec) {
  inbox_begin_ = inbox_end_ = 0;
  const std::span<std::byte> inbox = writable_inbox();
  if (next > 0) into[pieces++] = boost::asio::buffer(inbox.data(), std::min(next, inbox.size()));
  const std::size_t got = socket_.read_some(into.first(pieces), ec);
  ++reads_this_turn_;
  socket_reads_ += got > 0;
  const std::size_t taken = std::min(got, wanted);
  inbox_end_ = got - taken;
  return taken;
}

// read_frames goes on once the socket is readable (on_inbox, no bytes read yet).
void tcp_stream::wait_readable() {
  reading_ = true;
  socket_.async_wait(boost::asio::socket_base::wait_read,
                     boost::asio::bind_allocator(allocator(), [self = shared_from_this()](error_code e) {
                       self->guarded([&] { self->on_inbox(e, 0); });
                     }));
}

void tcp_stream::start_write() {
  const wire::frame_header& h = header_;
  write_in_hand_ = true;
  write_done_ = 0;
  // The whole rest of the operation is checked first, so a write that would run past its
  // region is refused at its first part and writes nothing, as a device checks the RETH length.
  write_error_ = regions_.check(h.rkey, h.remote_address, h.length, verbs::access::remote_write);
}

// A write's payload goes straight into its region, from the inbox and then from the socket,
// with no copy in between. The region is looked up again before each copy or read, which the
// socket does at once (never an asynchronous read into it): the application may deregister it
// between two reads, and then nothing more is written there. A refused write's bytes are read
// and dropped. False while waiting for the socket.
bool tcp_stream::take_write() {
  const wire::frame_header& h = header_;
  while (write_done_ < h.payload_length) {
    const std::size_t left = h.payload_length - write_done_;
    std::byte* at = nullptr;
    if (!write_error_) write_error_ = regions_.write_target(h.rkey, h.remote_address + write_done_, left, at);
    if (write_error_) {
      scratch_.resize(left);
      at = scratch_.data();
    }
    if (const std::size_t ready = std::min(left, inbox_end_ - inbox_begin_); ready > 0) {
      std::memcpy(at, inbox().data() + inbox_begin_, ready);
      inbox_begin_ += ready;
      write_done_ += ready;
      continue;
    }
    std::array<boost::asio::mutable_buffer, 2> into{boost::asio::buffer(at, left)};
    error_code ec;
    const std::size_t taken = read_past_inbox(into, 1, left, whole_inbox, ec);
    if (ec == error::would_block) {
      wait_readable();
      return false;
    }
    if (ec) {
      connection_lost(ec == error::eof ? truncated : ec);
      return false;
    }
    write_done_ += taken;
  }
  write_in_hand_ = false;
  answer_write(std::exchange(write_error_, {}));
  return true;
}

// A data or message payload of `size` bytes as a segment: from the inbox where it arrived whole
// there, else in a slot of its own. True when it is whole already.
bool tcp_stream::take_segment(std::size_t size) {
  if (size >= min_inbox_segment && inbox_end_ - inbox_begin_ >= size) {
    payload_segment_ = {inbox().data() + inbox_begin_, size, inbox_slot_};
    inbox_begin_ += size;
    return true;
  }
  const std::uint32_t slot = take_slot(size);
  payload_segment_ = {slots_[slot].data(), size, slot};
  return fill_payload(slots_[slot]);
}

// What the inbox holds of the payload is copied; the rest is read straight into place, along
// with whatever follows it (into the inbox). True when the payload is whole already.
bool tcp_stream::fill_payload(std::span<std::byte> into) {
  const std::size_t ready = std::min(into.size(), inbox_end_ - inbox_begin_);
  if (ready > 0) std::memcpy(into.data(), inbox().data() + inbox_begin_, ready);
  inbox_begin_ += ready;
  if (ready == into.size()) return true;
  inbox_begin_ = inbox_end_ = 0;  // all of it went into the payload
  writable_inbox();
  payload_ = into.subspan(ready);
  reading_ = true;
  read_payload();
  return false;
}

// The rest of a payload, and whatever follows it into the inbox, in read_some calls (as in
// write_gathered, asio::async_read's composed operation costs more than the loop).
void tcp_stream::read_payload() {
  const std::array<boost::asio::mutable_buffer, 2> buffers{boost::asio::buffer(payload_),
                                                           boost::asio::buffer(inbox().data(), inbox_size)};
  socket_.async_read_some(
      buffers,
      boost::asio::bind_allocator(allocator(), [self = shared_from_this()](error_code ec, std::size_t n) {
        self->guarded([&] { self->on_payload_part(ec, n); });
      }));
}

void tcp_stream::on_payload_part(error_code ec, std::size_t n) {
  socket_reads_ += n > 0;
  const std::size_t in_payload = std::min(n, payload_.size());
  payload_ = payload_.subspan(in_payload);
  inbox_end_ = n - in_payload;
  if (!ec && !payload_.empty() && !closed_ && !broken_) return read_payload();
  on_payload(ec);
}

void tcp_stream::on_payload(error_code ec) {
  reading_ = false;
  if (closed_ || broken_) return;
  if (ec) {
    // Stream bytes that arrived are the reader's, as a reader waiting for them would have had
    // them (read_data_directly); the rest of a frame is lost with the connection.
    if (header_.type == frame_type::data) {
      payload_segment_.size -= payload_.size();
      if (payload_segment_.size > 0) on_stream_frame();
    }
    return connection_lost(ec == error::eof ? truncated : ec);
  }
  handle_frame();
  read_frames_anew();
}

void tcp_stream::handle_frame() {
  switch (header_.type) {
    case frame_type::hello: on_hello(); break;
    case frame_type::data:
    case frame_type::message: on_stream_frame(); break;
    case frame_type::write:
    case frame_type::write_with_immediate: break;  // take_write answers them
    case frame_type::read_request: answer_read(); break;
    case frame_type::atomic_fetch_add:
    case frame_type::atomic_compare_swap: answer_atomic(); break;
    case frame_type::read_response:
    case frame_type::atomic_response:
    case frame_type::write_response: on_response(); break;
    case frame_type::close: on_close(); break;
  }
}

void tcp_stream::on_hello() {
  limit_ = std::min(header_.length, wire::max_payload_size);
  send_requests();
  capacity_available();
}

void tcp_stream::on_stream_frame() {
  const segment s = payload_segment_;
  // A slot counts against max_held_bytes whole, from its first segment to its last release.
  if (slot_users_[s.tag]++ == 0) held_bytes_ += held_cost(slots_[s.tag].capacity());
  if (header_.type == frame_type::data) {
    deliver_bytes(s);
  } else {
    deliver_message(s);
  }
}

void tcp_stream::on_close() {
  switch (header_.status) {
    case frame_status::ok:  // the peer's stream ended; everything else goes on
      peer_ended_ = true;
      return deliver_end_of_stream();
    case frame_status::protocol_error: return fail(malformed(), malformed(), malformed(), frame_status::ok);
    default:
      // The peer's connection is in error (after refusing a request of ours, whose response
      // came first): as with an RC queue pair in error, what is left is flushed.
      return fail(error::eof, flushed(), flushed(), frame_status::ok);
  }
}

// A held slot counts against max_held_bytes by the memory it holds, its capacity: a free slot
// keeps the capacity of what it held last, and a byte left unread in a free 1 MiB slot must not
// pin that megabyte while counting as 256 bytes. So a free slot far larger than its new use
// gives its memory back (small frames then count small), and where the last one freed does not
// fit, the one that fits best is taken.
std::uint32_t tcp_stream::take_slot(std::size_t size) {
  if (free_slots_.empty()) {
    slots_.emplace_back(size);  // moves the others' vectors: their bytes, which segments point at, stay
    slot_users_.push_back(0);
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }
  const auto capacity = [&](std::uint32_t slot) { return slots_[slot].capacity(); };
  // The last one freed, where it fits within the slack: steady traffic reuses it without
  // looking further (a backlog of small frames can leave thousands of free slots). Else the
  // smallest that fits; where none does, the largest (grown the least).
  auto chosen = std::prev(free_slots_.end());
  if (capacity(*chosen) < size || capacity(*chosen) > max_slack * held_cost(size)) {
    chosen = std::min_element(free_slots_.begin(), free_slots_.end(), [&](std::uint32_t a, std::uint32_t b) {
      if ((capacity(a) >= size) != (capacity(b) >= size)) return capacity(a) >= size;
      return capacity(a) >= size ? capacity(a) < capacity(b) : capacity(a) > capacity(b);
    });
  }
  const std::uint32_t slot = *chosen;
  *chosen = free_slots_.back();
  free_slots_.pop_back();
  std::vector<std::byte>& bytes = slots_[slot];
  if (bytes.capacity() > max_slack * held_cost(size)) {
    std::vector<std::byte>(size).swap(bytes);
  } else {
    bytes.resize(size);
  }
  return slot;
}

std::span<std::byte> tcp_stream::writable_inbox() {
  const std::size_t kept = inbox_end_ - inbox_begin_;
  if (slot_users_[inbox_slot_] > 0) {
    // Sized for what it keeps too: return_to_inbox may have grown this one past inbox_size.
    const std::uint32_t next = take_slot(std::max(inbox_size, kept));
    if (kept > 0) std::memcpy(slots_[next].data(), inbox().data() + inbox_begin_, kept);
    inbox_slot_ = next;  // the old one goes back to the free slots with its last segment
  } else if (inbox_begin_ > 0 && kept > 0) {
    std::memmove(inbox().data(), inbox().data() + inbox_begin_, kept);
  }
  inbox_begin_ = 0;
  inbox_end_ = kept;
  return inbox();
}

void tcp_stream::release(std::uint32_t tag) {
  if (--slot_users_[tag] > 0) return;
  held_bytes_ -= held_cost(slots_[tag].capacity());  // unchanged while held: nothing resizes a used slot
  guarded_in_call([&] {
    if (tag != inbox_slot_) free_slots_.push_back(tag);  // keeps its capacity: steady state reuses it
    resume_reading();
  });
}

}  // namespace coverbs::detail
