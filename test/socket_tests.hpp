// Socket-level test cases run over each transport: the shared stream bodies through a real
// acceptor and connect, the ported Asio echo program, and connection errors.
#pragma once

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <vector>
#include <numeric>

#include "connected_pair.hpp"
#include "echo_program.hpp"
#include "stream_tests.hpp"

namespace coverbs::test {

inline void socket_suite_bulk(transport kind, std::size_t size) {
  connected_pair p(kind);
  BOOST_TEST(p.a.remote_endpoint().port() == p.listener->local_endpoint().port());
  bulk_both_ways(p.io, p.a, p.b, size);
}

inline void socket_suite_lines(transport kind) {
  connected_pair p(kind);
  lines_then_eof(p.io, p.a, p.b);
}

inline void socket_suite_close(transport kind) {
  connected_pair p(kind);
  close_aborts_pending_and_peer_sees_eof(p.io, p.a, p.b);
}

inline void socket_suite_lazy(transport kind) {
  connected_pair p(kind);
  lazy_operation_acts_on_the_socket_when_started(p.io, p.a, p.b);
}

inline void socket_suite_small_writes(transport kind) {
  connected_pair p(kind);
  small_writes_keep_asio_rules(p.io, p.a, p.b);
}

inline void socket_suite_cancelled_read(transport kind) {
  connected_pair p(kind);
  read_cancelled_by_timer_leaves_connection_usable(p.io, p.a, p.b);
}

inline void socket_suite_cancelled_write(transport kind, std::size_t size) {
  connected_pair p(kind);
  write_cancelled_by_timer_moves_what_it_reports(p.io, p.a, p.b, size);
}

inline void socket_suite_cancelled_registered_write(transport kind, std::size_t size) {
  connected_pair p(kind);
  registered_write_cancelled_in_flight(p.io, p.a, p.b, size);
}

inline void socket_suite_registered_writes(transport kind, std::size_t size) {
  connected_pair p(kind);
  writes_from_registered_memory(p.io, p.a, p.b, size);
}

inline void socket_suite_registered_messages(transport kind, bool zero_copy) {
  connected_pair p(kind, {.zero_copy_messages = zero_copy});
  messages_from_registered_memory(p.io, p.a, p.b);
  if (zero_copy) uncopied_message_and_write_at_once(p.io, p.a, p.b);
}

/// The Asio echo program, unchanged, over coverbs types: several concurrent clients.
inline void ported_echo(transport kind) {
  namespace asio = boost::asio;
  asio::io_context io;
  socket_options options{.kind = kind};
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  constexpr int clients = 4;
  asio::co_spawn(io, echo::server(server, clients), asio::detached);
  std::vector<std::string> replies(clients);
  std::vector<std::unique_ptr<socket>> sockets;
  int finished = 0;
  for (int i = 0; i < clients; ++i) {
    sockets.push_back(std::make_unique<socket>(io, options));
    std::vector<std::string> lines{"hello " + std::to_string(i), std::string(10000, 'a' + static_cast<char>(i)), "bye"};
    asio::co_spawn(io, echo::client(*sockets.back(), server.local_endpoint(), lines),
                   [&, i](std::exception_ptr e, std::string r) {
                     if (e) std::rethrow_exception(e);
                     replies[static_cast<std::size_t>(i)] = std::move(r);
                     if (++finished == clients) io.stop();
                   });
  }
  io.run_for(std::chrono::seconds(60));
  BOOST_REQUIRE(finished == clients);
  for (int i = 0; i < clients; ++i) {
    BOOST_TEST(replies[static_cast<std::size_t>(i)] ==
               "hello " + std::to_string(i) + "\n" + std::string(10000, 'a' + static_cast<char>(i)) + "\nbye\n");
    BOOST_TEST((sockets[static_cast<std::size_t>(i)]->transport_in_use() == kind));
  }
}

/// Nobody listens: the connect fails with connection_refused, promptly.
inline void refused(transport kind) {
  namespace asio = boost::asio;
  asio::io_context io;
  // Find a free port by binding and closing a TCP acceptor on it.
  unsigned short port = 0;
  {
    asio::ip::tcp::acceptor probe(io, asio::ip::tcp::endpoint(test_address(), 0));
    port = probe.local_endpoint().port();
  }
  socket s(io, {.kind = kind});
  error_code result = asio::error::would_block;
  s.async_connect(asio::ip::tcp::endpoint(test_address(), port), [&](error_code ec) { result = ec; });
  io.run_for(std::chrono::seconds(30));
  BOOST_TEST((result == asio::error::connection_refused), result.message());
  BOOST_TEST(!s.is_open());
}

/// A connect to a listener that never answers, raced against a timer with `||`: the timer
/// wins, the connect ends with operation_aborted and leaves the socket closed and reusable.
inline void connect_cancelled_by_timer(transport kind) {
  namespace asio = boost::asio;
  using namespace asio::experimental::awaitable_operators;
  asio::io_context io;
  // RDMA: a cm listener whose requests nobody takes. TCP: a listener with a full backlog,
  // which drops further SYNs, so the connect keeps retrying.
  std::optional<cm::id> rdma_listener;
  std::optional<asio::ip::tcp::acceptor> tcp_listener;
  std::vector<asio::ip::tcp::socket> fillers;
  unsigned short port = 0;
  if (kind == transport::rdma) {
    rdma_listener.emplace(io.get_executor());
    rdma_listener->bind(asio::ip::tcp::endpoint(test_address(), 0));
    rdma_listener->listen(16);  // room for both attempts: a full backlog refuses
    port = rdma_listener->local_endpoint().port();
  } else {
    tcp_listener.emplace(io, asio::ip::tcp::endpoint(test_address(), 0));
    tcp_listener->listen(0);
    port = tcp_listener->local_endpoint().port();
    for (int i = 0; i < 2; ++i) {
      fillers.emplace_back(io).async_connect(tcp_listener->local_endpoint(), [](error_code) {});
    }
  }
  socket s(io, {.kind = kind});
  asio::steady_timer timer(io, std::chrono::milliseconds(300));
  std::optional<std::size_t> winner;
  auto started = std::chrono::steady_clock::now(), ended = started;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto r = co_await (s.async_connect(asio::ip::tcp::endpoint(test_address(), port), asio::use_awaitable) ||
                           timer.async_wait(asio::use_awaitable));
        winner = r.index();
        ended = std::chrono::steady_clock::now();
        io.stop();  // the filler that never got in still waits
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(20));
  BOOST_REQUIRE(winner.has_value());
  BOOST_TEST(*winner == 1u);  // the timer
  BOOST_TEST(std::chrono::duration_cast<std::chrono::milliseconds>(ended - started).count() < 3000);
  BOOST_TEST(!s.is_open());

  // With a callback and a cancellation signal, the connect reports operation_aborted.
  io.restart();
  asio::cancellation_signal signal;
  error_code result = asio::error::would_block;
  s.async_connect(asio::ip::tcp::endpoint(test_address(), port),
                  asio::bind_cancellation_slot(signal.slot(), [&](error_code ec) {
                    result = ec;
                    io.stop();
                  }));
  timer.expires_after(std::chrono::milliseconds(300));
  timer.async_wait([&](error_code) { signal.emit(asio::cancellation_type::terminal); });
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
  BOOST_TEST(!s.is_open());
}

}  // namespace coverbs::test
