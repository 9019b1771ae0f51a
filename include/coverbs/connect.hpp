// coverbs::async_connect and coverbs::connect: a socket connected to the first of several
// endpoints that accepts, as boost::asio::async_connect and connect do for an Asio socket
// (whose overloads take only a basic_socket), so that code connecting to a resolver's results
// ports by the name alone.
#pragma once

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <concepts>
#include <iterator>
#include <utility>
#include <vector>

#include "coverbs/socket.hpp"

namespace coverbs {

namespace detail {

// Tries the endpoints in turn: any failure but a cancellation moves on to the next, as with
// Asio, and a cancellation ends it all.
struct range_connect {
  socket& s;
  std::vector<socket::endpoint_type> endpoints;
  std::size_t next = 0;
  bool started = false;

  template <class Self>
  void operator()(Self& self, error_code ec = {}) {
    if (!started) {
      started = true;
      if (endpoints.empty()) {  // a handler never runs inside its initiating function
        return boost::asio::post(
            s.get_executor(),
            boost::asio::append(std::move(self), error_code(boost::asio::error::not_found)));
      }
      return s.async_connect(endpoints[next++], std::move(self));
    }
    if (next == 0) return self.complete(ec, {});  // the posted not_found
    if (!ec) return self.complete(ec, endpoints[next - 1]);
    if (ec == boost::asio::error::operation_aborted ||
        self.cancelled() != boost::asio::cancellation_type::none) {
      return self.complete(boost::asio::error::operation_aborted, {});
    }
    if (next == endpoints.size()) return self.complete(ec, {});
    s.async_connect(endpoints[next++], std::move(self));
  }
};

}  // namespace detail

/// Connects `s` to the first endpoint of `endpoints` that accepts it, trying each in turn:
/// a `boost::asio::ip::tcp::resolver`'s results, or any range of TCP endpoints. Completion:
/// `void(error_code, boost::asio::ip::tcp::endpoint)` with the endpoint connected to, as
/// `boost::asio::async_connect`'s; the last attempt's error when none accepts, `not_found`
/// for an empty range. Each attempt is `s.async_connect`, so the socket's transport options
/// apply to every endpoint, and a failed one leaves the socket closed. Terminal cancellation,
/// `s.cancel()` or `s.close()` ends the attempt in progress and the whole operation with
/// `operation_aborted` (after `tcp::socket::cancel()` Asio's tries the next endpoint). Asio's
/// forms with a connect condition or iterators are not offered. `Socket` is `coverbs::socket`
/// or a `rebound_socket`, whose executor's default token is taken.
template <class Socket, class EndpointSequence,
          class CompletionToken = boost::asio::default_completion_token_t<typename Socket::executor_type>>
requires std::derived_from<Socket, socket> && requires(const EndpointSequence& e) {
  { *std::begin(e) } -> std::convertible_to<socket::endpoint_type>;
  std::end(e);
}
auto async_connect(Socket& s, const EndpointSequence& endpoints,
                   CompletionToken&& token = CompletionToken()) {
  std::vector<socket::endpoint_type> candidates;
  for (const auto& entry : endpoints) candidates.push_back(entry);  // resolver entries convert
  return boost::asio::async_compose<CompletionToken, void(error_code, socket::endpoint_type)>(
      detail::range_connect{s, std::move(candidates)}, token, s);
}

/// Connects `s` to the first endpoint of `endpoints` that accepts it, as async_connect above,
/// blocking as `socket::connect` does (the socket's io_context runs on this thread meanwhile):
/// the synchronous form, as `boost::asio::connect`. Returns the endpoint connected to; throws
/// boost::system::system_error with the last attempt's error, `not_found` for an empty range.
template <class Socket, class EndpointSequence>
requires std::derived_from<Socket, socket> && requires(const EndpointSequence& e) {
  { *std::begin(e) } -> std::convertible_to<socket::endpoint_type>;
  std::end(e);
}
socket::endpoint_type connect(Socket& s, const EndpointSequence& endpoints) {
  error_code ec;
  const socket::endpoint_type connected = connect(s, endpoints, ec);
  detail::throw_if(ec, "connect");
  return connected;
}

/// As above, reporting failure through `ec`. Stops at `would_block` (called from a handler of
/// the socket's context), where every attempt would fail alike, and, as async_connect does, at
/// `operation_aborted` (the socket closed by another thread meanwhile).
template <class Socket, class EndpointSequence>
requires std::derived_from<Socket, socket> && requires(const EndpointSequence& e) {
  { *std::begin(e) } -> std::convertible_to<socket::endpoint_type>;
  std::end(e);
}
socket::endpoint_type connect(Socket& s, const EndpointSequence& endpoints, error_code& ec) {
  ec = boost::asio::error::not_found;
  for (const auto& entry : endpoints) {
    const socket::endpoint_type candidate = entry;  // resolver entries convert
    s.connect(candidate, ec);
    if (!ec) return candidate;
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::operation_aborted) break;
  }
  return {};
}

}  // namespace coverbs
