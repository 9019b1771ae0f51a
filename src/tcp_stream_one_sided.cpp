// tcp_stream's one-sided operations: as requester, each becomes request frames that the peer's
// library answers; as responder, the peer's requests are checked against this side's regions
// (key, bounds, access) and answered as an RDMA device would.
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <cstdint>
#include <cstring>
#include <utility>

#include "coverbs/detail/tcp_stream.hpp"
#include "tcp_stream_shared.hpp"

namespace coverbs::detail {

using namespace tcp_stream_shared;

namespace {

bool is_atomic(kind k) {
  return k == kind::fetch_add || k == kind::compare_swap;
}

// Whether the request carries its local buffer's bytes; the others' results come back into it,
// and are checked then, as a device checks a read's or atomic's local buffer only as it writes
// the response there (the peer has done the read or atomic by then).
bool sends_local(kind k) {
  return k == kind::write || k == kind::write_with_immediate;
}

error_code check_atomic_arguments(const one_sided_request& r) {
  if (r.local.size < 8 || r.remote.length < 8) return make_error_code(errc::buffer_too_small);
  if (r.remote.address % 8 != 0 || reinterpret_cast<std::uintptr_t>(r.local.data) % 8 != 0) {
    return make_error_code(errc::misaligned_atomic);
  }
  return {};
}

}  // namespace

// --- responder ----------------------------------------------------------------------------

void tcp_stream::answer_write(error_code ec) {
  const wire::frame_header& h = header_;
  send_response(
      {.type = frame_type::write_response, .request_id = h.request_id, .status = wire::to_status(ec)});
  if (ec) return refuse(ec);
  if (h.type == frame_type::write_with_immediate) deliver_immediate(h.immediate);
}

// A request asks for the rest of its read (`length`), which is checked whole, as a device
// checks a READ's whole length before it sends any of it; the response carries one frame's
// part of it, so a read that runs past its region fails before any part of it lands.
void tcp_stream::answer_read() {
  const wire::frame_header& h = header_;
  std::byte* at = nullptr;
  const error_code ec = regions_.read_source(h.rkey, h.remote_address, h.length, at);
  const std::uint32_t part = wire::chunk_size(h.length, 0, limit_);
  const std::size_t n = ec ? 0 : part;
  const_buffer_list payload(boost::asio::buffer(at, n));
  send_copied({.type = frame_type::read_response,
               .payload_length = static_cast<std::uint32_t>(n),
               .request_id = h.request_id,
               .length = part,
               .status = wire::to_status(ec)},
              payload, true);
  if (ec) refuse(ec);
}

void tcp_stream::answer_atomic() {
  const wire::frame_header& h = header_;
  std::uint64_t previous = 0;
  const error_code ec =
      h.type == frame_type::atomic_fetch_add
          ? regions_.apply_fetch_add(h.rkey, h.remote_address, h.compare_add, previous)
          : regions_.apply_compare_swap(h.rkey, h.remote_address, h.compare_add, h.swap, previous);
  send_response({.type = frame_type::atomic_response,
                 .request_id = h.request_id,
                 .compare_add = ec ? 0 : previous,
                 .status = wire::to_status(ec)});
  if (ec) refuse(ec);
}

// A refused request puts the connection in error, as it puts both RC queue pairs: the peer
// learns why from the response and the close frame after it, and nothing more is served.
void tcp_stream::refuse(error_code ec) {
  fail(error::eof, flushed(), flushed(), wire::to_status(ec));
}

// --- requester ----------------------------------------------------------------------------

void tcp_stream::transfer(const one_sided_request& request, size_handler handler) {
  start_operation({.request = request, .on_size = std::move(handler), .on_value = {}});
}

void tcp_stream::atomic(const one_sided_request& request, value_handler handler) {
  if (const error_code ec = check_atomic_arguments(request)) {
    return hand_over(std::move(handler), true, ec, std::uint64_t{0});
  }
  start_operation({.request = request, .on_size = {}, .on_value = std::move(handler)});
}

void tcp_stream::start_operation(one_sided_op op) {
  if (broken_) return finish(op, flushed(), 0, true);  // as posted to a queue pair in error
  op.number = requests_started_ + 1;
  operations_.push_back(std::move(op));  // where it cannot grow, the caller gets bad_alloc
  ++requests_started_;
  // Stored now, so it ends with the connection where what follows cannot allocate.
  guarded_in_call([this] {
    watch(operations_[operations_.size() - 1]);
    send_requests();
    want_input();  // its answers
  });
}

void tcp_stream::watch(const one_sided_op& op) {
  if (auto slot = slot_of(op); slot.is_connected()) {
    slot.assign(
        [this, number = op.number](boost::asio::cancellation_type type) { cancel_operation(number, type); });
  }
}

void tcp_stream::cancel_operation(std::uint64_t number, boost::asio::cancellation_type type) {
  // Operations leave only from the front (or all at once), so numbers are consecutive there.
  one_sided_op* found = operations_.find_numbered(number);
  if (found == nullptr) return;  // its result is known
  one_sided_op& op = *found;
  if (op.withdrawn || op.cancelled) return;
  if (op.sent == 0 && !op.local_error) {
    // Withdrawn first: a finish that cannot post its handler has lost it (it is not run twice).
    op.withdrawn = true;
    // Outside the canceller's call, which must not run other handlers: passing over it may
    // let a write or message go that waited for it (whoever passes it first: an operation
    // started before this runs may, without serving them). finish clears the slot whose
    // handler runs this (as stream_core::cancel does): nothing of that handler is touched after.
    guarded_in_call(
        [&] {
          finish(op, error::operation_aborted, 0, true);
          boost::asio::post(get_executor(), [self = shared_from_this()] {
            self->guarded([&] {
              self->send_requests();
              self->capacity_available();
            });
          });
        });
    return;
  }
  // A partial or total cancel promises to leave the connection as it was.
  if ((type & boost::asio::cancellation_type::terminal) == boost::asio::cancellation_type::none) return;
  op.cancelled = true;
  // As the queue pair put in error: what it has outstanding is flushed (the cancelled one ends
  // aborted), its streams end, and the peer, which is healthy, is told that its side failed.
  fail(error::eof, flushed(), flushed(), frame_status::remote_operation, true);
}

// Frames go out in operation order, so responses, which come back in that order, complete
// operations in the order they were started.
void tcp_stream::send_requests() {
  drop_withdrawn();  // so that the oldest operation is at index 0 (the local error check)
  while (limit_ != 0 && !broken_ && next_to_send_ < operations_.size()) {
    if (operations_.front().local_error && next_to_send_ != 0) break;  // failed as its result came
    one_sided_op& op = operations_[next_to_send_];
    if (op.withdrawn) {  // sent, as far as what is ordered after it is concerned
      ++next_to_send_;
      ++requests_sent_;
      drop_withdrawn();
      continue;
    }
    if (unanswered_ >= max_unanswered || outgoing_bytes_ >= max_outgoing_bytes) break;
    if (!op.local_error && sends_local(op.request.op)) op.local_error = local_access(op, op.sent);
    if (op.local_error) {
      // As a queue pair in error after it, nothing more goes out. Failing the connection here
      // would complete handlers inside an initiating function (start_operation's).
      if (next_to_send_ == 0 && op.answered == op.sent && !std::exchange(local_failure_posted_, true)) {
        boost::asio::post(get_executor(), [self = shared_from_this()] {
          self->local_failure_posted_ = false;
          self->guarded([&] { self->fail_on_local_error(); });
        });
      }
      break;
    }
    send_request_frame(op);
    if (op.sent == op.frames) {
      ++next_to_send_;
      ++requests_sent_;
    }
  }
  send_close_when_due();
}

void tcp_stream::drop_withdrawn() {
  while (next_to_send_ > 0 && operations_.front().withdrawn) {
    operations_.pop_front();
    --next_to_send_;
  }
}

void tcp_stream::send_request_frame(one_sided_op& op) {
  const one_sided_request& r = op.request;
  if (op.frames == 0) {
    op.frames = is_atomic(r.op) ? 1 : static_cast<std::uint32_t>(wire::frame_count(r.local.size, limit_));
  }
  const std::uint64_t offset = std::uint64_t{op.sent} * limit_;
  const wire::frame_header h = request_header(op, offset);
  const_buffer_list payload(
      boost::asio::buffer(static_cast<const std::byte*>(r.local.data) + offset, h.payload_length));
  ++op.sent;
  ++unanswered_;
  send_copied(h, payload);
}

// The header of `op`'s next part, which starts `offset` bytes into it.
wire::frame_header tcp_stream::request_header(const one_sided_op& op, std::uint64_t offset) {
  const one_sided_request& r = op.request;
  wire::frame_header h{
      .request_id = next_request_id_++, .remote_address = r.remote.address + offset, .rkey = r.remote.rkey};
  switch (r.op) {
    case kind::read:  // the rest of the read, which the peer checks whole and answers a part of
      h.type = frame_type::read_request;
      h.length = static_cast<std::uint32_t>(r.local.size - offset);
      break;
    case kind::write:
    case kind::write_with_immediate: {
      // Only the last part carries the immediate, so the peer sees it after all the data.
      const bool with_immediate = r.op == kind::write_with_immediate && op.sent + 1 == op.frames;
      h.type = with_immediate ? frame_type::write_with_immediate : frame_type::write;
      h.immediate = with_immediate ? r.immediate : 0;
      h.length = static_cast<std::uint32_t>(r.local.size - offset);
      h.payload_length = part_length(op, op.sent);
      break;
    }
    case kind::fetch_add:
      h.type = frame_type::atomic_fetch_add;
      h.compare_add = r.compare_add;
      break;
    case kind::compare_swap:
      h.type = frame_type::atomic_compare_swap;
      h.compare_add = r.compare_add;
      h.swap = r.swap;
      break;
  }
  return h;
}

std::uint32_t tcp_stream::part_length(const one_sided_op& op, std::uint32_t part) const noexcept {
  return wire::chunk_size(op.request.local.size, std::uint64_t{part} * limit_, limit_);
}

void tcp_stream::on_response() {
  --unanswered_;
  one_sided_op& op = operations_.front();
  if (header_.status != frame_status::ok) {
    // As when an RC requester gets a NAK: this operation fails, the ones behind it are
    // flushed. The peer's close frame follows; it is not waited for.
    return fail(error::eof, wire::to_error_code(header_.status), flushed(), frame_status::ok);
  }
  const std::uint32_t part = op.answered++;
  // A result goes into the caller's memory only while that is still registered.
  if (header_.type != frame_type::write_response && !op.local_error) op.local_error = local_access(op, part);
  if (op.local_error) {
    fail_on_local_error();  // once every part sent is answered
    return;
  }
  std::uint64_t value = op.request.local.size;
  if (header_.type == frame_type::read_response && header_.length != 0) {
    std::memcpy(static_cast<std::byte*>(op.request.local.data) + std::uint64_t{part} * limit_,
                scratch_.data(), header_.length);
  } else if (header_.type == frame_type::atomic_response) {
    value = header_.compare_add;
    std::memcpy(op.request.local.data, &value, sizeof value);
  }
  if (op.answered < op.frames) return requests_sent_on();
  one_sided_op done = std::move(operations_.front());
  operations_.pop_front();
  --next_to_send_;
  try {
    requests_sent_on();
  } catch (const std::bad_alloc&) {
    finish(done, {}, value, false);  // it succeeded: out of operations_, nothing else would end it
    throw;
  }
  finish(done, {}, value, false);
  fail_on_local_error();  // the next one failed its check while this one was unanswered
}

void tcp_stream::fail_on_local_error() {
  if (broken_ || operations_.empty()) return;
  const one_sided_op& head = operations_.front();
  if (!head.local_error || head.answered != head.sent) return;
  // The peer is healthy, but this side's connection is in error now, as the QP would be: the
  // failing close tells it so, and it flushes what it has outstanding here.
  fail(error::eof, head.local_error, flushed(), frame_status::remote_operation);
}

// A device checks the local key, bounds and right of a request's local buffer as it reads from
// it (a write's) or writes into it (a read's or atomic's result), and fails the request with a
// local protection error; nothing is checked for an empty buffer, which touches no memory.
// `part` is the frame whose bytes are read or written.
error_code tcp_stream::local_access(const one_sided_op& op, std::uint32_t part) const noexcept {
  const verbs::local_buffer& local = op.request.local;
  if (local.size == 0) return {};
  const bool atomic = is_atomic(op.request.op);
  const std::uint64_t offset = atomic ? 0 : std::uint64_t{part} * limit_;
  const std::uint64_t length = atomic ? sizeof(std::uint64_t) : part_length(op, part);
  const error_code ec =
      regions_.check(local.lkey, reinterpret_cast<std::uint64_t>(local.data) + offset, length,
                     sends_local(op.request.op) ? verbs::access::none : verbs::access::local_write);
  return ec ? error_code(make_error_code(wc_errc::local_protection)) : error_code{};
}

// A response opened the window: more requests go out, and then a write or message that waited
// for them (takes_payload).
void tcp_stream::requests_sent_on() {
  const std::uint64_t before = requests_sent_;
  send_requests();
  const bool waited = payload_after_[0] > before || payload_after_[1] > before;
  if (requests_sent_ != before && waited) capacity_available();
}

void tcp_stream::finish(one_sided_op& op, error_code ec, std::uint64_t value, bool defer) {
  if (ec) value = 0;  // a failed operation moved nothing
  if (ec && op.cancelled) ec = error::operation_aborted;  // as a cancelled work request's flush
  disconnect(op);  // its result is known: a cancel from now on changes nothing
  if (op.on_size) return hand_over(std::move(op.on_size), defer, ec, static_cast<std::size_t>(value));
  hand_over(std::move(op.on_value), defer, ec, value);
}

std::uint32_t tcp_stream::register_memory(std::span<std::byte> memory, verbs::access rights,
                                          std::uint32_t& lkey, remote_buffer& remote) {
  remote = regions_.register_region(memory, rights);  // first: a failed one changes nothing
  answers_peer_ = true;
  want_input();
  // One key for both sides (a device gives two): the table checks local uses as it checks the
  // peer's, and a key of another connection's table is as unknown here as its lkey to this PD.
  lkey = remote.rkey;
  return remote.rkey;  // unique while registered, so it is the handle too
}

void tcp_stream::deregister_memory(std::uint32_t handle) noexcept {
  regions_.deregister(handle);
}

}  // namespace coverbs::detail
