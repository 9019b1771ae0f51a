// The bodies declared in threaded_server_tests.hpp, compiled once for both transports' tests.

#include "threaded_server_tests.hpp"

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coverbs/acceptor.hpp"
#include "test_address.hpp"

namespace coverbs::test {

namespace threaded_server_detail {

namespace asio = boost::asio;
using strand_type = asio::strand<asio::io_context::executor_type>;

inline bool on_own_executor(socket& s) {
  const auto ex = s.get_executor();  // target() points into it: keep it alive
  if (const auto* strand = ex.target<strand_type>()) return strand->running_in_this_thread();
  const auto* io = ex.target<asio::io_context::executor_type>();
  return io != nullptr && io->running_in_this_thread();
}

// Echoes until the client's end of stream; counts each step that ran off the socket's executor.
inline asio::awaitable<void> echo_session(socket s, std::atomic<int>& off_strand) {
  std::vector<char> buffer(16 * 1024);
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buffer), asio::as_tuple(asio::use_awaitable));
    if (!on_own_executor(s)) ++off_strand;
    if (ec) break;
    co_await asio::async_write(s, asio::buffer(buffer.data(), n), asio::use_awaitable);
    if (!on_own_executor(s)) ++off_strand;
  }
  s.close();
}

// Accepts `connections`, the i-th onto `executor_for(i)`, each served by echo_session.
template <class ExecutorFor>
asio::awaitable<void> accept_loop(acceptor& listener, int connections, ExecutorFor executor_for,
                                  std::atomic<int>& off_strand) {
  for (int i = 0; i < connections; ++i) {
    socket s = co_await listener.async_accept(executor_for(i), asio::use_awaitable);
    const auto ex = s.get_executor();
    asio::co_spawn(ex, echo_session(std::move(s), off_strand), asio::detached);
  }
}

inline asio::awaitable<void> write_in_pieces(socket& s, const std::string& data) {
  for (std::size_t at = 0, step = 1; at < data.size(); step = step * 7 % 9001 + 1) {
    const std::size_t n = std::min(step, data.size() - at);
    co_await asio::async_write(s, asio::buffer(data.data() + at, n), asio::use_awaitable);
    at += n;
  }
}

// Writes `sent` in pieces of varying size while reading the echo, and returns the echo. Runs on
// a strand, as the socket and both halves of `&&` do.
inline asio::awaitable<std::string> client(asio::ip::tcp::endpoint server, socket_options options,
                                           std::string sent) {
  using namespace asio::experimental::awaitable_operators;
  socket s(co_await asio::this_coro::executor, options);
  co_await s.async_connect(server, asio::use_awaitable);
  std::string got(sent.size(), '\0');
  co_await (write_in_pieces(s, sent) && asio::async_read(s, asio::buffer(got), asio::use_awaitable));
  s.shutdown(asio::socket_base::shutdown_send);
  co_return got;
}

constexpr int connections = 8;

// Runs `connections` clients (each on a strand of `client_io`, 256 KiB each) against `server`,
// with `runners` running the contexts; checks every echo, then closes `listener`. Bounded: a
// failure must not hang the test.
inline void run_clients(asio::io_context& client_io, acceptor& listener, const socket_options& options,
                        std::vector<std::thread>& runners, const std::function<void()>& release) {
  constexpr std::size_t bytes = 256 * 1024;
  std::vector<std::string> sent(connections);
  std::vector<std::future<std::string>> replies;
  for (int c = 0; c < connections; ++c) {
    for (std::size_t i = 0; i < bytes; ++i) sent[c].push_back(static_cast<char>((i * 131 + c * 7) % 251));
    replies.push_back(asio::co_spawn(asio::make_strand(client_io),
                                     client(listener.local_endpoint(), options, sent[c]), asio::use_future));
  }
  runners.emplace_back([&client_io] { client_io.run_for(std::chrono::seconds(150)); });
  bool all_done = true;
  for (int c = 0; c < connections; ++c) {
    if (replies[c].wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
      all_done = false;
      break;
    }
    std::string got;
    BOOST_CHECK_NO_THROW(got = replies[c].get());
    BOOST_TEST((got == sent[c]), "connection " << c << ": the echo differs");
  }
  BOOST_TEST(all_done, "the clients did not finish within 120 s");
  // The sessions end at the clients' shutdown; an accept still waits if a client failed.
  asio::post(listener.get_executor(), [&listener] { listener.close(); });
  release();
  if (!all_done) client_io.stop();
  for (auto& t : runners) t.join();
}

}  // namespace threaded_server_detail

void threaded_echo_server(transport kind) {
  using namespace threaded_server_detail;
  asio::io_context io;
  const socket_options options{.kind = kind};
  acceptor listener(asio::make_strand(io), {test_address(), 0}, options);
  std::atomic<int> off_strand{0};
  asio::co_spawn(listener.get_executor(),
                 accept_loop(
                     listener, connections, [&io](int) { return asio::make_strand(io); }, off_strand),
                 asio::detached);
  std::vector<std::thread> runners;
  for (int t = 0; t < 3; ++t) runners.emplace_back([&io] { io.run_for(std::chrono::seconds(150)); });
  run_clients(io, listener, options, runners, [] {});
  BOOST_TEST(off_strand.load() == 0);
}

void context_per_thread_echo_server(transport kind) {
  using namespace threaded_server_detail;
  constexpr int workers = 3;
  asio::io_context accept_io, client_io;
  std::vector<std::unique_ptr<asio::io_context>> worker_io;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> idle;  // until the end
  for (int w = 0; w < workers; ++w) {
    worker_io.push_back(std::make_unique<asio::io_context>());
    idle.push_back(asio::make_work_guard(*worker_io.back()));
  }
  const socket_options options{.kind = kind};
  acceptor listener(accept_io, {test_address(), 0}, options);
  std::atomic<int> off_strand{0};
  asio::co_spawn(
      accept_io,
      accept_loop(
          listener, connections, [&](int i) { return worker_io[i % workers]->get_executor(); }, off_strand),
      asio::detached);
  std::vector<std::thread> runners;
  runners.emplace_back([&accept_io] { accept_io.run_for(std::chrono::seconds(150)); });
  for (auto& w : worker_io) runners.emplace_back([&w] { w->run_for(std::chrono::seconds(150)); });
  run_clients(client_io, listener, options, runners, [&] { idle.clear(); });
  BOOST_TEST(off_strand.load() == 0);
}

}  // namespace coverbs::test
