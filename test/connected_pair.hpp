// A client socket connected to a server socket through coverbs::acceptor and
// socket::async_connect, over the transport asked for.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <optional>
#include <vector>

#include "coverbs/acceptor.hpp"
#include "coverbs/socket.hpp"
#include "test_address.hpp"

namespace coverbs::test {

/// Accepts every connection `server` gets into `into`, until an accept fails (the acceptor
/// closed).
inline void accept_all(acceptor& server, std::vector<socket>& into) {
  server.async_accept([&server, &into](error_code ec, socket s) {
    if (ec) return;
    into.push_back(std::move(s));
    accept_all(server, into);
  });
}

struct connected_pair {
  boost::asio::io_context io;
  std::optional<acceptor> listener;
  socket a{io};  ///< the client
  socket b{io};  ///< the server side

  explicit connected_pair(transport kind, socket_options options = {}) {
    namespace asio = boost::asio;
    options.kind = kind;
    listener.emplace(io, asio::ip::tcp::endpoint(test_address(), 0), options);
    a = socket(io, options);
    int done = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      co_await listener->async_accept(b, asio::use_awaitable);
      ++done;
    }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      co_await a.async_connect(listener->local_endpoint(), asio::use_awaitable);
      ++done;
    }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    while (done < 2 && io.run_one_for(std::chrono::seconds(30)) > 0) {
    }
    BOOST_REQUIRE_MESSAGE(done == 2, "connection not established");
    BOOST_REQUIRE(a.transport_in_use() == kind);
    BOOST_REQUIRE(b.transport_in_use() == kind);
  }
  ~connected_pair() {
    a.close();
    b.close();
    listener.reset();
    io.restart();
    io.run_for(std::chrono::seconds(3));
  }

  /// Runs the two sides' coroutines until both end (rethrowing what either throws) or the
  /// time is up; true when both ended.
  bool run_both(boost::asio::awaitable<void> server_side, boost::asio::awaitable<void> client_side,
                std::chrono::seconds limit = std::chrono::seconds(60)) {
    namespace asio = boost::asio;
    int finished = 0;
    const auto check = [&](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
      if (++finished == 2) io.stop();
    };
    asio::co_spawn(io, std::move(server_side), check);
    asio::co_spawn(io, std::move(client_side), check);
    io.restart();
    io.run_for(limit);
    return finished == 2;
  }
};

}  // namespace coverbs::test
