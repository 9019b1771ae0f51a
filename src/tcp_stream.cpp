#include "coverbs/detail/tcp_stream.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace coverbs::detail {

namespace error = boost::asio::error;
using wire::frame_type;

namespace {
// Received bytes held for the application before reading pauses (TCP then holds the peer back).
constexpr std::size_t max_held_bytes = 4u << 20;
// Bytes queued for sending before writes wait: enough to keep TCP busy, bounded for slow peers.
constexpr std::size_t max_outgoing_bytes = 2u << 20;
}  // namespace

tcp_stream::tcp_stream(boost::asio::ip::tcp::socket socket, std::size_t max_message)
    : stream_core(socket.get_executor()),
      socket_(std::move(socket)),
      max_message_(std::min<std::size_t>(max_message, wire::max_payload_size)) {
  socket_.set_option(boost::asio::ip::tcp::no_delay(true));
}

tcp_stream::~tcp_stream() = default;

void tcp_stream::start() {
  wire::frame_header hello{.type = frame_type::hello, .length = wire::max_payload_size};
  queue_frame(hello, nullptr, 0);
  read_header();
}

// --- receiving ----------------------------------------------------------------------------

void tcp_stream::read_header() {
  if (closed_ || failed()) return;
  if (held_bytes_ >= max_held_bytes) {
    read_paused_ = true;
    return;
  }
  reading_ = true;
  boost::asio::async_read(socket_, boost::asio::buffer(header_bytes_),
                          [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
}

void tcp_stream::on_header(error_code ec) {
  reading_ = false;
  if (closed_) return;
  if (ec) return fail(ec == error::eof ? error_code(error::eof) : ec, wire::frame_status::ok);
  if (auto bad = wire::decode_header(header_bytes_, header_); bad) {
    return fail(bad, wire::frame_status::protocol_error);
  }
  const bool first = peer_limit_ == 0;
  if (first != (header_.type == frame_type::hello)) {
    return fail(make_error_code(errc::malformed_frame), wire::frame_status::protocol_error);
  }
  if (header_.payload_length == 0) return handle_frame();
  // Only data and messages carry payload this side accepts; decode_header bounded its size.
  if (header_.type != frame_type::data && header_.type != frame_type::message) {
    return fail(make_error_code(errc::unsupported_operation), wire::frame_status::remote_operation);
  }
  reading_slot_ = take_slot();
  auto& slot = slots_[reading_slot_];
  slot.resize(header_.payload_length);
  reading_ = true;
  boost::asio::async_read(socket_, boost::asio::buffer(slot),
                          [self = shared_from_this()](error_code ec, std::size_t) { self->on_payload(ec); });
}

void tcp_stream::on_payload(error_code ec) {
  reading_ = false;
  if (closed_) return;
  if (ec) return fail(make_error_code(errc::malformed_frame), wire::frame_status::protocol_error);
  handle_frame();
}

void tcp_stream::handle_frame() {
  switch (header_.type) {
    case frame_type::hello:
      peer_limit_ = std::max(header_.length, wire::min_payload_limit);
      capacity_available();
      break;
    case frame_type::data:
    case frame_type::message: {
      const auto& slot = slots_[reading_slot_];
      held_bytes_ += slot.size();
      const segment s{slot.data(), slot.size(), reading_slot_};
      if (header_.type == frame_type::data) {
        deliver_bytes(s);
      } else if (header_.length != header_.payload_length) {
        return fail(make_error_code(errc::malformed_frame), wire::frame_status::protocol_error);
      } else {
        deliver_message(s);
      }
      break;
    }
    case frame_type::close:
      if (header_.status == wire::frame_status::ok) {
        deliver_end_of_stream();
        break;  // the peer may still read; we keep reading until its socket closes
      }
      return fail(wire::to_error_code(header_.status), wire::frame_status::ok);
    default:
      return fail(make_error_code(errc::unsupported_operation), wire::frame_status::remote_operation);
  }
  read_header();
}

std::uint32_t tcp_stream::take_slot() {
  if (free_slots_.empty()) {
    slots_.emplace_back();
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }
  const std::uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void tcp_stream::release(std::uint32_t tag) {
  held_bytes_ -= slots_[tag].size();
  free_slots_.push_back(tag);  // keeps its capacity: steady state reuses the memory
  if (read_paused_ && held_bytes_ < max_held_bytes) {
    read_paused_ = false;
    read_header();
  }
}

// --- sending ------------------------------------------------------------------------------

void tcp_stream::queue_frame(const wire::frame_header& h, const_buffer_list* payload, std::size_t length) {
  std::vector<std::byte> frame;
  if (!spare_frames_.empty()) {
    frame = std::move(spare_frames_.back());
    spare_frames_.pop_back();
  }
  frame.resize(wire::header_size + length);
  wire::encode_header(h, std::span<std::byte, wire::header_size>(frame.data(), wire::header_size));
  if (payload != nullptr) payload->take(frame.data() + wire::header_size, length);
  outgoing_bytes_ += frame.size();
  outgoing_.push_back(std::move(frame));
  if (!writing_) write_next();
}

void tcp_stream::write_next() {
  if (outgoing_.empty() || closed_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  boost::asio::async_write(socket_, boost::asio::buffer(outgoing_.front()),
                           [self = shared_from_this()](error_code ec, std::size_t) {
                             auto& sent = self->outgoing_.front();
                             self->outgoing_bytes_ -= sent.size();
                             self->spare_frames_.push_back(std::move(sent));
                             self->outgoing_.pop_front();
                             if (ec) {
                               self->writing_ = false;
                               return self->fail(error::broken_pipe, wire::frame_status::ok);
                             }
                             self->write_next();
                             self->capacity_available();
                           });
}

std::size_t tcp_stream::transmit(const_buffer_list& buffers, bool message) {
  if (peer_limit_ == 0 || end_sent_ || closed_ || outgoing_bytes_ >= max_outgoing_bytes) return 0;
  const std::size_t total = buffers.bytes();
  const std::size_t n = message ? total : std::min<std::size_t>(total, peer_limit_);
  if (message && n > peer_limit_) return 0;  // send_message checked max_message_size already
  wire::frame_header h{.type = message ? frame_type::message : frame_type::data,
                       .payload_length = static_cast<std::uint32_t>(n)};
  if (message) h.length = static_cast<std::uint32_t>(n);
  queue_frame(h, &buffers, n);
  return n > 0 ? n : 1;  // an empty message still counts as sent
}

void tcp_stream::shutdown_send() {
  if (end_sent_ || closed_) return;
  end_sent_ = true;
  queue_frame({.type = frame_type::close, .status = wire::frame_status::ok}, nullptr, 0);
}

// --- one-sided operations (not carried yet) ---------------------------------------------------

void tcp_stream::transfer(const one_sided_request&, size_handler handler) {
  boost::asio::post(get_executor(), boost::asio::append(std::move(handler),
                                                        error_code(make_error_code(errc::unsupported_operation)),
                                                        std::size_t{0}));
}

void tcp_stream::atomic(const one_sided_request&, value_handler handler) {
  boost::asio::post(get_executor(), boost::asio::append(std::move(handler),
                                                        error_code(make_error_code(errc::unsupported_operation)),
                                                        std::uint64_t{0}));
}

void tcp_stream::register_memory(std::span<std::byte> memory, verbs::access rights, std::uint32_t& lkey,
                                 remote_buffer& remote) {
  lkey = 0;
  remote = regions_.register_region(memory, rights);
}

void tcp_stream::deregister_memory(std::uint32_t rkey) noexcept { regions_.deregister(rkey); }

// --- failure and close --------------------------------------------------------------------

void tcp_stream::fail(error_code ec, wire::frame_status tell_peer) {
  if (tell_peer != wire::frame_status::ok && !end_sent_) {
    end_sent_ = true;
    queue_frame({.type = frame_type::close, .status = tell_peer}, nullptr, 0);
  }
  deliver_failure(ec);
}

void tcp_stream::close() {
  if (closed_) return;
  closed_ = true;
  deliver_failure(error::operation_aborted);
  boost::system::error_code ignored;
  socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace coverbs::detail
