// The TCP transport of a socket: the framed protocol of docs/tcp-fallback-protocol.md on an
// Asio TCP socket, feeding the same stream_core as RDMA.
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <deque>
#include <memory>
#include <vector>

#include "coverbs/detail/stream_core.hpp"
#include "coverbs/wire/frame.hpp"
#include "coverbs/wire/region_table.hpp"

namespace coverbs::detail {

class tcp_stream final : public stream_core, public std::enable_shared_from_this<tcp_stream> {
 public:
  /// Takes a connected socket; `max_message` bounds the messages this side sends.
  tcp_stream(boost::asio::ip::tcp::socket socket, std::size_t max_message);
  ~tcp_stream() override;

  /// Sends hello and starts reading frames.
  void start();
  void shutdown_send() override;
  void close() override;
  std::size_t max_message_size() const noexcept override { return max_message_; }
  /// The regions a peer may reach with one-sided operations.
  wire::region_table& regions() noexcept { return regions_; }
  boost::asio::ip::tcp::socket& socket() noexcept { return socket_; }
  void transfer(const one_sided_request& request, size_handler handler) override;
  void atomic(const one_sided_request& request, value_handler handler) override;
  void register_memory(std::span<std::byte> memory, verbs::access rights, std::uint32_t& lkey,
                       remote_buffer& remote) override;
  void deregister_memory(std::uint32_t rkey) noexcept override;

 private:
  void release(std::uint32_t tag) override;
  std::size_t transmit(const_buffer_list& buffers, bool message) override;

  void read_header();
  void on_header(error_code ec);
  void on_payload(error_code ec);
  void handle_frame();
  void fail(error_code ec, wire::frame_status tell_peer);
  void queue_frame(const wire::frame_header& h, const_buffer_list* payload, std::size_t length);
  void write_next();
  std::uint32_t take_slot();

  boost::asio::ip::tcp::socket socket_;
  std::size_t max_message_;
  std::uint32_t peer_limit_ = 0;  ///< 0 until the peer's hello
  std::array<std::byte, wire::header_size> header_bytes_{};
  wire::frame_header header_;
  std::uint32_t reading_slot_ = 0;
  std::vector<std::vector<std::byte>> slots_;  ///< payloads of received data and messages
  std::vector<std::uint32_t> free_slots_;
  std::size_t held_bytes_ = 0;
  bool read_paused_ = false, reading_ = false, closed_ = false, end_sent_ = false;
  std::deque<std::vector<std::byte>> outgoing_;
  std::vector<std::vector<std::byte>> spare_frames_;
  std::size_t outgoing_bytes_ = 0;
  bool writing_ = false;
  wire::region_table regions_;
};

}  // namespace coverbs::detail
