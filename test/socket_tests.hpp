// Socket-level test cases run over each transport: the shared stream bodies through a real
// acceptor and connect, the ported Asio echo program, and connection errors.
#pragma once

#include <boost/asio/ip/tcp.hpp>
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

inline void socket_suite_cancelled_read(transport kind) {
  connected_pair p(kind);
  read_cancelled_by_timer_leaves_connection_usable(p.io, p.a, p.b);
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

}  // namespace coverbs::test
