// The bodies declared in default_token_tests.hpp, compiled once for both transports' tests.

#include "default_token_tests.hpp"

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "connected_pair.hpp"
#include "coverbs/connect.hpp"
#include "socket_tests.hpp"

namespace coverbs::test {

/// Boost's echo_server_with_default, ported by its type names: no operation names a token.
/// The acceptor yields the defaulted socket type; its peer-endpoint forms report the client;
/// asio::async_read/async_write, messages and coverbs::async_connect take the default too;
/// as_tuple's default reports a refused connect as a value.
void default_token_types(transport kind) {
  namespace asio = boost::asio;
  using tcp_acceptor = asio::use_awaitable_t<>::as_default_on_t<acceptor>;
  using tcp_socket = asio::use_awaitable_t<>::as_default_on_t<socket>;
  using tuple_socket = asio::as_tuple_t<asio::use_awaitable_t<>>::as_default_on_t<socket>;
  static_assert(std::is_same_v<tcp_acceptor::socket_type, tcp_socket>);
  static_assert(std::is_same_v<decltype(std::declval<tcp_acceptor&>().accept()), tcp_socket>);
  static_assert(std::is_same_v<tcp_socket::executor_type, tcp_acceptor::executor_type>);
  static_assert(std::is_same_v<tcp_socket::rebind_executor<asio::any_io_executor>::other, socket>);
  static_assert(std::is_same_v<tcp_acceptor::rebind_executor<asio::any_io_executor>::other, acceptor>);
  // The constructor shapes of tcp::socket and tcp::acceptor, on a context or an executor.
  using asio::ip::tcp;
  using default_executor = tcp_socket::executor_type;
  static_assert(std::is_constructible_v<tcp_socket, asio::io_context&, tcp>);
  static_assert(std::is_constructible_v<tcp_socket, default_executor, tcp::endpoint>);
  static_assert(std::is_constructible_v<tcp_acceptor, asio::io_context&, tcp>);
  static_assert(std::is_constructible_v<tcp_acceptor, default_executor, tcp::endpoint, bool>);
  // Stream layers take the executor type, and so the default token, of the lowest layer.
  static_assert(std::is_same_v<asio::ssl::stream<tcp_socket>::executor_type, tcp_socket::executor_type>);

  asio::io_context io;
  const socket_options options{.kind = kind};
  const asio::any_io_executor executor = io.get_executor();
  tcp_acceptor listener(executor, {test_address(), 0}, options);  // as the example's
  const refusing_port closed_port(io, {listener.local_endpoint().port()});
  std::string echoed, message;
  asio::ip::tcp::endpoint first_peer, first_local, seen_peer, client_local;
  std::optional<error_code> refusal;
  tcp_socket third(io, options), c3(io, options);
  bool moved_from_keeps_executor = false;
  int finished = 0;

  const auto echo = [](tcp_socket s) -> asio::awaitable<void> {
    std::array<char, 1024> data;
    for (;;) {
      auto [ec, n] = co_await s.async_read_some(asio::buffer(data), asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      co_await asio::async_write(s, asio::buffer(data.data(), n));
    }
  };
  const auto server = [&]() -> asio::awaitable<void> {
    auto first = co_await listener.async_accept(first_peer);
    static_assert(std::is_same_v<decltype(first), tcp_socket>);
    asio::co_spawn(executor, echo(std::move(first)), asio::detached);
    moved_from_keeps_executor = first.get_executor() == executor;  // Asio's do too
    tcp_socket second(io, options);
    co_await listener.async_accept(second, seen_peer);
    std::array<char, 64> m;
    const std::size_t n = co_await second.async_receive(asio::buffer(m));
    co_await second.async_send(asio::buffer(m.data(), n));
    co_await listener.async_accept(third);
    ++finished;
  };
  const auto client = [&]() -> asio::awaitable<void> {
    tcp_socket c(co_await asio::this_coro::executor, options);
    co_await c.async_connect(listener.local_endpoint());
    first_local = c.local_endpoint();
    co_await asio::async_write(c, asio::buffer("hello default", 13));
    echoed.assign(13, '\0');
    co_await asio::async_read(c, asio::buffer(echoed));

    tuple_socket refused(io, options);
    auto [ec] = co_await refused.async_connect(closed_port.endpoint());
    refusal = ec;

    tcp_socket c2(io, options);
    const std::vector endpoints{listener.local_endpoint()};
    co_await coverbs::async_connect(c2, endpoints);
    client_local = c2.local_endpoint();
    co_await c2.async_send(asio::buffer("a message", 9));
    std::array<char, 64> m;
    const std::size_t n = co_await c2.async_receive(asio::buffer(m));
    message.assign(m.data(), n);
    co_await c3.async_connect(listener.local_endpoint());
    ++finished;
  };
  const auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(io, server(), rethrow);
  asio::co_spawn(io, client(), rethrow);
  while (finished < 2 && io.run_one_for(std::chrono::seconds(30)) > 0) {
  }
  BOOST_REQUIRE_EQUAL(finished, 2);
  BOOST_TEST(echoed == "hello default");
  BOOST_TEST(message == "a message");
  BOOST_REQUIRE(refusal.has_value());
  BOOST_TEST((*refusal == asio::error::connection_refused), refusal->message());
  BOOST_TEST(first_peer == first_local);
  BOOST_TEST(seen_peer == client_local);
  BOOST_TEST(seen_peer.port() != 0);
  BOOST_TEST(third.is_open());
  BOOST_TEST((third.remote_endpoint() == c3.local_endpoint()));
  BOOST_TEST(moved_from_keeps_executor);
}

}  // namespace coverbs::test
