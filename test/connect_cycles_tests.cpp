// The bodies declared in connect_cycles_tests.hpp, compiled once for both transports' tests.

#include "connect_cycles_tests.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "connected_pair.hpp"
#include "resource_usage.hpp"
#include "stream_tests.hpp"

namespace coverbs::test {

/// True on a CPU that qemu emulates (the Soft-RoCE test bed without KVM).
inline bool emulated_cpu() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name") && line.find("QEMU TCG CPU") != std::string::npos) return true;
  }
  return false;
}

/// $COVERBS_CONNECT_CYCLES, else 1000; 500 under emulation, where an rdma_cm connect and
/// disconnect take about 100 ms, to stay within a minute.
inline int connect_cycles() {
  if (const char* n = std::getenv("COVERBS_CONNECT_CYCLES")) return std::atoi(n);
  return emulated_cpu() ? 500 : 1000;
}

/// Echoes until end of stream, then closes: the server half of a cycle.
inline asio::awaitable<void> serve_one(socket s, int& closed) {
  char buf[64];
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
    if (ec) break;
    co_await asio::async_write(s, asio::buffer(buf, n), asio::use_awaitable);
  }
  s.close();
  ++closed;
}

/// One cycle: connect, "ping" there and back, shut down sending, read to the end (the server
/// has closed by then), close.
inline asio::awaitable<void> client_cycle(asio::io_context& io, const socket_options& options,
                                          const asio::ip::tcp::endpoint& server) {
  socket c(io, options);
  co_await c.async_connect(server, asio::use_awaitable);
  co_await asio::async_write(c, asio::buffer("ping", 4), asio::use_awaitable);
  char reply[4];
  co_await asio::async_read(c, asio::buffer(reply), asio::use_awaitable);
  if (std::string(reply, 4) != "ping") throw std::runtime_error("echo corrupted");
  c.shutdown(asio::socket_base::shutdown_send);
  auto [ec, n] = co_await c.async_read_some(asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
  if (ec != asio::error::eof || n != 0)
    throw std::runtime_error("expected end of stream, got " + ec.message());
  c.close();
}

/// Lets asynchronous teardown (RDMA disconnects and flushes) finish: samples until `settled`
/// holds for the usage or `limit` passes, and returns the last sample.
template <class Settled>
asio::awaitable<resource_usage> settle(asio::io_context& io, bool rdma, Settled settled,
                                       std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  asio::steady_timer timer(io);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  resource_usage now = measure_usage(rdma);
  while (!settled(now) && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(100));
    co_await timer.async_wait(asio::use_awaitable);
    now = measure_usage(rdma);
  }
  co_return now;
}

void connect_close_cycles(transport kind, socket_options options) {
  const int cycles = connect_cycles(), warm_up = std::max(10, cycles / 10);
  BOOST_REQUIRE(cycles > warm_up);
  const bool rdma = kind == transport::rdma;
  asio::io_context io;
  options.kind = kind;
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  int closed = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (;;)
          asio::co_spawn(io, serve_one(co_await server.async_accept(asio::use_awaitable), closed),
                         asio::detached);
      },
      asio::detached);

  // A leak of one small object per cycle would add tens of kilobytes; allocator caches and the
  // test's own bookkeeping stay below this.
  constexpr std::size_t heap_slack = 16 * 1024;
  resource_usage before, after;
  const auto started = std::chrono::steady_clock::now();
  run_coroutine(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < cycles; ++i) {
          co_await client_cycle(io, options, server.local_endpoint());
          if (i + 1 == warm_up) {
            // Settled once two samples 100 ms apart agree on everything but memory.
            resource_usage last;
            before = co_await settle(io, rdma, [&](const resource_usage& u) {
              const bool same = u.fds == last.fds && u.rdma == last.rdma;
              last = u;
              return same;
            });
          }
        }
        // The last connection's stream is freed by its last handler, which may not have run
        // yet when the client's close returns: wait for its memory too.
        after = co_await settle(io, rdma, [&](const resource_usage& u) {
          if (u.fds > before.fds || u.heap_bytes > before.heap_bytes + heap_slack) return false;
          for (const auto& [type, count] : u.rdma) {
            if (count > before.rdma.at(type)) return false;
          }
          return true;
        });
      },
      std::chrono::seconds(600));
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << cycles << " connect/close cycles in " << seconds << " s\n  after " << warm_up << ": " << before
            << "\n  at the end: " << after << std::endl;

  BOOST_TEST(closed == cycles);
  BOOST_TEST(after.fds == before.fds);
  for (const auto& [type, count] : before.rdma) {
    BOOST_TEST_CONTEXT(type) {
      BOOST_TEST(after.rdma.at(type) == count);
    }
  }
  if (rdma) {
    // Every connection's queue pair and receive pool is gone between cycles, not just reused.
    BOOST_TEST(after.rdma.at("qp") == 0u);
    BOOST_TEST(after.rdma.at("mr") == 0u);
  }
  BOOST_TEST(after.heap_bytes <= before.heap_bytes + heap_slack);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Resident memory is coarse (whole pages, the allocator keeps freed memory), so it only
  // catches large leaks; sanitizer quarantines make it meaningless there.
  BOOST_TEST(after.rss_kib <= before.rss_kib + 4096);
#endif
}

}  // namespace coverbs::test
