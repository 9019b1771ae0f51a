// A coverbs::socket over the TCP transport whose peer is a bare TCP socket that speaks the
// framed protocol by hand (docs/tcp-fallback-protocol.md): for what a well-behaved peer never
// sends, or never sends in one piece.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <span>
#include <vector>

#include "coverbs/detail/tcp_stream.hpp"
#include "coverbs/socket.hpp"
#include "coverbs/wire/frame.hpp"
#include "one_sided_tests.hpp"

namespace coverbs::test {

struct frame {
  wire::frame_header h;
  std::vector<std::byte> payload;
};

/// Socket `a` over the TCP transport; its peer `raw` is a bare TCP socket driven by the test.
struct raw_peer {
  asio::io_context io;
  coverbs::socket a{io};
  asio::ip::tcp::socket raw{io};
  std::shared_ptr<detail::tcp_stream> stream;  ///< a's transport

  explicit raw_peer(bool say_hello = true, std::uint32_t limit = wire::max_payload_size) {
    namespace ip = asio::ip;
    ip::tcp::acceptor acceptor(io, ip::tcp::endpoint(ip::make_address("127.0.0.1"), 0));
    ip::tcp::socket client(io);
    client.connect(acceptor.local_endpoint());
    acceptor.accept(raw);
    stream = std::make_shared<detail::tcp_stream>(std::move(client), 64 * 1024);
    stream->start();
    a.attach(stream, transport::tcp, {}, {});
    const frame hello = receive();
    BOOST_TEST((hello.h.type == wire::frame_type::hello));
    BOOST_TEST(hello.h.length == wire::max_payload_size);
    if (say_hello) send({.type = wire::frame_type::hello, .length = limit});
  }
  ~raw_peer() {
    a.close();
    io.restart();
    io.run_for(std::chrono::milliseconds(200));
  }

  /// A frame's bytes, its payload_length set from `payload`.
  static std::vector<std::byte> encode(wire::frame_header h, std::span<const std::byte> payload = {}) {
    std::vector<std::byte> bytes(wire::header_size + payload.size());
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    wire::encode_header(h, std::span<std::byte, wire::header_size>(bytes.data(), wire::header_size));
    std::copy(payload.begin(), payload.end(), bytes.begin() + wire::header_size);
    return bytes;
  }
  void send_bytes(std::span<const std::byte> bytes) {
    asio::write(raw, asio::buffer(bytes.data(), bytes.size()));
  }
  void send(wire::frame_header h, std::span<const std::byte> payload = {}) { send_bytes(encode(h, payload)); }

  frame receive() {
    std::array<std::byte, wire::header_size> bytes{};
    read_exactly(bytes);
    frame f;
    const auto ec = wire::decode_header(bytes, f.h);
    BOOST_REQUIRE_MESSAGE(!ec, "the stream sent a malformed frame");
    f.payload.resize(f.h.payload_length);
    read_exactly(f.payload);
    return f;
  }
  void read_exactly(std::span<std::byte> into) {
    if (into.empty()) return;
    outcome o;
    asio::async_read(raw, asio::buffer(into.data(), into.size()), record(o));
    run_until_done(io, [&] { return o.done; });
    BOOST_REQUIRE_MESSAGE(!o.ec, o.ec.message());
  }
  /// The close frame `a` sends when it fails, after any frames it had queued before.
  wire::frame_status closing_status() {
    for (;;) {
      const frame f = receive();
      if (f.h.type == wire::frame_type::close && f.h.status != wire::frame_status::ok) return f.h.status;
    }
  }
};

}  // namespace coverbs::test
