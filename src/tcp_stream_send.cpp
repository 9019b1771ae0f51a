// tcp_stream's sending: frames queued and written gathered, small payloads copied into spare
// frame buffers, large ones written straight from the caller's memory.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <utility>

#include "coverbs/detail/tcp_stream.hpp"
#include "tcp_stream_shared.hpp"

namespace coverbs::detail {

using namespace tcp_stream_shared;

namespace {

// Frame buffers kept for reuse, so that steady streaming allocates nothing: as many as one
// gathered write takes, holding no more memory than the outgoing queue may.
constexpr std::size_t max_spare_frames = 64;
constexpr std::size_t max_spare_bytes = max_outgoing_bytes;

// The header of `n` bytes of stream data, or of a message of `n` bytes (which also says its length).
wire::frame_header payload_header(std::size_t n, bool message) {
  wire::frame_header h{.type = message ? frame_type::message : frame_type::data,
                       .payload_length = static_cast<std::uint32_t>(n)};
  if (message) h.length = static_cast<std::uint32_t>(n);
  return h;
}

}  // namespace

// --- sending ------------------------------------------------------------------------------

std::vector<std::byte> tcp_stream::take_frame(std::size_t payload) {
  std::vector<std::byte> frame;
  if (!spare_frames_.empty()) {
    frame = std::move(spare_frames_.back());
    spare_frames_.pop_back();
    spare_bytes_ -= frame.capacity();
  }
  frame.resize(wire::header_size + payload);
  return frame;
}

void tcp_stream::send_frame(const wire::frame_header& h) {
  queue_frame(h, {take_frame(0)});
}

std::size_t tcp_stream::send_direct_frame(const wire::frame_header& h, const const_buffer_list& payload) {
  const bool message = h.type == frame_type::message;
  direct_payload& d = direct_payload_[message];
  d.count = payload.view_front(h.payload_length, d.pieces);
  queue_frame(h, {take_frame(0), false, true, message});
  return h.payload_length;
}

void tcp_stream::queue_frame(const wire::frame_header& h, outgoing_frame f) {
  wire::encode_header(h, std::span<std::byte, wire::header_size>(f.bytes.data(), wire::header_size));
  queue_bytes(std::move(f));
}

void tcp_stream::queue_bytes(outgoing_frame f) {
  const std::size_t size = f.bytes.size();
  const bool response = f.response;
  outgoing_.push_back(std::move(f));  // first: where it cannot grow, nothing is counted
  outgoing_bytes_ += size;
  if (response) ++responses_queued_;
  if (!writing_) write_next();
}

void tcp_stream::write_next() {
  if (outgoing_.empty() || sending_stopped()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  want_input();
  // Every queued frame (up to the gather array) in one write: one system call for a burst of
  // small frames instead of one each.
  std::size_t pieces = 0;
  for (gathered_ = 0; gathered_ < outgoing_.size(); ++gathered_) {
    const outgoing_frame& f = outgoing_[gathered_];
    const direct_payload* payload = f.direct ? &direct_payload_[f.direct_message] : nullptr;
    const std::size_t payload_pieces = payload != nullptr ? payload->count : 0;
    if (gathered_ == max_gathered_frames || pieces + 1 + payload_pieces > gather_.size()) break;
    gather_[pieces++] = boost::asio::buffer(f.bytes);
    for (std::size_t i = 0; i < payload_pieces; ++i) gather_[pieces++] = payload->pieces[i];
  }
  gather_begin_ = 0;
  gather_end_ = pieces;
  write_gathered();
}

// Plain write_some calls rather than asio::async_write: its composed operation copies the
// buffer sequence on every step, a tenth of the instructions of a small-write stream.
void tcp_stream::write_gathered() {
  // Set before the start, as reading_ is, and undone if the start throws: no socket write then
  // holds a direct write's memory (end_for_memory may end it).
  write_under_way_ = true;
  try {
    socket_.async_write_some(
        std::span<const boost::asio::const_buffer>(gather_.data() + gather_begin_,
                                                   gather_end_ - gather_begin_),
        boost::asio::bind_allocator(allocator(), [self = shared_from_this()](error_code ec, std::size_t n) {
          self->write_under_way_ = false;
          self->guarded([&] { self->on_write_some(ec, n); });
        }));
  } catch (...) {
    write_under_way_ = false;
    throw;
  }
}

void tcp_stream::on_write_some(error_code ec, std::size_t n) {
  while (gather_begin_ < gather_end_ && n >= gather_[gather_begin_].size())
    n -= gather_[gather_begin_++].size();
  if (n > 0) gather_[gather_begin_] += n;  // a piece written in part
  if (ec || sending_stopped() || gather_begin_ == gather_end_) return on_written(ec);
  // The responses among this write's frames that have left whole wait no more (on_written pops
  // them later): the hold on the peer's requests counts only those that do, and reading
  // resumes as soon as it may.
  std::size_t frame_end = 0;  // the piece after frame i
  bool counted_out = false;
  for (std::size_t i = 0; i < gathered_ && responses_queued_ > 0; ++i) {
    outgoing_frame& f = outgoing_[i];
    frame_end += 1 + (f.direct ? direct_payload_[f.direct_message].count : 0);
    if (frame_end > gather_begin_) break;
    if (f.response) {
      f.response = false;
      --responses_queued_;
      counted_out = true;
    }
  }
  if (counted_out) resume_reading();  // read_frames pauses again while the hold still applies
  write_gathered();
}

void tcp_stream::on_written(error_code ec) {
  std::array<bool, 2> direct_sent{};  // a write's, a message's
  for (; gathered_ > 0; --gathered_) {
    outgoing_frame& sent = outgoing_.front();
    if (sent.direct) direct_sent[sent.direct_message] = true;
    outgoing_bytes_ -= sent.bytes.size();
    if (sent.response) --responses_queued_;
    if (spare_frames_.size() < max_spare_frames && spare_bytes_ + sent.bytes.capacity() <= max_spare_bytes) {
      spare_bytes_ += sent.bytes.capacity();
      spare_frames_.push_back(std::move(sent.bytes));
    }
    outgoing_.pop_front();
  }
  if (sending_stopped() || ec) {
    writing_ = false;
    if (lingering_) finish_close();  // the peer is gone: nothing more can reach it
    // The peer is gone (a write fails on a reset connection): reads report that, and writes
    // still get broken_pipe from stream_core, as on a TCP socket.
    if (!closed_) connection_lost(error::connection_reset);
    // Written or not, the direct frames' memory is their callers' again.
    // The reset of a connection out of memory ends them before its failure is delivered
    // (posted from a user's call), which would make them broken_pipe (direct_done): the same.
    end_direct_writes(memory_failed_ ? error::broken_pipe : ec ? ec : error::operation_aborted);
    return;
  }
  write_next();
  for (const bool message : {false, true}) {
    if (direct_sent[message]) direct_done(message, {});
  }
  if (closed_) {
    if (!writing_) finish_close();  // all out: the end of the stream follows
    return;
  }
  resume_reading();
  send_requests();
  capacity_available();
}

// Stream bytes and messages wait while one-sided requests started before them do: an RC queue
// pair's SEND reaches the peer after the WRITEs posted before it, which a peer that reads the
// written memory once the message arrives relies on. Requests started later do not hold them.
bool tcp_stream::takes_payload(bool message) const noexcept {
  return limit_ > 0 && !stream_ended_ && !broken_ && outgoing_bytes_ < max_outgoing_bytes &&
         requests_sent_ >= payload_after_[message];
}

std::size_t tcp_stream::transmit(const_buffer_list& buffers, bool message) {
  if (!takes_payload(message)) return 0;
  const std::size_t total = buffers.bytes();
  if (message && total > limit_) {
    // Accepted before the peer's hello announced a smaller limit, so it can never be sent;
    // failing (outside this initiating call) beats a send that waits for ever.
    guarded_in_call(
        [&] {
          boost::asio::post(get_executor(), [self = shared_from_this()] {
            self->guarded([&] {
              self->fail(error::message_size, flushed(), flushed(), frame_status::remote_operation);
            });
          });
        });
    return 0;
  }
  const std::size_t n = message ? total : std::min<std::size_t>(total, limit_);
  // Part of the frame may be on the wire when copying the rest cannot be allocated: the
  // connection fails then (its peer would read the next frame's bytes as the rest).
  if (!guarded_in_call([&] { send_copied(payload_header(n, message), buffers); })) return 0;
  return n > 0 ? n : 1;  // an empty message still counts as sent
}

// The frame goes to the socket at once if nothing is queued (write_at_once); what the socket
// does not take is copied into a frame and queued, as if it had taken none. Either way the
// caller's memory is free again on return.
void tcp_stream::send_copied(const wire::frame_header& h, const_buffer_list& payload, bool response) {
  const std::size_t n = h.payload_length;
  std::array<std::byte, wire::header_size> header;
  wire::encode_header(h, header);
  const std::size_t written = write_at_once(header, payload, n);
  if (written == header.size() + n) return payload.consume(n);
  std::vector<std::byte> frame = take_frame(n);
  std::memcpy(frame.data(), header.data(), header.size());
  payload.copy(0, n, frame.data() + header.size());
  frame.erase(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(written));
  queue_bytes({std::move(frame), response});
  payload.consume(n);  // once queued: bytes a failure to queue left are still the write's
}

// A response without payload goes out as read responses do: at once where nothing is queued, so
// that a lone one-sided WRITE or atomic is answered without an asynchronous write of our own.
void tcp_stream::send_response(const wire::frame_header& h) {
  const_buffer_list no_payload;
  send_copied(h, no_payload, true);
}

// A small write or message costs a copy into a frame, a queued asynchronous write and its
// completion handler; when nothing else is waiting to go out, one non-blocking writev of the
// header and the caller's buffers does it all, which is what a write on an Asio socket costs.
// A failure is left to the queued path, which reports it.
std::size_t tcp_stream::write_at_once(std::span<const std::byte> header, const const_buffer_list& payload,
                                      std::size_t n) {
  if (writing_ || !outgoing_.empty() || closed_) return 0;
  // sendmsg itself: the socket's write_some would first build the same iovec array from a
  // buffer sequence, a measurable part of a small write's cost.
  std::array<iovec, 1 + const_buffer_list::capacity> pieces;  // left uninitialised
  pieces[0] = {const_cast<std::byte*>(header.data()), header.size()};
  const std::size_t count = 1 + payload.visit_front(n, [&](std::size_t i, boost::asio::const_buffer b) {
    pieces[i + 1] = {const_cast<void*>(b.data()), b.size()};
  });
  msghdr message{};
  message.msg_iov = pieces.data();
  message.msg_iovlen = count;
  const ssize_t written = ::sendmsg(socket_.native_handle(), &message, MSG_NOSIGNAL);
  return written > 0 ? static_cast<std::size_t>(written) : 0;
}

// A large write or message goes out as a header followed by the caller's own buffers, gathered
// into one write; it completes once the kernel has taken them all, as a write on an Asio
// socket does.
std::size_t tcp_stream::transmit_direct(const const_buffer_list& buffers, bool message) {
  if (!takes_payload(message)) return 0;
  const std::size_t total = buffers.bytes();
  if (message && total > limit_) return 0;  // transmit fails it
  const std::size_t n = std::min<std::size_t>(total, limit_);
  if (n < min_direct_bytes) return 0;
  std::size_t sent = 0;
  guarded_in_call([&] { sent = send_direct_frame(payload_header(n, message), buffers); });
  return sent;
}

// close(ok) ends this side's stream bytes and messages only; one-sided operations go on.
void tcp_stream::shutdown_send() {
  if (stream_ended_ || broken_) return;
  stream_ended_ = true;
  // After the requests started before it: the peer reads eof once their writes have landed.
  close_after_ = requests_started_;
  guarded_in_call([this] { send_close_when_due(); });
}

void tcp_stream::send_close_when_due() {
  if (!close_after_ || requests_sent_ < *close_after_ || broken_) return;
  close_after_.reset();
  send_frame({.type = frame_type::close});
}

}  // namespace coverbs::detail
