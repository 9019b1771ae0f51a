// cm::id speaks plain rdma_cm: it interoperates with rdma-core's own examples (rdmacm-utils).
// rdma_server and rdma_client (librdmacm/examples) connect without private data on a QP with
// one send and one receive; the client sends 16 bytes first, the server answers with 16 of
// its own (zeros: it never fills its send buffer), then the server disconnects (and the
// client, once it has the answer). Nothing of coverbs's own goes on the wire.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coverbs/coverbs.hpp"
#include "test_address.hpp"

extern char** environ;

namespace asio = boost::asio;
using namespace coverbs;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

/// A child process whose stdout and stderr go to a pipe; killed if it outlives the test.
class child {
 public:
  explicit child(std::vector<std::string> args) {
    int fds[2];
    BOOST_REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    output_fd_ = fds[0];
    BOOST_REQUIRE_MESSAGE(rc == 0, "cannot start " << args[0] << ": " << std::strerror(rc));
  }
  ~child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(output_fd_);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  /// The exit status once it exits within `limit`; otherwise it is killed and this is -1.
  int wait(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return -1;  // the destructor kills it
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  /// Everything it printed (call after `wait`).
  std::string output() {
    std::string text;
    char buffer[4096];
    for (ssize_t n; (n = read(output_fd_, buffer, sizeof buffer)) > 0;)
      text.append(buffer, static_cast<std::size_t>(n));
    return text;
  }

 private:
  pid_t pid_ = -1;
  int output_fd_ = -1;
};

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

struct interop_fixture {
  asio::io_context io;
  std::optional<verbs::protection_domain> pd;  // before the ids: their QPs go first
  std::optional<completion_service> service;
  std::vector<std::byte> mem = std::vector<std::byte>(64);
  std::optional<verbs::memory_region> mr;

  void use_device(const verbs::device& dev) {
    if (pd) return;
    pd.emplace(dev);
    service.emplace(io.get_executor(), dev);
    mr.emplace(*pd, mem, verbs::access::local_write);
  }
  int peer_status = -1;
  std::string peer_output;

  /// Runs `body` on `io` (bounded), then collects `peer`'s exit status and output; the peer is
  /// killed when the body hung or the peer does not exit soon after it.
  template <class F>
  void run(F body, child& peer, std::chrono::seconds limit = 60s) {
    std::exception_ptr failure;
    bool finished = false;
    asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
      failure = e;
      finished = true;
    });
    io.run_for(limit);
    io.restart();
    peer_status = peer.wait(finished ? 10s : 0s);
    peer_output = peer.output();
    BOOST_REQUIRE_MESSAGE(finished,
                          "the coroutine did not finish in time; the peer printed: " << peer_output);
    if (!failure) return;
    for (;;) {  // unwrap what awaitable operators summarise: report the cause
      try {
        std::rethrow_exception(failure);
      } catch (const asio::multiple_exceptions& e) {
        failure = e.first_exception();
      }
    }
  }
};

constexpr verbs::queue_pair_options small_qp{.max_send_wr = 4, .max_recv_wr = 4};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cm_interop, interop_fixture)

BOOST_AUTO_TEST_CASE(our_client_against_rdma_server) {
  const std::string port = "7471";
  child server({"/usr/bin/rdma_server", "-p", port});
  std::memcpy(mem.data() + 16, "coverbs->server!", 16);
  auto exchange = [&]() -> asio::awaitable<void> {
    const tcp::endpoint remote(coverbs::test::rdma_address(), static_cast<unsigned short>(std::stoi(port)));
    // The server may not listen yet (starting it in the VM can take seconds): a refusal comes
    // back at once, so try again shortly, for a while.
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    for (int attempt = 0;; ++attempt) {
      cm::id client(io.get_executor());
      co_await client.async_resolve(remote, 2s, use_awaitable);
      use_device(client.device());
      async_queue_pair qp(*service, client.create_queue_pair(*service, *pd, small_qp));
      BOOST_TEST_CHECKPOINT("connecting, attempt " << attempt);
      auto talk = [&]() -> asio::awaitable<error_code> {
        auto [ec] = co_await client.async_connect({}, asio::as_tuple(use_awaitable));
        if (ec) {
          qp.close();  // flushes the receive posted for the answer
          co_return ec;
        }
        BOOST_TEST_CHECKPOINT("connected, sending");
        co_await async_send(qp, mr->slice(16, 16), use_awaitable);
        BOOST_TEST_CHECKPOINT("sent, waiting for the answer");
        co_return ec;
      };
      auto [answer_ec, answer_size, ec] =
          co_await (async_receive(qp, mr->slice(0, 16), asio::as_tuple(use_awaitable)) && talk());
      if (ec == asio::error::connection_refused && std::chrono::steady_clock::now() < give_up) {
        co_await asio::steady_timer(io, 100ms).async_wait(use_awaitable);
        continue;
      }
      BOOST_REQUIRE_MESSAGE(!ec, ec.message());
      BOOST_TEST(!answer_ec);
      BOOST_TEST(answer_size == 16u);
      BOOST_TEST(all_zero(std::span(mem).first(16)));
      BOOST_TEST(all_zero(client.peer_private_data()));  // it accepted without private data
      BOOST_TEST_CHECKPOINT("answered, waiting for the server's disconnect");
      co_await client.async_wait_disconnected(use_awaitable);
      break;
    }
  };
  run(exchange, server);
  BOOST_TEST(peer_status == 0);
  BOOST_TEST(peer_output.find("rdma_server: end 0") != std::string::npos, peer_output);
}

BOOST_AUTO_TEST_CASE(rdma_client_against_our_server) {
  cm::id listener(io.get_executor());
  listener.bind({asio::ip::address_v4::any(), 0});
  listener.listen();
  child client(
      {"/usr/bin/rdma_client", "-s", coverbs::test::rdma_address().to_string(), "-p", std::to_string(listener.local_endpoint().port())});
  std::memcpy(mem.data() + 16, "server->client!!", 16);
  auto serve = [&]() -> asio::awaitable<void> {
    cm::id conn = co_await listener.async_get_request(use_awaitable);
    BOOST_TEST_CHECKPOINT("accepting");
    BOOST_TEST(all_zero(conn.peer_private_data()));  // it connected without private data
    use_device(conn.device());
    async_queue_pair qp(*service, conn.create_queue_pair(*service, *pd, small_qp));
    const std::size_t received =
        co_await (async_receive(qp, mr->slice(0, 16), use_awaitable) && conn.async_accept({}, use_awaitable));
    BOOST_TEST(received == 16u);
    BOOST_TEST(all_zero(std::span(mem).first(16)));  // its send buffer is never filled
    BOOST_TEST_CHECKPOINT("received, answering");
    co_await async_send(qp, mr->slice(16, 16), use_awaitable);
    BOOST_TEST_CHECKPOINT("answered, waiting for the client's disconnect");
    co_await conn.async_wait_disconnected(use_awaitable);
  };
  run(serve, client);
  BOOST_TEST(peer_status == 0);
  BOOST_TEST(peer_output.find("rdma_client: end 0") != std::string::npos, peer_output);
}

BOOST_AUTO_TEST_SUITE_END()
