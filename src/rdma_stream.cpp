#include "coverbs/detail/rdma_stream.hpp"

#include <arpa/inet.h>

#include <boost/asio/error.hpp>

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
}  // namespace

struct rdma_stream::receive_done : buffer_request {
  void operator()(error_code ec, received r) { self->on_receive(index, ec, r); }
};

struct rdma_stream::send_done : buffer_request {
  void operator()(error_code ec, std::size_t) { self->on_send(index, ec); }
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
  capacity_available();
}

rdma_stream::~rdma_stream() = default;

void rdma_stream::start() {
  for (std::uint32_t i = 0; i < local_.buffers + control_slots; ++i) post_receive(i);
}

void rdma_stream::post_receive(std::uint32_t index) {
  ++receives_posted_;
  auto buffer = receive_mr_.slice(std::size_t{index} * local_.buffer_size, local_.buffer_size);
  detail::start<received_result>(receive_done{{shared_from_this(), index}}, qp_->receive_queue(), false,
                         [&](operation& op) {
                           op.sge = {reinterpret_cast<std::uint64_t>(buffer.data), buffer.size, buffer.lkey};
                         });
}

std::uint32_t rdma_stream::take_credits() noexcept {
  const std::uint32_t n = credits_to_return_;
  credits_to_return_ = 0;
  return n;
}

void rdma_stream::post_send(std::uint32_t index, std::size_t length, std::uint32_t flags) {
  --(index == no_buffer ? control_credits_ : credits_);
  ++sends_posted_;
  const std::uint32_t imm = flags | take_credits();
  detail::start<bytes_result>(send_done{{shared_from_this(), index}}, qp_->send_queue(), true, [&](operation& op) {
    if (index == no_buffer) {
      op.wr.send.num_sge = 0;
    } else {
      auto b = send_mr_->slice(std::size_t{index} * peer_.buffer_size, length);
      op.sge = {reinterpret_cast<std::uint64_t>(b.data), b.size, b.lkey};
    }
    op.wr.send.opcode = IBV_WR_SEND_WITH_IMM;
    op.wr.send.imm_data = htonl(imm);
  });
}

std::size_t rdma_stream::transmit(const_buffer_list& buffers, bool message) {
  std::size_t total = 0;
  if (message && buffers.empty()) {  // an empty message still takes a buffer and a credit
    if (free_send_.empty() || credits_ < 1 || fin_wanted_ || closed_) return 0;
    const std::uint32_t index = free_send_.back();
    free_send_.pop_back();
    post_send(index, 0, stream_imm::message_bit);
    return 1;
  }
  while (!buffers.empty() && !free_send_.empty() && credits_ >= 1 && !fin_wanted_ && !closed_) {
    const std::uint32_t index = free_send_.back();
    free_send_.pop_back();
    std::byte* out = send_memory_.get() + std::size_t{index} * peer_.buffer_size;
    const std::size_t n = buffers.take(out, peer_.buffer_size);
    post_send(index, n, message ? stream_imm::message_bit : 0);
    total += n;
    if (message) break;
  }
  return total;
}

void rdma_stream::release(std::uint32_t tag) {
  if (closed_ || failed()) return;
  post_receive(tag);
  ++credits_to_return_;
  send_control_messages();
}

void rdma_stream::send_control_messages() {
  if (closed_ || failed()) return;
  if (fin_wanted_ && !fin_sent_ && control_credits_ >= 1) {
    fin_sent_ = true;
    post_send(no_buffer, 0, stream_imm::fin_bit);
  }
  // Report re-posted buffers once half the pool is back, unless data will carry them soon.
  if (credits_to_return_ >= std::max<std::uint32_t>(1, local_.buffers / 2) && control_credits_ >= 1) {
    post_send(no_buffer, 0, 0);
  }
}

void rdma_stream::on_receive(std::uint32_t index, error_code ec, received r) {
  --receives_posted_;
  if (ec) {
    // A flush means the QP left RTS: closed here, or the peer disconnected.
    return deliver_failure(closed_ ? error_code(error::operation_aborted) : error_code(error::eof));
  }
  if (r.rdma_immediate) {
    // A peer's write_with_immediate took a receive (and one of its credits); the data it
    // wrote is in place now, so the immediate can be handed out and the buffer returned.
    deliver_immediate(r.imm);
    return release(index);
  }
  credits_ += r.imm & stream_imm::credits_mask;
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
  while (!waiting_immediates_.empty() && credits_ >= 1) {
    auto w = std::move(waiting_immediates_.front());
    waiting_immediates_.pop_front();
    start_write_with_immediate(w.request, std::move(w.handler));
  }
  capacity_available();
}

void rdma_stream::on_send(std::uint32_t index, error_code ec) {
  --sends_posted_;
  if (index != no_buffer) free_send_.push_back(index);
  if (index == no_buffer && !ec) ++control_credits_;
  if (closed_) {
    if (sends_posted_ == 0) finish_close();
    return;
  }
  if (ec) return deliver_failure(closed_ ? error_code(error::operation_aborted) : error_code(error::broken_pipe));
  send_control_messages();
  capacity_available();
}

void rdma_stream::shutdown_send() {
  fin_wanted_ = true;
  send_control_messages();
}

void rdma_stream::peer_disconnected() {
  qp_->close();  // flushes every posted request; their completions report the failure
}

void rdma_stream::finish_close() {
  if (close_finished_) return;
  close_finished_ = true;
  if (disconnect_) disconnect_();
  qp_->close();
}

void rdma_stream::transfer(const one_sided_request& request, size_handler handler) {
  using kind = one_sided_request::kind;
  if (request.op == kind::write_with_immediate) {
    if (credits_ >= 1 && waiting_immediates_.empty()) return start_write_with_immediate(request, std::move(handler));
    waiting_immediates_.push_back({request, std::move(handler)});
    return;
  }
  start_one_sided(std::move(handler), qp_->send_queue(),
                  request.op == kind::read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, request.local,
                  request.remote);
}

void rdma_stream::start_write_with_immediate(const one_sided_request& request, size_handler handler) {
  --credits_;
  start_one_sided(std::move(handler), qp_->send_queue(), IBV_WR_RDMA_WRITE_WITH_IMM, request.local,
                  request.remote, request.immediate);
}

void rdma_stream::atomic(const one_sided_request& request, value_handler handler) {
  const bool add = request.op == one_sided_request::kind::fetch_add;
  detail::start_atomic(std::move(handler), qp_->send_queue(), add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP,
               request.local, request.remote, request.compare_add, request.swap);
}

std::uint32_t rdma_stream::register_memory(std::span<std::byte> memory, verbs::access rights,
                                           std::uint32_t& lkey, remote_buffer& remote) {
  // The connection's own protection domain: the key is useless on any other connection.
  auto mr = std::make_unique<verbs::memory_region>(pd_, memory, rights);
  lkey = mr->lkey();
  remote = mr->remote();
  regions_[lkey] = std::move(mr);  // lkeys are unique; rkeys of local-only regions are all 0
  return lkey;
}

void rdma_stream::deregister_memory(std::uint32_t handle) noexcept { regions_.erase(handle); }

void rdma_stream::destroy_handlers() noexcept {
  const auto self = weak_from_this().lock();
  if (!self) return;  // being destroyed already
  const fifo<waiting_immediate> waiting = waiting_immediates_.take();
  destroy_pending();
}

void rdma_stream::close() {
  if (closed_) return;
  closed_ = true;
  deliver_failure(error::operation_aborted, true);
  // Like closing a TCP socket, bytes already written still reach the peer: the QP stays up
  // until the last send has been acknowledged (or has failed).
  if (sends_posted_ == 0) finish_close();
}

}  // namespace coverbs::detail
