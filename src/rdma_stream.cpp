#include "coverbs/detail/rdma_stream.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <cstring>
#include <limits>

namespace coverbs::detail {

namespace error = boost::asio::error;
constexpr std::uint32_t no_buffer = ~0u;

namespace {
// A work request of the stream's own, on one of its buffers; it comes from the stream's
// operation memory, as its users' requests do.
struct buffer_request {
  std::shared_ptr<rdma_stream> self;
  std::uint32_t index;
  using allocator_type = operation_allocator<void>;
  allocator_type get_allocator() const noexcept { return self->allocator(); }
};

// Whether a write with immediate numbered `up_to` or lower still waits for a credit (withdrawn
// ones are passed over).
template <class Waiting>
bool immediates_waiting(const Waiting& waiting, std::uint64_t up_to) noexcept {
  return std::any_of(waiting.begin(), waiting.end(),
                     [&](const auto& w) { return w.handler && w.number <= up_to; });
}

// Whether a request of the stream's ended without the device: its post refused (an errno), or
// its CQ failed (io_error). Neither the peer nor a flush ended it, so its error is the one to
// report. Work completions' statuses have a category of their own (wc_errc).
bool failed_without_device(const error_code& ec) noexcept {
  return ec.category() == boost::system::system_category() && ec != error::operation_aborted;
}

// What reads report after a receive failed. A flush is the end of the stream (the peer
// disconnected: what it sent before came first). The receives posted here are well formed, so
// a receive's own failure is the sender's: a SEND longer than the buffer it landed in breaks
// the protocol, as a malformed frame does over TCP (a local length error on hardware; Soft-RoCE
// reports a local QP operation error). Any other failure cut the connection short, which a
// clean end of stream must not hide.
error_code receive_error(const error_code& ec) noexcept {
  if (failed_without_device(ec)) return ec;
  if (ec == make_error_code(wc_errc::flushed)) return error::eof;
  if (ec == make_error_code(wc_errc::local_length) || ec == make_error_code(wc_errc::local_qp_operation)) {
    return make_error_code(errc::malformed_frame);
  }
  return error::connection_reset;
}
}  // namespace

struct rdma_stream::receive_done : buffer_request {
  void operator()(error_code ec, received r) {
    self->on_receive(index, ec, r);
    self->deliver_local_failure();
  }
};

struct rdma_stream::send_done : buffer_request {
  bool direct, message;
  void operator()(error_code ec, std::size_t) {
    self->on_send(index, ec, direct, message);
    self->deliver_local_failure();
  }
};

// A one-sided operation's handler, counted in one_sided_in_flight_ until it runs.
template <class Handler>
struct rdma_stream::counted_done {
  std::shared_ptr<rdma_stream> self;
  Handler handler;
  template <class Value>
  void operator()(error_code ec, Value value) {
    --self->one_sided_in_flight_;
    std::move(handler)(ec, value);
  }
};

// One that ends in error took no receive of the peer's if it was never posted (withdrawn by a
// cancel while the send queue was full, or refused by the post): its credit comes back. Any
// other error leaves the QP in error, where credits no longer matter.
struct rdma_stream::immediate_done {
  std::shared_ptr<rdma_stream> self;
  size_handler handler;
  using cancellation_slot_type = size_handler::cancellation_slot_type;
  cancellation_slot_type get_cancellation_slot() const noexcept { return handler.get_cancellation_slot(); }
  void operator()(error_code ec, std::size_t n) {
    if (ec) self->credit_unused();
    std::move(handler)(ec, n);
  }
};

rdma_stream::rdma_stream(std::shared_ptr<void> resources, std::unique_ptr<async_queue_pair> qp,
                         const verbs::protection_domain& pd, stream_geometry local)
    : stream_core(qp->get_executor()),
      resources_(std::move(resources)),
      pd_(pd),
      qp_(std::move(qp)),
      local_(local),
      peer_{0, 0},
      receive_memory_(std::make_unique_for_overwrite<std::byte[]>(std::size_t{local.buffers + control_slots} *
                                                                  local.buffer_size)),
      receive_mr_(pd, std::span(receive_memory_.get(), std::size_t{local.buffers + control_slots} * local.buffer_size),
                  verbs::access::local_write) {}

void rdma_stream::set_peer(stream_geometry peer) {
  peer_ = peer;
  const std::size_t size = std::size_t{peer.buffers} * peer.buffer_size;
  send_memory_ = std::make_unique_for_overwrite<std::byte[]>(size);
  send_mr_.emplace(pd_, std::span(send_memory_.get(), size), verbs::access::none);
  credits_ = peer.buffers;
  for (std::uint32_t i = peer.buffers; i > 0; --i) free_send_.push_back(i - 1);
  // Every send the credits allow, in flight at once, and a few of each size for the stream's
  // other operations (handlers waiting, the posts that complete them): the pool would otherwise
  // grow the first time a burst is that large, at any time in a connection's life, which a
  // ping-pong's samples showed (receives are all posted from the start).
  operation_memory& memory = *allocator().memory();
  memory.reserve(send_operation_size(), std::size_t{peer.buffers} + control_slots);
  constexpr std::size_t spare = 4;
  memory.reserve_each_size(spare);
  capacity_available();
}

rdma_stream::~rdma_stream() = default;

std::size_t rdma_stream::send_operation_size() noexcept {
  return sizeof(wr_operation<bytes_result, send_done>);
}

std::size_t rdma_stream::receive_operation_size() noexcept {
  return sizeof(wr_operation<received_result, receive_done>);
}

std::size_t rdma_stream::immediate_operation_size() noexcept {
  using counted = boost::asio::cancellation_slot_binder<
      boost::asio::allocator_binder<counted_done<immediate_done>, operation_allocator<void>>,
      immediate_done::cancellation_slot_type>;
  return sizeof(wr_operation<bytes_result, counted>);
}

void rdma_stream::start() {
  // While connecting, a failure is the connect's (the stream is dropped with what it posted:
  // fail_soon's QP in error flushes those receives, which hold the stream until then).
  for (std::uint32_t i = 0; i < local_.buffers + control_slots; ++i) {
    if (!post_receive(i)) throw std::bad_alloc();
  }
}

// Counted only once posted: a completion never runs inside the post (a refused one is posted).
bool rdma_stream::post_receive(std::uint32_t index) {
  auto buffer = receive_mr_.slice(std::size_t{index} * local_.buffer_size, local_.buffer_size);
  if (!started([&] {
        detail::start<received_result>(
            receive_done{{shared_from_this(), index}}, qp_->receive_queue(), false, [&](operation& op) {
              op.sge = {reinterpret_cast<std::uint64_t>(buffer.data), buffer.size, buffer.lkey};
            });
      })) {
    return false;
  }
  ++receives_posted_;
  return true;
}

template <class Start>
bool rdma_stream::started(Start start) {
  try {
    start();
  } catch (const std::bad_alloc&) {
    fail_soon(out_of_memory());
    return false;
  }
  return true;
}

void rdma_stream::fail_soon(error_code ec) noexcept {
  const bool first = !local_failure_;
  if (first) local_failure_ = ec;
  qp_->close();
  if (closed_) {
    // close() no longer waits to send its FIN or flush marker: the flushes of the sends still
    // posted end it, or nothing is left to wait for.
    fin_wanted_ = flush_wanted_ = false;
    if (sends_posted_ == 0) finish_close();
    return;
  }
  // Failed already: that failure stands. Else the completions of what is posted deliver `ec`
  // (deliver_local_failure).
  if (!first || failed() || receives_posted_ + sends_posted_ > 0) return;
  // Nothing is posted to be flushed (every receive buffer held by unread bytes): posted from
  // the stream's own memory, which a connection's reservations keep blocks in.
  try {
    boost::asio::post(get_executor(), boost::asio::bind_allocator(allocator(), [self = shared_from_this()] {
                        self->fail(self->local_failure_);
                      }));
  } catch (const std::bad_alloc&) {
    // Two failures in a row with nothing in flight: operations waiting now wait until close().
  }
}

void rdma_stream::deliver_local_failure() {
  if (local_failure_ && !failed() && !closed_ && receives_posted_ + sends_posted_ == 0) fail(local_failure_);
}

std::uint32_t rdma_stream::take_send_slot() noexcept {
  const std::uint32_t index = free_send_.back();
  free_send_.pop_back();
  return index;
}

// A copied send's only use for its completion is its slot back, so where the CQ is polled most
// go unsignalled (as perftest posts them), their completions implied by a later signalled one.
// Signalled: direct sends (their write waits for them), control messages (rare; their credits
// must come back), and any send that leaves the pool half empty or less, so that whenever
// slots run short a signalled send is in flight behind the sends that hold them. In event mode
// small sends are signalled too: there, in the Soft-RoCE VM, the wake-up a small send's
// completion causes made the wake-up for the reply faster (64 B ping-pong p50, 6 alternating
// pairs: 88-209 us signalled, 111-319 us not; 1 KiB, 3 pairs: 155-188 against 205-273), while
// from 8 KiB on that wake-up only competes with the reply's packet work for the CPU (16 KiB
// 1038-1723 us signalled against 730-984; 64 KiB 4023-4382 against 2377-2601; 4 KiB even).
// Busy and adaptive modes were as fast or faster unsignalled at every size.
bool rdma_stream::signal_send(std::uint32_t index, bool direct, std::size_t bytes) const noexcept {
  constexpr std::size_t event_mode_signal_limit = 4096;
  return direct || index == no_buffer || free_send_.size() <= peer_.buffers / 2 ||
         (bytes <= event_mode_signal_limit && qp_->send_queue().engine().options.mode == polling_mode::event);
}

bool rdma_stream::post_send(std::uint32_t index, verbs::local_buffer data, std::uint32_t flags, bool direct) {
  const bool signalled = signal_send(index, direct, data.size);
  const std::uint32_t imm = flags | credits_to_return_;
  auto fill = [&](operation& op) {
    if (data.size == 0) {
      op.wr.send.num_sge = 0;
    } else {
      op.sge = {reinterpret_cast<std::uint64_t>(data.data), data.size, data.lkey};
    }
    op.wr.send.opcode = IBV_WR_SEND_WITH_IMM;
    op.wr.send.imm_data = htonl(imm);
    if (!signalled) op.wr.send.send_flags = 0;
  };
  const bool message = (flags & stream_imm::message_bit) != 0;
  if (!started([&] {
        detail::start<bytes_result>(send_done{{shared_from_this(), index}, direct, message},
                                    qp_->send_queue(), true, fill);
      })) {
    if (index != no_buffer) free_send_.push_back(index);  // within the capacity set_peer gave it
    return false;
  }
  credits_to_return_ = 0;
  unsignalled_tail_ = !signalled;
  --(index == no_buffer ? control_credits_ : credits_);
  ++sends_posted_;
  return true;
}

std::size_t rdma_stream::transmit(const_buffer_list& buffers, bool message) {
  std::size_t total = 0;
  if (message && buffers.empty()) {  // an empty message still takes a buffer and a credit
    if (!writable()) return 0;
    return post_send(take_send_slot(), {}, stream_imm::message_bit) ? 1 : 0;
  }
  // A stream write copies no further than the next piece transmit_direct can send.
  const std::size_t limit = message ? peer_.buffer_size : copyable_prefix(buffers);
  while (total < limit && !buffers.empty() && writable()) {
    const std::uint32_t index = take_send_slot();
    std::byte* out = send_memory_.get() + std::size_t{index} * peer_.buffer_size;
    std::size_t n = 0;
    buffers.visit_front(std::min<std::size_t>(peer_.buffer_size, limit - total),
                        [&](std::size_t, auto piece) {
                          std::memcpy(out + n, piece.data(), piece.size());
                          n += piece.size();
                        });
    // Consumed once posted: bytes that were not sent stay the write's, which fails (fail_soon)
    // instead of reporting them written.
    if (!post_send(index, send_mr_->slice(std::size_t{index} * peer_.buffer_size, n),
                   message ? stream_imm::message_bit : 0)) {
      break;
    }
    buffers.consume(n);
    total += n;
    if (message) break;
  }
  return total;
}

// Stream bytes from memory registered on this connection go out as the same SENDs into the
// peer's receive buffers as copied ones (the peer cannot tell them apart), each taking a credit
// and a send-pool slot (which bounds the sends in flight) but not the slot's memory. Such a
// write completes only when its last SEND has (the device reads the memory until then), a
// round trip later than a copied one; so only a run of registered bytes that fills several
// SENDs goes out directly. asio::async_write offers at most 64 KiB per write_some, which is
// copied: direct writes are for async_write_some calls with large buffers.
std::size_t rdma_stream::direct_threshold() const noexcept {
  return std::max<std::size_t>(min_direct_bytes, std::size_t{4} * peer_.buffer_size);
}

rdma_stream::located_pieces rdma_stream::locate(const const_buffer_list& buffers) const noexcept {
  located_pieces front;
  front.count = buffers.view_front(buffers.bytes(), front.pieces);
  for (std::size_t i = 0; i < front.count; ++i) front.regions[i] = region_holding(front.pieces[i]);
  return front;
}

std::size_t rdma_stream::transmit_direct(const const_buffer_list& buffers, bool message) {
  if (regions_.empty() || fin_wanted_ || posting_stopped()) return 0;
  if (message) return zero_copy_messages_ ? transmit_direct_message(buffers) : 0;
  const located_pieces front = locate(buffers);
  std::size_t registered = 0;
  for (std::size_t i = 0; i < front.count && front.regions[i] != nullptr; ++i)
    registered += front.pieces[i].size();
  if (registered < direct_threshold()) return 0;
  std::size_t total = 0;
  // One post for all of them: nothing is copied in between (a copied write posts each send as
  // soon as it is filled, so that the device sends while the next is copied).
  const detail::posting_queue::batch together(qp_->send_queue());
  for (std::size_t i = 0; i < front.count && front.regions[i] != nullptr; ++i) {
    // A piece in no region is copied by transmit, once the direct sends before it are done.
    const auto* data = static_cast<const std::byte*>(front.pieces[i].data());
    for (std::size_t left = front.pieces[i].size(); left > 0;) {
      if (free_send_.empty() || credits_ < 1) return total;
      const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(left, peer_.buffer_size));
      if (!post_direct(data, n, *front.regions[i], false)) return total;
      data += n;
      left -= n;
      total += n;
    }
  }
  return total;
}

// A message fills one receive buffer, so it is one SEND whichever way it goes: from the
// caller's registered memory it saves the copy into the send pool, and completes when the SEND
// has (the device reads that memory until then), so a socket's messages then go one per round
// trip; hence an option. A message in several pieces would need a gather list; it is copied.
std::size_t rdma_stream::transmit_direct_message(const const_buffer_list& buffers) {
  const located_pieces front = locate(buffers);
  if (front.count != 1 || front.regions[0] == nullptr || front.pieces[0].size() > peer_.buffer_size) return 0;
  if (free_send_.empty() || credits_ < 1) return 0;  // transmit waits for them as well
  const auto n = static_cast<std::uint32_t>(front.pieces[0].size());
  return post_direct(static_cast<const std::byte*>(front.pieces[0].data()), n, *front.regions[0], true) ? n
                                                                                                        : 0;
}

bool rdma_stream::post_direct(const std::byte* data, std::uint32_t n, const verbs::memory_region& region,
                              bool message) {
  if (!post_send(take_send_slot(), {const_cast<std::byte*>(data), n, region.lkey()},
                 message ? stream_imm::message_bit : 0, true)) {
    return false;
  }
  ++direct_sends_[message];
  return true;
}

std::size_t rdma_stream::copyable_prefix(const const_buffer_list& buffers) const noexcept {
  if (regions_.empty()) return std::numeric_limits<std::size_t>::max();
  const located_pieces front = locate(buffers);
  // transmit_direct declined what starts at the first piece; the prefix ends where the next
  // run of registered pieces long enough for it starts.
  std::size_t direct_from = front.count, run = 0;
  for (std::size_t i = front.count; i-- > 1;) {
    run = front.regions[i] != nullptr ? run + front.pieces[i].size() : 0;
    if (run >= direct_threshold()) direct_from = i;
  }
  std::size_t prefix = 0;
  for (std::size_t i = 0; i < direct_from; ++i) prefix += front.pieces[i].size();
  return prefix;
}

const verbs::memory_region* rdma_stream::region_holding(boost::asio::const_buffer bytes) const noexcept {
  const auto* begin = static_cast<const std::byte*>(bytes.data());
  auto it = regions_by_address_.upper_bound(begin);
  if (it == regions_by_address_.begin()) return nullptr;
  const verbs::memory_region* region = std::prev(it)->second;  // the nearest start at or before
  const std::span<std::byte> memory = region->memory();
  return begin + bytes.size() <= memory.data() + memory.size() ? region : nullptr;
}

void rdma_stream::release(std::uint32_t tag) {
  if (posting_stopped() || !post_receive(tag)) return;
  ++credits_to_return_;
  send_control_messages();
}

void rdma_stream::immediate_taken() {
  while (!held_receives_.empty() && immediates_held() < max_held_immediates) {
    const std::uint32_t index = held_receives_.back();
    held_receives_.pop_back();
    release(index);
  }
}

void rdma_stream::send_control_messages() {
  if (posting_stopped()) return;
  send_fin();
  // Report re-posted buffers once half the pool is back, unless data will carry them soon.
  if (credits_to_return_ >= std::max<std::uint32_t>(1, local_.buffers / 2) && control_credits_ >= 1) {
    post_send(no_buffer, {}, 0);
  }
}

void rdma_stream::on_receive(std::uint32_t index, error_code ec, received r) {
  --receives_posted_;
  if (ec) {
    // A flush means the QP left RTS: closed here, or the peer disconnected. A receive that
    // failed to post left it up: see on_send.
    if (!closed_) qp_->close();
    if (closed_) return fail(error::operation_aborted);
    return fail(local_failure_ ? local_failure_ : receive_error(ec));
  }
  if (r.rdma_immediate) {
    // A peer's write_with_immediate took a receive (and one of its credits); the data it
    // wrote is in place now, so the immediate can be handed out and the buffer returned,
    // unless too many wait to be taken: kept, it is a credit the peer goes without, and once
    // it has none its sends wait too (as TCP's stop when reading stops).
    deliver_immediate(r.imm);
    if (immediates_held() >= max_held_immediates) return held_receives_.push_back(index);
    return release(index);
  }
  credits_ += r.imm & stream_imm::credits_mask;
  // Writes with immediate that waited for credits take them first: a handler run below may
  // send, and what it sends was started after them (as the FIN, which waits for them).
  start_waiting_immediates();
  const segment s{receive_memory_.get() + std::size_t{index} * local_.buffer_size, r.bytes, index};
  if ((r.imm & stream_imm::message_bit) != 0) {
    deliver_message(s);
  } else if (r.bytes > 0) {
    deliver_bytes(s);
  } else if (!closed_) {
    post_receive(index);  // control slots are implicit credits: see control_slots
  }
  if ((r.imm & stream_imm::fin_bit) != 0) deliver_end_of_stream();
  send_control_messages();
  capacity_available();
}

void rdma_stream::on_send(std::uint32_t index, error_code ec, bool direct, bool message) {
  --sends_posted_;
  if (index != no_buffer) free_send_.push_back(index);
  if (index == no_buffer && !ec) ++control_credits_;
  if (direct && ec && !direct_error_[message]) direct_error_[message] = ec;
  // A direct write or message ends when the device no longer reads the caller's memory: after
  // its last send, failed ones included (a flushed request held the memory until its completion).
  const bool direct_ended = direct && --direct_sends_[message] == 0;
  if (direct_ended && direct_sends_[!message] == 0) retired_regions_.clear();
  if (closed_) {
    if (ec) {
      // A send that failed to post left the QP up (see below); in error, its flush (and the
      // send queue's marker) ends every send still posted, unsignalled ones included.
      fin_wanted_ = flush_wanted_ = false;
      qp_->close();
    }
    end_after_close();
  } else if (ec) {
    // A send that failed to post left the QP up, and the unsignalled sends posted before it
    // would then never complete: close() could not finish. A QP in error flushes them all
    // (and is where any other failed send has left it already).
    qp_->close();
    // As TCP's lost connection: reads see a reset, writes broken_pipe; a flush means the QP
    // went down for another reason (the peer's disconnect), whose receives report it.
    if (local_failure_) {
      fail(local_failure_);
    } else if (failed_without_device(ec)) {
      fail(ec);
    } else {
      fail(ec == make_error_code(wc_errc::flushed) ? error_code(error::eof)
                                                   : error_code(error::connection_reset));
    }
  } else {
    send_control_messages();
  }
  if (direct_ended) {
    const error_code first_error = std::exchange(direct_error_[message], {});
    direct_done(message, first_error || !closed_
                             ? first_error
                             : error_code(error::operation_aborted));  // as close() ends writes
  }
  if (!closed_ && !ec) capacity_available();
}

void rdma_stream::shutdown_send() {
  fin_wanted_ = true;
  fin_after_immediate_ = immediates_waited_;  // later ones do not hold the FIN back
  send_control_messages();
}

void rdma_stream::peer_disconnected() {
  qp_->close();  // flushes every posted request; their completions report the failure
}

void rdma_stream::finish_close() {
  if (close_finished_) return;
  close_finished_ = true;
  if (close_timer_) close_timer_->cancel();
  disconnect();
  qp_->close();
}

void rdma_stream::disconnect() {
  if (auto d = std::exchange(disconnect_, nullptr)) d();
}

template <class Handler, class Start>
std::optional<Handler> rdma_stream::start_counted(Handler handler, Start start) {
  auto slot = boost::asio::get_associated_cancellation_slot(handler);
  auto counted = boost::asio::bind_cancellation_slot(
      slot, boost::asio::bind_allocator(allocator(),
                                        counted_done<Handler>{shared_from_this(), std::move(handler)}));
  ++one_sided_in_flight_;
  try {
    start(std::move(counted));
  } catch (const std::bad_alloc&) {
    --one_sided_in_flight_;
    return std::move(counted.get().get().handler);
  } catch (...) {
    --one_sided_in_flight_;
    throw;
  }
  return std::nullopt;
}

template <class Handler, class Start>
void rdma_stream::start_counted_or_throw(Handler handler, Start start) {
  if (start_counted(std::move(handler), std::move(start))) throw std::bad_alloc();
}

void rdma_stream::transfer(const one_sided_request& request, size_handler handler) {
  using kind = one_sided_request::kind;
  if (request.op == kind::write_with_immediate) {
    // A failed or failing connection gives no credits back: fail at once, as the QP in error would.
    if (failed() || local_failure_)
      return hand_over(std::move(handler), true, make_error_code(wc_errc::flushed), std::size_t{0});
    start_waiting_immediates();  // passes over withdrawn ones at the front
    if (credits_ >= 1 && waiting_immediates_.empty()) {
      if (start_write_with_immediate(request, std::move(handler))) throw std::bad_alloc();
      return;
    }
    waiting_immediates_.push_back({request, std::move(handler), immediates_waited_ + 1});
    const waiting_immediate& w = waiting_immediates_[waiting_immediates_.size() - 1];
    ++immediates_waited_;
    return watch_withdrawal(w);
  }
  start_counted_or_throw(std::move(handler), [&](auto&& counted) {
    start_one_sided(std::move(counted), qp_->send_queue(),
                    request.op == kind::read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, request.local,
                    request.remote);
  });
}

void rdma_stream::watch_withdrawal(const waiting_immediate& w) {
  if (auto slot = w.handler.get_cancellation_slot(); slot.is_connected()) {
    slot.assign([this, number = w.number](boost::asio::cancellation_type) { withdraw_immediate(number); });
  }
}

std::optional<size_handler> rdma_stream::start_write_with_immediate(const one_sided_request& request,
                                                                    size_handler handler) {
  auto back = start_counted(immediate_done{shared_from_this(), std::move(handler)}, [&](auto&& counted) {
    start_one_sided(std::move(counted), qp_->send_queue(), IBV_WR_RDMA_WRITE_WITH_IMM, request.local,
                    request.remote, request.immediate);
  });
  if (back) return std::move(back->handler);
  --credits_;  // once started: one that could not be allocated took none
  return std::nullopt;
}

void rdma_stream::credit_unused() {
  if (failed()) return;
  ++credits_;
  start_waiting_immediates();
  send_control_messages();  // the FIN may have waited for the last of them
  capacity_available();
}

void rdma_stream::start_waiting_immediates() {
  if (local_failure_) return;  // its posts would only be flushed: the failure ends them (fail)
  while (!waiting_immediates_.empty() && (credits_ >= 1 || !waiting_immediates_.front().handler)) {
    waiting_immediate& w = waiting_immediates_.front();
    if (w.handler) {
      w.handler.clear_cancellation_slot();  // posting gives the slot to the work request
      const std::uint64_t number = w.number;
      if (auto back = start_write_with_immediate(w.request, std::move(w.handler))) {
        // Not this caller's operation to throw from: it waits on, and the connection fails as
        // when a send cannot be allocated, ending it with the others that wait. A handler
        // that did not come back (a failure past the allocation destroyed it) may have closed
        // the socket as it went, taking the queue: found again by its number.
        if (waiting_immediate* again = waiting_immediates_.find_numbered(number); again && *back) {
          again->handler = std::move(*back);
          try {
            watch_withdrawal(*again);
          } catch (const std::bad_alloc&) {
            // Cannot be withdrawn then: it ends with the failure, as the others that wait.
          }
        }
        return fail_soon(out_of_memory());
      }
    }
    waiting_immediates_.pop_front();  // started, or withdrawn while it waited
  }
}

// Withdrawn ones stay in their place (numbers stay consecutive, so finding one is an index).
void rdma_stream::withdraw_immediate(std::uint64_t number) {
  waiting_immediate* w = waiting_immediates_.find_numbered(number);
  if (w == nullptr || !w->handler) return;
  size_handler handler = std::move(w->handler);
  // Clears the slot whose handler runs this (as stream_core::cancel does): nothing of that
  // handler is touched afterwards.
  handler.clear_cancellation_slot();
  hand_over(std::move(handler), true, error_code(error::operation_aborted), std::size_t{0});
  // The FIN may have waited for it: outside the canceller's call, which posts nothing itself.
  if (fin_wanted_ && !fin_sent_) {
    boost::asio::post(get_executor(), [self = shared_from_this()] { self->send_control_messages(); });
  }
}

// Stream operations see `ec`; writes with immediate still waiting for a credit end as the
// posted ones do when the QP fails. A connection that failed here (a local error, a terminal
// cancel, a send that could not be posted) is over for the peer too, which would otherwise
// learn it only when this side closes: a peer that only reads would wait until then, where
// over TCP the failing close tells it at once. (A peer that left gets its DREQ answered.)
void rdma_stream::fail(error_code ec, bool defer) {
  if (!closed_) disconnect();
  deliver_failure(ec, defer);
  fifo<waiting_immediate> waiting = waiting_immediates_.take();
  for (auto& w : waiting) w.handler.clear_cancellation_slot();  // before any handler runs
  for (auto& w : waiting) {
    if (w.handler) hand_over(std::move(w.handler), defer, make_error_code(wc_errc::flushed), std::size_t{0});
  }
}

void rdma_stream::atomic(const one_sided_request& request, value_handler handler) {
  const bool add = request.op == one_sided_request::kind::fetch_add;
  start_counted_or_throw(std::move(handler), [&](auto&& counted) {
    detail::start_atomic(std::move(counted), qp_->send_queue(),
                         add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP, request.local,
                         request.remote, request.compare_add, request.swap);
  });
}

std::uint32_t rdma_stream::register_memory(std::span<std::byte> memory, verbs::access rights,
                                           std::uint32_t& lkey, remote_buffer& remote) {
  // The connection's own protection domain: the key is useless on any other connection.
  auto mr = std::make_unique<verbs::memory_region>(pd_, memory, rights);
  lkey = mr->lkey();
  remote = mr->remote();
  // So that deregister_memory, which may have to retire a region, never allocates.
  retired_regions_.reserve(regions_.size() + retired_regions_.size() + 1);
  // lkeys are unique; rkeys of local-only regions are all 0
  const auto& region = regions_[lkey] = std::move(mr);
  try {
    regions_by_address_.emplace(memory.data(), region.get());
  } catch (...) {
    regions_.erase(lkey);
    throw;
  }
  return lkey;
}

void rdma_stream::deregister_memory(std::uint32_t handle) noexcept {
  const auto it = regions_.find(handle);
  if (it == regions_.end()) return;
  const auto [first, last] = regions_by_address_.equal_range(it->second->memory().data());
  for (auto at = first; at != last; ++at) {
    if (at->second == it->second.get()) {
      regions_by_address_.erase(at);
      break;
    }
  }
  // A direct write or message may be sending from it: deregistering now would fail its sends.
  if (direct_sends_[false] + direct_sends_[true] > 0) retired_regions_.push_back(std::move(it->second));
  regions_.erase(it);
}

void rdma_stream::destroy_handlers() noexcept {
  const auto self = weak_from_this().lock();
  if (!self) return;  // being destroyed already
  fifo<waiting_immediate> waiting = waiting_immediates_.take();
  for (auto& w : waiting) w.handler.clear_cancellation_slot();
  destroy_pending();
}

void rdma_stream::close() {
  if (closed_) return;
  closed_ = true;
  // Like closing a TCP socket: bytes already written still reach the peer, then the end of the
  // stream, in band: the peer's DISCONNECTED would tell it as well, but the DREQ behind that
  // event is one datagram, not resent once this side has destroyed its rdma_cm id, and a peer
  // that missed it would wait for ever. Not while one-sided operations of this side's are in
  // flight, though: they would complete before the FIN, and closing cancels them (the QP goes
  // to the error state once the stream's own sends are done, flushing them). A failed
  // connection's QP is in that state already: its flush (and the send queue's marker, see
  // posting_queue::qp_in_error) completes every send. Nor while the execution context shuts
  // down: a request posted after its completion service destroyed the handlers in flight would
  // never be destroyed, and its handler owns this stream.
  const bool healthy = connected() && !failed() && !local_failure_ && !qp_->send_queue().engine().abandoned();
  fin_wanted_ = healthy && one_sided_in_flight_ == 0;
  flush_wanted_ = healthy && !fin_wanted_ && unsignalled_tail_;
  fail(error::operation_aborted, true);
  end_after_close();
  // Not once the context shuts down: nothing completes then, and the stream goes with it.
  if (!close_finished_ && !qp_->send_queue().engine().abandoned()) start_close_timer();
}

// What close() still sends normally completes within a round trip, or fails once the QP's
// retries run out; but a peer whose QP is up and posts no receive (a stopped process) answers
// receiver-not-ready, which the QP retries for ever (and before the retry count was lowered
// to 6, Soft-RoCE retried a gone peer's transport timeouts for ever too: the lossy-link test).
// That would keep this stream, its QP and io_context::run alive: past the timeout the
// connection is dropped, and the QP in error flushes what is still posted.
void rdma_stream::start_close_timer() {
  close_timer_.emplace(get_executor(), close_timeout_);
  // Not in the stream's operation memory: the stream may be gone before the aborted wait is.
  close_timer_->async_wait([weak = weak_from_this()](error_code ec) {
    if (auto self = weak.lock(); self && !ec) self->finish_close();
  });
}

// What close() still sends goes out once a control slot of the peer's is free (one comes back
// with each control message's completion): the FIN, or an empty control message when the last
// send raises no completion of its own. Either is signalled, so its completion also stands for
// the unsignalled sends before it; every send after it is signalled too.
void rdma_stream::end_after_close() {
  if (sends_posted_ == 0 && (!fin_wanted_ || fin_sent_)) return finish_close();
  send_fin();
  if (flush_wanted_ && control_credits_ >= 1) {  // never wanted together with the FIN
    flush_wanted_ = false;
    post_send(no_buffer, {}, 0);
  }
}

// The end of the stream comes after everything started before it, writes with immediate that
// wait for a credit included (the TCP transport's close frame waits for its requests likewise);
// a control message needs no credit, so it would overtake them.
void rdma_stream::send_fin() {
  if (!fin_wanted_ || fin_sent_ || control_credits_ < 1 ||
      immediates_waiting(waiting_immediates_, fin_after_immediate_)) {
    return;
  }
  fin_sent_ = true;
  post_send(no_buffer, {}, stream_imm::fin_bit);
}

}  // namespace coverbs::detail
