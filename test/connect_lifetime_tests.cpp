// The bodies declared in connect_lifetime_tests.hpp, compiled once for both transports' tests.

#include "connect_lifetime_tests.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "connected_pair.hpp"
#include "stream_tests.hpp"

namespace coverbs::test {
namespace {

namespace asio = boost::asio;
constexpr auto patience = std::chrono::seconds(10);

/// A completion handler that stores its result in `into`.
auto record(std::optional<error_code>& into) {
  return [&into](error_code ec) { into = ec; };
}

/// Runs up to `turns` of the context's handlers, fewer if `result` arrives first; whether it did.
bool run_handlers(asio::io_context& io, int turns, const std::optional<error_code>& result) {
  io.restart();
  for (int i = 0; i < turns && !result; ++i) io.run_one_for(patience);
  return result.has_value();
}

/// Runs the context until `result` arrives.
void finish(asio::io_context& io, const std::optional<error_code>& result) {
  run_until(io, [&] { return result.has_value(); });
  BOOST_REQUIRE(result.has_value());
}

/// Calls `round(turns)` for each number of handlers into a connect, until three rounds found
/// the connect complete before their step (`round` returns whether it had): the rounds before
/// those reached every turn of it.
template <class Round>
void at_each_turn_of_a_connect(Round round) {
  int ended_after = 0, completed_first = 0;
  for (int turns = 0; turns < 200 && completed_first < 3; ++turns) {
    BOOST_TEST_CONTEXT("after " << turns << " handlers") {
      ++(round(turns) ? completed_first : ended_after);
    }
  }
  BOOST_TEST(ended_after > 0);
  BOOST_TEST(completed_first > 0);
}

/// A listener that accepts everything into `served`, on `io`.
struct listening {
  listening(asio::io_context& io, const socket_options& options)
      : io(io), listener(io, asio::ip::tcp::endpoint(test_address(), 0), options) {
    accept_all(listener, served);
  }
  ~listening() {
    listener.close();
    drop_served();
    io.restart();
    io.run_for(std::chrono::seconds(1));
  }
  asio::ip::tcp::endpoint endpoint() const { return listener.local_endpoint(); }
  void drop_served() {
    for (auto& s : served) s.close();
    served.clear();
  }

  /// Whether `client` is connected here: a byte it writes arrives at the socket the acceptor
  /// took for its address.
  bool carries_a_byte(socket& client) {
    if (!client.is_open() || client.remote_endpoint().port() != endpoint().port()) return false;
    const auto address = client.local_endpoint();
    // Newest first: an older connection from the same address (its port used again) may not
    // have seen its end yet.
    const auto accepted = [&]() -> socket* {
      for (auto s = served.rbegin(); s != served.rend(); ++s) {
        if (s->is_open() && s->remote_endpoint() == address) return &*s;
      }
      return nullptr;
    };
    socket* peer = accepted();
    for (const auto deadline = std::chrono::steady_clock::now() + patience;
         !peer && std::chrono::steady_clock::now() < deadline; peer = accepted()) {
      io.run_one_for(patience);
    }
    return peer != nullptr && test::carries_a_byte(io, client, *peer);
  }

  asio::io_context& io;
  acceptor listener;
  std::vector<socket> served;
};

}  // namespace

void connect_outlived_or_moved(transport kind) {
  asio::io_context io;
  const socket_options options{.kind = kind};
  listening server(io, options);
  for (const bool move : {false, true}) {
    BOOST_TEST_CONTEXT((move ? "moved" : "destroyed"))
    at_each_turn_of_a_connect([&](int turns) {
      auto s = std::make_unique<socket>(io, options);
      std::optional<socket> moved;
      std::optional<error_code> result;
      s->async_connect(server.endpoint(), record(result));
      const bool completed = run_handlers(io, turns, result);
      if (move) moved.emplace(std::move(*s));
      s.reset();  // destroyed, or (moved) destroyed after the move
      finish(io, result);
      if (completed || move) {
        BOOST_TEST(!*result, result->message());
      } else {
        BOOST_TEST((*result == asio::error::operation_aborted), result->message());
      }
      if (move) BOOST_TEST(server.carries_a_byte(*moved));
      server.drop_served();
      return completed;
    });
  }
}

void connect_cancelled_or_taken_over(transport kind) {
  asio::io_context io;
  const socket_options options{.kind = kind};
  listening server(io, options);
  int aborted = 0;
  BOOST_TEST_CONTEXT("cancel()")
  at_each_turn_of_a_connect([&](int turns) {
    socket s(io, options);
    std::optional<error_code> result, again;
    s.async_connect(server.endpoint(), record(result));
    const bool completed = run_handlers(io, turns, result);
    s.cancel();
    finish(io, result);
    if (completed || !*result) {  // a cancel after the last step stops nothing
      BOOST_TEST(!*result, result->message());
      BOOST_TEST(server.carries_a_byte(s));
    } else {
      ++aborted;
      BOOST_TEST((*result == asio::error::operation_aborted), result->message());
      BOOST_TEST(!s.is_open());
    }
    s.async_connect(server.endpoint(), record(again));
    finish(io, again);
    BOOST_TEST(!*again, again->message());
    BOOST_TEST(server.carries_a_byte(s));
    server.drop_served();
    return completed;
  });
  BOOST_TEST(aborted > 0);

  BOOST_TEST_CONTEXT("moved onto a connecting socket")
  at_each_turn_of_a_connect([&](int turns) {
    socket s(io, options), target(io, options);
    std::optional<error_code> result, targets_own, again;
    s.async_connect(server.endpoint(), record(result));
    target.async_connect(server.endpoint(), record(targets_own));
    const bool completed = run_handlers(io, turns, result);
    const bool target_completed = targets_own.has_value();
    target = std::move(s);
    finish(io, result);
    finish(io, targets_own);
    BOOST_TEST(!*result, result->message());
    if (target_completed) {
      BOOST_TEST(!*targets_own, targets_own->message());
    } else {
      BOOST_TEST((*targets_own == asio::error::operation_aborted), targets_own->message());
    }
    BOOST_TEST(!s.is_open());
    s.async_connect(server.endpoint(), record(again));  // the moved-from socket, anew
    finish(io, again);
    BOOST_TEST(!*again, again->message());
    BOOST_TEST(server.carries_a_byte(s));
    BOOST_TEST(server.carries_a_byte(target));
    server.drop_served();
    return completed;
  });
}

}  // namespace coverbs::test
