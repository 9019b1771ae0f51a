// The message patterns every benchmark runs, written once as templates over the socket type,
// so coverbs::socket and asio::ip::tcp::socket execute exactly the same coroutine code and a
// difference in the figures is the socket's. Only Asio headers here: the plain-Asio baseline
// includes this too.
#pragma once

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "common.hpp"

namespace bench {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

/// What a message receive completes with: the error and the size.
using receive_result = std::tuple<boost::system::error_code, std::size_t>;

/// The size a message receive got, 0 when the peer has gone; other errors throw.
inline std::size_t received_size(const receive_result& r) {
  const auto& [ec, n] = r;
  if (ec && ec != asio::error::eof) throw boost::system::system_error(ec);
  return ec ? 0 : n;
}

/// Fixed-size messages over a byte stream, the way a plain Asio program frames them when both
/// sides know the size. Each function returns the initiating function's awaitable itself, as
/// an application's `co_await` of it would run: a coroutine of our own around it would add a
/// frame and a resumption per operation to every figure.
struct stream_messages {
  template <class Socket>
  static awaitable<std::size_t> send(Socket& s, asio::const_buffer b) {
    return asio::async_write(s, b, use_awaitable);
  }
  template <class Socket>
  static awaitable<receive_result> receive(Socket& s, asio::mutable_buffer b) {
    return asio::async_read(s, b, asio::as_tuple(use_awaitable));
  }
};

/// What the two sides of a run share: results flow from the server thread to the main one.
struct shared_state {
  std::mutex mutex;
  std::exception_ptr error;
  clock_type::time_point start;         ///< set before the clients start (see stream::client)
  std::size_t clients = 0;              ///< how many clients run_pair runs
  std::atomic<std::size_t> pending{0};  ///< stream: receivers still short of their bytes
  std::atomic<clock_type::rep> end{0};  ///< stream: when the last receiver had everything
  void fail(std::exception_ptr e) {
    std::lock_guard lock(mutex);
    if (!error) error = e;
  }
};

/// Runs one case: a server thread accepts `connections` connections and runs `serve` on each;
/// this thread connects them all, notes the start time, then runs `client` on each. Each side
/// has its own io_context and thread, like two processes (and like perftest's two sides).
/// The first failure on either side stops both (the other would wait for ever) and is
/// rethrown here.
template <class Socket, class MakeAcceptor, class MakeSocket, class Serve, class Client>
void run_pair(shared_state& state, std::size_t connections, MakeAcceptor make_acceptor,
              MakeSocket make_socket, Serve serve, Client client) {
  asio::io_context server_io, client_io;  // outlive every socket, which are made inside
  state.clients = connections;
  auto fail = [&](std::exception_ptr e) {
    state.fail(e);
    server_io.stop();
    client_io.stop();
  };
  auto on_error = [&fail](std::exception_ptr e) {
    if (e) fail(e);
  };
  std::promise<typename Socket::endpoint_type> listening;
  std::thread server([&] {
    try {
      auto acceptor = make_acceptor(server_io);
      listening.set_value(acceptor.local_endpoint());
      std::vector<std::unique_ptr<Socket>> live;  // outlives the sessions: io.run() ends first
      asio::co_spawn(
          server_io,
          [&]() -> awaitable<void> {
            for (std::size_t i = 0; i < connections; ++i) {
              live.push_back(std::make_unique<Socket>(co_await acceptor.async_accept(use_awaitable)));
              asio::co_spawn(server_io, serve(*live.back(), i), on_error);
            }
            acceptor.close();
          },
          on_error);
      server_io.run();
    } catch (...) {
      fail(std::current_exception());
      try {
        listening.set_exception(std::current_exception());
      } catch (const std::future_error&) {  // already listening: the error is recorded
      }
    }
  });
  try {
    const auto endpoint = listening.get_future().get();
    std::vector<std::unique_ptr<Socket>> sockets;
    for (std::size_t i = 0; i < connections; ++i) {
      sockets.push_back(std::make_unique<Socket>(make_socket(client_io)));
    }
    asio::co_spawn(
        client_io,
        [&]() -> awaitable<void> {
          for (auto& s : sockets) co_await s->async_connect(endpoint, use_awaitable);
          state.start = clock_type::now();
          for (std::size_t i = 0; i < connections; ++i) {
            asio::co_spawn(client_io, client(*sockets[i], i), on_error);
          }
        },
        on_error);
    client_io.run();
  } catch (...) {
    fail(std::current_exception());
  }
  server.join();
  if (state.error) std::rethrow_exception(state.error);
}

/// A registration of `data` on `s`, held while a side sends from it, where the socket type
/// registers memory (coverbs over RDMA: large stream writes from it, and with
/// zero_copy_messages large messages, go out uncopied, as perftest sends from registered
/// memory); nothing for a plain Asio socket.
template <class Socket>
auto register_if_possible(Socket& s, std::span<std::byte> data, bool wanted) {
  if constexpr (requires { s.register_memory(data, {}); }) {
    std::optional<decltype(s.register_memory(data, {}))> registration;
    if (wanted) registration.emplace(s.register_memory(data, {}));
    return registration;
  } else {
    return false;  // nothing registered
  }
}

/// Ping-pong: the client sends a message and waits for the same size back, `warmup + count`
/// times; samples are half round trips in µs, as perftest's latency tests report them.
template <class Messages>
struct pingpong {
  std::size_t size, warmup, count;
  latency_samples samples;
  double allocations_per_trip = 0;  ///< both sides, measured iterations only
  bool register_buffers = false;    ///< each side registers the buffer it sends from

  template <class Socket>
  awaitable<void> serve(Socket& s, std::size_t) {
    std::vector<std::byte> buffer(size);
    [[maybe_unused]] const auto registration = register_if_possible(s, buffer, register_buffers);
    for (;;) {
      const std::size_t n = received_size(co_await Messages::receive(s, asio::buffer(buffer)));
      if (n == 0) break;
      co_await Messages::send(s, asio::buffer(buffer.data(), n));
    }
    s.close();
  }

  template <class Socket>
  awaitable<void> client(Socket& s, std::size_t) {
    std::vector<std::byte> out(size, std::byte{0x5a}), in(size);
    [[maybe_unused]] const auto registration = register_if_possible(s, out, register_buffers);
    samples.reserve(count);
    std::size_t allocated = 0;
    // One clock reading per round trip, each sample running from the previous one, as perftest
    // stamps its iterations: in the VM reading the clock is a system call.
    auto t0 = clock_type::now();
    for (std::size_t i = 0; i < warmup + count; ++i) {
      if (i == warmup) allocated = allocations.load();
      co_await Messages::send(s, asio::buffer(out));
      if (received_size(co_await Messages::receive(s, asio::buffer(in))) != size) {
        throw std::runtime_error("short reply");
      }
      const auto t1 = clock_type::now();
      if (i >= warmup) samples.add(micros(t1 - t0) / 2);
      t0 = t1;
    }
    allocations_per_trip = static_cast<double>(allocations.load() - allocated) / static_cast<double>(count);
    s.close();
  }
};

/// Streaming: each client writes `bytes` with asio::async_write calls of `size` bytes; each
/// server reads them with async_read_some. The clock runs from when every client is connected
/// and has its buffer (allocated, filled and registered, as perftest's are before its clock)
/// until the last server has all its bytes.
struct stream {
  std::size_t size, bytes;
  shared_state* state;
  bool register_source = false;  ///< register the client's buffer (see register_if_possible)
  std::size_t ready = 0;         ///< clients with their buffer, counted on the clients' thread

  template <class Socket>
  awaitable<void> serve(Socket& s, std::size_t) {
    std::vector<std::byte> buffer(std::max<std::size_t>(size, 64 * 1024));
    std::size_t got = 0;
    while (got < bytes) {
      got += co_await s.async_read_some(asio::buffer(buffer), use_awaitable);
    }
    if (state->pending.fetch_sub(1) == 1) state->end = clock_type::now().time_since_epoch().count();
    // Wait for the client's end of stream, so neither side aborts the other.
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buffer), asio::as_tuple(use_awaitable));
    if (!ec) throw std::runtime_error("stream: more bytes than were sent");
    s.close();
  }

  template <class Socket>
  awaitable<void> client(Socket& s, std::size_t) {
    std::vector<std::byte> data(size, std::byte{0xa5});
    const auto registration = register_if_possible(s, data, register_source);
    // No client writes before all have their buffers, and the clock restarts then: the clients
    // share a thread, so each waits by yielding it to the others, and none has written yet.
    if (++ready >= state->clients) {
      state->start = clock_type::now();
    } else {
      const auto executor = co_await asio::this_coro::executor;
      while (ready < state->clients) co_await asio::post(executor, use_awaitable);
    }
    for (std::size_t sent = 0; sent < bytes;) {
      const auto next = asio::buffer(data.data(), std::min(size, bytes - sent));
      // From registered memory: async_write_some with the whole write (asio::async_write offers
      // at most 64 KiB per call, which the RDMA stream copies; see rdma_stream::transmit_direct).
      if (registration) {
        for (std::size_t done = 0; done < next.size();) {
          done += co_await s.async_write_some(next + done, use_awaitable);
        }
        sent += next.size();
      } else {
        sent += co_await asio::async_write(s, next, use_awaitable);
      }
    }
    s.shutdown(asio::socket_base::shutdown_send);
    std::byte b;
    auto [ec, n] = co_await s.async_read_some(asio::buffer(&b, 1), asio::as_tuple(use_awaitable));
    if (ec != asio::error::eof) throw std::runtime_error("stream: the server did not end cleanly");
    s.close();
  }
};

/// Echo: each client does `count` round trips of `size` bytes (write, then read it all
/// back); the server echoes whatever it reads, as a typical Asio echo server does. Samples
/// are whole round trips in µs, all connections' together (reserve room for them before the
/// run); the rate counts all connections from the start.
struct echo {
  std::size_t size, warmup, count;
  std::mutex mutex;
  latency_samples samples;  ///< every client's, added unlocked: the clients share a thread
  clock_type::time_point end;

  template <class Socket>
  awaitable<void> serve(Socket& s, std::size_t) {
    std::vector<std::byte> buffer(64 * 1024);
    for (;;) {
      auto [ec, n] = co_await s.async_read_some(asio::buffer(buffer), asio::as_tuple(use_awaitable));
      if (ec) break;
      co_await asio::async_write(s, asio::buffer(buffer.data(), n), use_awaitable);
    }
    s.close();
  }

  template <class Socket>
  awaitable<void> client(Socket& s, std::size_t) {
    std::vector<std::byte> out(size, std::byte{0x3c}), in(size);
    for (std::size_t i = 0; i < warmup + count; ++i) {
      const auto t0 = clock_type::now();
      co_await asio::async_write(s, asio::buffer(out), use_awaitable);
      co_await asio::async_read(s, asio::buffer(in), use_awaitable);
      if (i >= warmup) samples.add(micros(clock_type::now() - t0));
    }
    s.close();
    std::lock_guard lock(mutex);  // the clients share a thread; the lock is for the reader
    end = clock_type::now();
  }
};

}  // namespace bench
