// A plain Asio C++20 coroutine echo server and client, written against Asio's TCP types.
// The tests instantiate the very same source with coverbs::acceptor and coverbs::socket:
// porting is changing the type names, nothing else.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <string>

namespace echo {

namespace asio = boost::asio;

template <class Socket>
asio::awaitable<void> session(Socket socket) {
  char data[4096];
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(data), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;  // eof: the client is done
    co_await asio::async_write(socket, asio::buffer(data, n), asio::use_awaitable);
  }
}

template <class Acceptor>
asio::awaitable<void> server(Acceptor& acceptor, int connections) {
  for (int i = 0; i < connections; ++i) {
    auto socket = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), session(std::move(socket)), asio::detached);
  }
}

/// Sends each line and returns what came back, concatenated.
template <class Socket, class Endpoint>
asio::awaitable<std::string> client(Socket& socket, Endpoint server, std::vector<std::string> lines) {
  co_await socket.async_connect(server, asio::use_awaitable);
  socket.set_option(asio::ip::tcp::no_delay(true));  // each line goes out at once
  std::string replies;
  asio::streambuf buf;
  for (const auto& line : lines) {
    co_await asio::async_write(socket, asio::buffer(line + "\n"), asio::use_awaitable);
    const std::size_t n = co_await asio::async_read_until(socket, buf, '\n', asio::use_awaitable);
    replies.append(asio::buffers_begin(buf.data()), asio::buffers_begin(buf.data()) + static_cast<long>(n));
    buf.consume(n);
  }
  socket.shutdown(Socket::shutdown_send);
  co_return replies;
}

}  // namespace echo
