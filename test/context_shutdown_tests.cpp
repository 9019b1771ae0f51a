// The bodies declared in context_shutdown_tests.hpp, compiled once for both transports' tests.

#include "context_shutdown_tests.hpp"

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>
#include <exception>
#include <memory>
#include <vector>

#include "coverbs/acceptor.hpp"
#include "coverbs/socket.hpp"
#include "test_address.hpp"

namespace coverbs::test {
namespace pending_at_shutdown {
namespace asio = boost::asio;

// Each coroutine owns its I/O object and a probe that nothing else owns, so the probe expires
// only if the frame is freed. `suspended` counts those that reached their wait.

inline asio::awaitable<void> read_owning(socket s, [[maybe_unused]] registered_memory exposed,
                                         [[maybe_unused]] std::shared_ptr<int> probe, int& suspended) {
  std::array<char, 16> data{};
  ++suspended;
  co_await s.async_read_some(asio::buffer(data), asio::use_awaitable);  // the peer never writes
}

inline asio::awaitable<void> receive_and_read_owning(socket s, registered_memory local, remote_buffer remote,
                                                     [[maybe_unused]] std::shared_ptr<int> probe,
                                                     int& suspended) {
  using namespace asio::experimental::awaitable_operators;
  std::array<char, 16> data{};
  ++suspended;
  // The peer never sends a message; the one-sided read is in flight when the context goes.
  co_await (s.async_receive(asio::buffer(data), asio::use_awaitable) &&
            s.async_read(local.slice(0, 64), remote, asio::use_awaitable));
}

inline asio::awaitable<void> accept_owning(acceptor a, [[maybe_unused]] std::shared_ptr<int> probe,
                                           int& suspended) {
  ++suspended;
  co_await a.async_accept(asio::use_awaitable);  // nobody else connects
}

}  // namespace pending_at_shutdown

void destroyed_context_frees_pending_coroutines(transport kind) {
  namespace asio = boost::asio;
  using namespace pending_at_shutdown;
  std::vector<std::byte> exposed(4096), landing(4096);  // outlive every registration
  std::vector<std::weak_ptr<int>> frames;
  std::weak_ptr<detail::stream_core> client_stream, server_stream;
  int suspended = 0, finished = 0;
  {
    asio::io_context io;
    const socket_options options{.kind = kind};
    acceptor listener(io, asio::ip::tcp::endpoint(test_address(), 0), options);
    socket client(io, options), server(io, options);
    int connected = 0;
    listener.async_accept(server, [&](error_code ec) { connected += ec ? 0 : 1; });
    client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected += ec ? 0 : 1; });
    while (connected < 2 && io.run_one_for(std::chrono::seconds(30)) > 0) {
    }
    BOOST_REQUIRE(connected == 2);
    BOOST_REQUIRE(client.transport_in_use() == kind);
    client_stream = client.impl();
    server_stream = server.impl();
    registered_memory target = client.register_memory(exposed, verbs::access::remote_read);
    registered_memory local = server.register_memory(landing, verbs::access::none);
    const remote_buffer remote = target.remote();

    auto probe = [&] {
      auto p = std::make_shared<int>();
      frames.push_back(p);
      return p;
    };
    auto done = [&](std::exception_ptr) { ++finished; };
    asio::co_spawn(io, accept_owning(std::move(listener), probe(), suspended), done);
    asio::co_spawn(io, read_owning(std::move(client), std::move(target), probe(), suspended), done);
    asio::co_spawn(
        io, receive_and_read_owning(std::move(server), std::move(local), remote, probe(), suspended), done);
    // Run only until all three wait; then nothing else runs before the context is destroyed.
    while (suspended < 3 && io.run_one_for(std::chrono::seconds(10)) > 0) {
    }
    BOOST_REQUIRE(suspended == 3);
  }
  BOOST_TEST(finished == 0);  // destroyed, not invoked
  for (const auto& frame : frames) BOOST_TEST(frame.expired());
  BOOST_TEST(client_stream.expired());
  BOOST_TEST(server_stream.expired());
}

}  // namespace coverbs::test
