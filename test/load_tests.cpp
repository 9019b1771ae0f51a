// The bodies declared in load_tests.hpp, compiled once for both transports' tests.

#include "load_tests.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>
#include <cstdlib>
#include <random>

#include "connected_pair.hpp"
#include "stream_tests.hpp"

namespace coverbs::test {

/// FNV-1a over a byte stream, fed piece by piece.
struct checksum {
  std::uint64_t value = 1469598103934665603ull;
  void add(const std::byte* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      value = (value ^ std::to_integer<std::uint64_t>(p[i])) * 1099511628211ull;
  }
};

/// Echoes with random read sizes, so message and read boundaries never line up.
inline asio::awaitable<void> random_echo(socket s, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> buf(256 * 1024);
  for (;;) {
    const std::size_t want = std::uniform_int_distribution<std::size_t>(1, buf.size())(rng);
    auto [ec, n] =
        co_await s.async_read_some(asio::buffer(buf.data(), want), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    co_await asio::async_write(s, asio::buffer(buf.data(), n), asio::use_awaitable);
  }
}

struct load_result {
  checksum sent, received;
  std::size_t bytes_back = 0;
};

/// Writes `total` pseudo-random bytes in random-size pieces while reading the echo back.
inline asio::awaitable<void> random_client(socket& s, asio::ip::tcp::endpoint server, std::size_t total,
                                           unsigned seed, load_result& out) {
  co_await s.async_connect(server, asio::use_awaitable);
  auto writer = [&]() -> asio::awaitable<void> {
    std::mt19937 rng(seed);
    std::vector<std::byte> chunk(300 * 1024);
    for (std::size_t done = 0; done < total;) {
      const std::size_t n =
          std::min(total - done, std::uniform_int_distribution<std::size_t>(1, chunk.size())(rng));
      for (std::size_t i = 0; i < n; ++i) chunk[i] = static_cast<std::byte>(rng());
      out.sent.add(chunk.data(), n);
      co_await asio::async_write(s, asio::buffer(chunk.data(), n), asio::use_awaitable);
      done += n;
    }
  };
  auto reader = [&]() -> asio::awaitable<void> {
    std::mt19937 rng(seed * 7 + 1);
    std::vector<std::byte> buf(200 * 1024);
    while (out.bytes_back < total) {
      const std::size_t want = std::uniform_int_distribution<std::size_t>(1, buf.size())(rng);
      const std::size_t n = co_await s.async_read_some(asio::buffer(buf.data(), want), asio::use_awaitable);
      out.received.add(buf.data(), n);
      out.bytes_back += n;
    }
  };
  co_await (writer() && reader());
  s.shutdown(asio::socket_base::shutdown_send);
}

/// $COVERBS_LOAD_DIVISOR (default 1) divides the bytes each connection carries: sanitizer runs,
/// many times slower per byte, keep every connection and all the concurrency but move less.
inline std::size_t load_divisor() {
  const char* d = std::getenv("COVERBS_LOAD_DIVISOR");
  const long n = d != nullptr ? std::atol(d) : 1;
  return n > 0 ? static_cast<std::size_t>(n) : 1;
}

void many_connections(transport kind, int connections, std::size_t bytes_each, socket_options options) {
  bytes_each /= load_divisor();
  asio::io_context io;
  options.kind = kind;
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < connections; ++i) {
          auto s = co_await server.async_accept(asio::use_awaitable);
          asio::co_spawn(io, random_echo(std::move(s), static_cast<unsigned>(i)), asio::detached);
        }
      },
      asio::detached);
  std::vector<load_result> results(static_cast<std::size_t>(connections));
  std::vector<std::unique_ptr<socket>> clients;
  int finished = 0;
  for (int i = 0; i < connections; ++i) {
    clients.push_back(std::make_unique<socket>(io, options));
    asio::co_spawn(io,
                   random_client(*clients.back(), server.local_endpoint(), bytes_each,
                                 static_cast<unsigned>(i + 1), results[static_cast<std::size_t>(i)]),
                   [&](std::exception_ptr e) {
                     if (e) std::rethrow_exception(e);
                     if (++finished == connections) io.stop();
                   });
  }
  io.run_for(std::chrono::seconds(600));
  BOOST_REQUIRE_EQUAL(finished, connections);
  for (const auto& r : results) {
    BOOST_TEST(r.bytes_back == bytes_each);
    BOOST_TEST(r.sent.value == r.received.value);
  }
}

}  // namespace coverbs::test
