// Boost.Beast's WebSocket stream over a coverbs socket (coverbs/beast.hpp), as over a
// tcp::socket: the upgrade handshake, messages both ways, and the closing handshake with
// its teardown.
#pragma once

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <string>

#include "connected_pair.hpp"
#include "coverbs/beast.hpp"

namespace coverbs::test {

/// A text message and a 200 KiB binary one echoed; the client closes (normal) and the
/// server's next read ends with websocket::error::closed; the server's socket is then closed by
/// the teardown, as on tcp::socket.
inline void websocket_echo(transport kind) {
  namespace asio = boost::asio;
  namespace websocket = boost::beast::websocket;
  connected_pair p(kind);
  websocket::stream<socket&> client(p.a), server(p.b);
  const std::string text = "hello over " + std::string(kind == transport::rdma ? "rdma" : "tcp");
  const std::string binary(200 * 1024, '\x5a');
  std::string text_back, binary_back;
  std::optional<error_code> server_end;
  const auto server_side = [&]() -> asio::awaitable<void> {
    co_await server.async_accept(asio::use_awaitable);
    for (;;) {
      boost::beast::flat_buffer buffer;
      auto [ec, n] = co_await server.async_read(buffer, asio::as_tuple(asio::use_awaitable));
      if (ec) {
        server_end = ec;
        co_return;
      }
      server.text(server.got_text());
      co_await server.async_write(buffer.data(), asio::use_awaitable);
    }
  };
  const auto client_side = [&]() -> asio::awaitable<void> {
    co_await client.async_handshake("coverbs-test", "/", asio::use_awaitable);
    for (std::string* back : {&text_back, &binary_back}) {
      const std::string& out = back == &text_back ? text : binary;
      client.text(back == &text_back);
      co_await client.async_write(asio::buffer(out), asio::use_awaitable);
      boost::beast::flat_buffer buffer;
      co_await client.async_read(buffer, asio::use_awaitable);
      *back = boost::beast::buffers_to_string(buffer.data());
    }
    co_await client.async_close(websocket::close_code::normal, asio::use_awaitable);
  };
  BOOST_REQUIRE(p.run_both(server_side(), client_side()));
  BOOST_TEST(text_back == text);
  BOOST_TEST((binary_back == binary));
  BOOST_REQUIRE(server_end.has_value());
  BOOST_TEST((*server_end == websocket::error::closed), server_end->message());
  BOOST_TEST(!p.a.is_open());
  BOOST_TEST(!p.b.is_open());
}

}  // namespace coverbs::test
