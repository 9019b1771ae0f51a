// The bodies declared in websocket_tests.hpp, compiled once for both transports' tests.

#include "websocket_tests.hpp"

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
void websocket_echo(transport kind) {
  namespace asio = boost::asio;
  namespace websocket = boost::beast::websocket;
  connected_pair p(kind);
  // The client over a socket it does not own, the server owning one whose executor has a
  // default token (Beast's teardown must still find coverbs' own).
  websocket::stream<socket&> client(p.a);
  websocket::stream<asio::use_awaitable_t<>::as_default_on_t<socket>> server(std::move(p.b));
  const std::string text = "hello over " + std::string(kind == transport::rdma ? "rdma" : "tcp");
  const std::string binary(200 * 1024, '\x5a');
  std::string text_back, binary_back;
  std::optional<error_code> server_end;
  const auto server_side = [&]() -> asio::awaitable<void> {
    co_await server.async_accept();  // its default token (a token alone would read as buffers)
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
  BOOST_TEST(!server.next_layer().is_open());
}

/// A stream that owns its socket (`websocket::stream<coverbs::socket>`) and Beast's idle
/// timeout: after one message the client goes quiet, so the server's next read ends with
/// beast::error::timeout, no sooner than the idle timeout after the handshake (without
/// keep-alive pings Beast's timer runs from there), and Beast closes the server's socket
/// (beast_close_socket); the client's read then ends too, with an error, not a hang.
void websocket_idle_timeout(transport kind) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace websocket = beast::websocket;
  using clock = std::chrono::steady_clock;
  connected_pair p(kind);
  websocket::stream<socket> client(std::move(p.a)), server(std::move(p.b));
  BOOST_TEST(server.next_layer().is_open());
  websocket::stream_base::timeout timeout{};
  timeout.handshake_timeout = std::chrono::seconds(10);
  timeout.idle_timeout = std::chrono::seconds(1);
  timeout.keep_alive_pings = false;
  server.set_option(timeout);
  std::optional<error_code> server_end, client_end;
  clock::duration open_for{};
  const auto server_side = [&]() -> asio::awaitable<void> {
    // Before the accept: the idle timer cannot have started earlier.
    const auto opened = clock::now();
    co_await server.async_accept(asio::use_awaitable);
    beast::flat_buffer buffer;
    auto [last_word, size] = co_await server.async_read(buffer, asio::as_tuple(asio::use_awaitable));
    BOOST_TEST(!last_word, last_word.message());
    auto [ec, n] = co_await server.async_read(buffer, asio::as_tuple(asio::use_awaitable));
    server_end = ec;
    open_for = clock::now() - opened;
  };
  const auto client_side = [&]() -> asio::awaitable<void> {
    co_await client.async_handshake("coverbs-test", "/", asio::use_awaitable);
    co_await client.async_write(asio::buffer("bye", 3), asio::use_awaitable);
    beast::flat_buffer buffer;
    auto [ec, n] = co_await client.async_read(buffer, asio::as_tuple(asio::use_awaitable));
    client_end = ec;
  };
  BOOST_REQUIRE(p.run_both(server_side(), client_side(), std::chrono::seconds(30)));
  BOOST_REQUIRE(server_end.has_value());
  BOOST_TEST((*server_end == beast::error::timeout), server_end->message());
  BOOST_TEST(open_for >= std::chrono::seconds(1));
  BOOST_TEST(!server.next_layer().is_open());
  BOOST_REQUIRE(client_end.has_value());
  BOOST_TEST(static_cast<bool>(*client_end), client_end->message());
}

}  // namespace coverbs::test
