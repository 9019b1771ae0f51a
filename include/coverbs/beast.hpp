// Boost.Beast's WebSocket stream over a coverbs::socket: Beast ends a WebSocket connection
// with a teardown, and closes a failed stream's socket, through functions it finds by
// argument-dependent lookup and has only for Asio's own sockets. Include this header where
// `websocket::stream<coverbs::socket>` (or `<coverbs::socket&>`) is used.
#pragma once

#include <array>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/role.hpp>
#include <memory>
#include <utility>

#include "coverbs/socket.hpp"

namespace coverbs {

namespace detail {

// As Beast's teardown for tcp::socket: the server shuts its sending side first; each side
// reads what is left up to the peer's end of stream; the client then shuts down; both close.
struct websocket_teardown {
  socket& s;
  boost::beast::role_type role;
  std::unique_ptr<std::array<char, 2048>> discard = std::make_unique<std::array<char, 2048>>();
  bool reading = false;

  template <class Self>
  void operator()(Self& self, error_code ec = {}, std::size_t = 0) {
    if (!reading) {
      reading = true;
      // A socket that is not open fails the read below, outside this initiating call.
      if (role == boost::beast::role_type::server) s.shutdown(boost::asio::socket_base::shutdown_send, ec);
    } else if (ec) {
      if (ec != boost::asio::error::eof) return self.complete(ec);
      ec = {};
      if (role == boost::beast::role_type::client) s.shutdown(boost::asio::socket_base::shutdown_send, ec);
      error_code closing;
      s.close(closing);
      return self.complete(ec);
    }
    s.async_read_some(boost::asio::buffer(*discard), std::move(self));
  }
};

}  // namespace detail

/// Ends the connection under a closing WebSocket stream, as Beast does for `tcp::socket`
/// (Beast calls it; completion `void(error_code)`). It waits for the peer's end of stream, so
/// set the stream's timeouts (`websocket::stream_base::timeout`) against a peer that never
/// closes, as with `tcp::socket`. Only Beast's asynchronous operations are available: a
/// coverbs socket has no blocking reads and writes for its synchronous ones.
template <class TeardownHandler>
void async_teardown(boost::beast::role_type role, socket& s, TeardownHandler&& handler) {
  boost::asio::async_compose<TeardownHandler, void(error_code)>(detail::websocket_teardown{s, role}, handler,
                                                                s);
}

/// As above, for a socket with a default-token executor (`as_default_on_t<coverbs::socket>`),
/// which Beast's catch-all teardown would otherwise take.
template <class Executor, class TeardownHandler>
void async_teardown(boost::beast::role_type role, rebound_socket<Executor>& s, TeardownHandler&& handler) {
  async_teardown(role, static_cast<socket&>(s), std::forward<TeardownHandler>(handler));
}

/// How Beast closes a stream's socket when an operation fails or times out
/// (`beast::close_socket`).
inline void beast_close_socket(socket& s) {
  error_code ignored;
  s.close(ignored);
}

}  // namespace coverbs
