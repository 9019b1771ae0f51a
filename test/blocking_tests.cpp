// The bodies declared in blocking_tests.hpp, compiled once for both transports' tests.

#include "blocking_tests.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cctype>
#include <chrono>
#include <exception>
#include <future>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "coverbs/acceptor.hpp"
#include "coverbs/connect.hpp"
#include "echo_program.hpp"
#include "test_address.hpp"

namespace coverbs::test {

namespace {
namespace asio = boost::asio;

/// A thread that runs a server's context until it runs out of work (then stopped() is true);
/// stopped and joined by stop() or at destruction, also when a check throws.
class server_runner {
 public:
  explicit server_runner(asio::io_context& io)
      : io_(io), thread_([this] {
          io_.run();
          stopped_ = true;
        }) {}
  server_runner(const server_runner&) = delete;
  server_runner& operator=(const server_runner&) = delete;
  ~server_runner() { stop(); }

  void stop() {
    if (!thread_.joinable()) return;
    io_.stop();
    thread_.join();
  }
  const std::atomic<bool>& stopped() const noexcept { return stopped_; }

 private:
  asio::io_context& io_;
  std::atomic<bool> stopped_ = false;
  std::thread thread_;  // last: it starts once the others are set
};

/// Runs `io` on this thread until the other side's context has run out of work, as it does
/// once both ends are closed: a closed end goes on in its context (an RDMA close waits for its
/// sends).
void run_until_stopped(asio::io_context& io, const std::atomic<bool>& other_stopped) {
  io.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!other_stopped && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(std::chrono::milliseconds(20));
  }
  BOOST_TEST(other_stopped.load());
}

/// Closes the client and runs its context until the server's has run out of work.
void close_and_wait(socket& client, asio::io_context& client_io, const std::atomic<bool>& server_stopped) {
  client.close();
  run_until_stopped(client_io, server_stopped);
}

/// A buffer sequence that throws when read, as a start (where the socket copies it) would.
struct failing_buffers {
  struct iterator {
    using value_type = asio::mutable_buffer;
    using difference_type = std::ptrdiff_t;
    using pointer = const asio::mutable_buffer*;
    using reference = asio::mutable_buffer;
    using iterator_category = std::forward_iterator_tag;
    bool end = false;
    asio::mutable_buffer operator*() const { throw std::runtime_error("sequence"); }
    iterator& operator++() {
      end = true;
      return *this;
    }
    iterator operator++(int) {
      iterator before = *this;
      end = true;
      return before;
    }
    bool operator==(const iterator&) const = default;
  };
  iterator begin() const { return {}; }
  iterator end() const { return {true}; }
};

/// The server's side of the word exchange: five bytes read, sent back upper-cased.
asio::awaitable<std::string> read_word(socket& s) {
  std::string word(5, '\0');
  co_await asio::async_read(s, asio::buffer(word), asio::use_awaitable);
  co_return word;
}
std::string upper_cased(std::string word) {
  std::transform(word.begin(), word.end(), word.begin(), [](char c) { return std::toupper(c); });
  return word;
}
asio::awaitable<void> answer_upper_cased(socket& s, std::string word) {
  co_await asio::async_write(s, asio::buffer(upper_cased(std::move(word))), asio::use_awaitable);
}

/// Whether `e` says `what`.
auto says(const char* what) {
  return [what](const std::runtime_error& e) { return std::string(e.what()) == what; };
}
}  // namespace

/// The client's io_context is never run but by its blocking calls. The server answers: the
/// five bytes written, upper-cased; the message sent, reversed; then a line; then it waits
/// for the end of the stream and closes. Inside a handler of its own context a blocking call
/// fails with would_block instead of stalling that context.
void blocking_calls(transport kind) {
  using asio::use_awaitable;
  asio::io_context server_io, client_io;
  const socket_options options{.kind = kind};
  acceptor listener(server_io, {test_address(), 0}, options);
  asio::ip::tcp::endpoint nobody;  // a port nobody listens on (any more), over both transports
  {
    acceptor probe(server_io, {test_address(), 0}, options);
    nobody = probe.local_endpoint();
  }

  bool server_saw_eof = false;
  std::exception_ptr server_failure;
  asio::co_spawn(
      server_io,
      [&]() -> asio::awaitable<void> {
        socket s = co_await listener.async_accept(use_awaitable);
        co_await answer_upper_cased(s, co_await read_word(s));
        std::array<char, 64> message{};
        const std::size_t n = co_await s.async_receive(asio::buffer(message), use_awaitable);
        std::reverse(message.begin(), message.begin() + static_cast<std::ptrdiff_t>(n));
        co_await s.async_send(asio::buffer(message.data(), n), use_awaitable);
        co_await asio::async_write(s, asio::buffer("a line\nand more", 15), use_awaitable);
        char byte = 0;
        auto [ec, ignored] =
            co_await s.async_read_some(asio::buffer(&byte, 1), asio::as_tuple(use_awaitable));
        server_saw_eof = ec == asio::error::eof;
        s.close();
      },
      [&](std::exception_ptr e) { server_failure = e; });
  server_runner server(server_io);

  socket client(client_io, options);
  const std::vector<asio::ip::tcp::endpoint> candidates{nobody, listener.local_endpoint()};
  asio::ip::tcp::endpoint connected;
  BOOST_CHECK_NO_THROW(connected = coverbs::connect(client, candidates));
  BOOST_TEST((connected == listener.local_endpoint()));
  BOOST_TEST((client.transport_in_use() == kind));

  BOOST_TEST(asio::write(client, asio::buffer("hello", 5)) == 5u);
  std::string upper(5, '\0');
  BOOST_TEST(asio::read(client, asio::buffer(upper)) == 5u);
  BOOST_TEST(upper == "HELLO");
  BOOST_TEST(client.send(asio::buffer("message", 7)) == 7u);
  std::array<char, 64> reply{};
  const std::size_t n = client.receive(asio::buffer(reply));
  BOOST_TEST(std::string(reply.data(), n) == "egassem");
  std::string text;
  const std::size_t line = asio::read_until(client, asio::dynamic_buffer(text), '\n');
  BOOST_TEST(line == 7u);
  BOOST_TEST(text.substr(0, line) == "a line\n");

  error_code inside;
  bool ran = false;
  asio::post(client_io, [&] {
    std::array<char, 4> b{};
    client.read_some(asio::buffer(b), inside);
    ran = true;
  });
  client_io.restart();
  while (!ran && client_io.run_one() > 0) {
  }
  BOOST_TEST((inside == asio::error::would_block), inside.message());

  client.shutdown(asio::socket_base::shutdown_send);
  error_code end;
  std::array<char, 64> rest{};
  std::size_t got = 0;
  for (std::size_t k = 1; !end && k > 0;) got += k = client.read_some(asio::buffer(rest), end);
  BOOST_TEST((end == asio::error::eof), end.message());
  BOOST_TEST(text.size() - line + got == 8u);  // "and more", partly read by read_until
  BOOST_CHECK_THROW(client.read_some(asio::buffer(rest)), boost::system::system_error);

  close_and_wait(client, client_io, server.stopped());
  server.stop();
  BOOST_TEST(!server_failure);
  BOOST_TEST(server_saw_eof);

  socket unconnected(client_io, options);
  error_code refused;
  BOOST_TEST(coverbs::connect(unconnected, std::vector{nobody}, refused) == asio::ip::tcp::endpoint());
  BOOST_TEST((refused == asio::error::connection_refused), refused.message());
  coverbs::connect(unconnected, std::vector<asio::ip::tcp::endpoint>{}, refused);
  BOOST_TEST((refused == asio::error::not_found), refused.message());
}

void blocking_calls_on_a_thread_pool(transport kind) {
  asio::io_context server_io;
  const socket_options options{.kind = kind};
  acceptor listener(server_io, {test_address(), 0}, options);
  asio::co_spawn(server_io, echo::server(listener, 1), asio::detached);
  server_runner server(server_io);

  asio::thread_pool pool(2);
  {
    socket client(asio::make_strand(pool), options);
    BOOST_CHECK_NO_THROW(client.connect(listener.local_endpoint()));
    BOOST_TEST((client.transport_in_use() == kind));
    for (const std::string line : {"over the pool\n", "and again\n"}) {
      BOOST_TEST(asio::write(client, asio::buffer(line)) == line.size());
      std::string echoed;
      const std::size_t n = asio::read_until(client, asio::dynamic_buffer(echoed), '\n');
      BOOST_TEST(echoed.substr(0, n) == line);
    }
    // The socket's other members run on its strand, as everything of a connection does: on
    // the pool's threads. A blocking call in a handler there is refused, not left to hang.
    const auto on_strand = [&](auto call) {
      auto done = std::make_shared<std::promise<void>>();  // outlives a wait that gave up
      asio::post(client.get_executor(), [call, done] {
        call();
        done->set_value();
      });
      return done->get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    };
    // Where the start throws (on a thread of the pool), the caller gets the exception.
    BOOST_CHECK_EXCEPTION(client.read_some(failing_buffers{}), std::runtime_error, says("sequence"));
    error_code inside;
    BOOST_REQUIRE(on_strand([&] {
      std::array<char, 4> b{};
      client.read_some(asio::buffer(b), inside);
    }));
    BOOST_TEST((inside == asio::error::would_block), inside.message());

    BOOST_TEST(on_strand([&] { client.shutdown(asio::socket_base::shutdown_send); }));
    error_code end;
    std::array<char, 8> rest{};
    BOOST_TEST(client.read_some(asio::buffer(rest), end) == 0u);
    BOOST_TEST((end == asio::error::eof), end.message());
    BOOST_TEST(on_strand([&] { client.close(); }));
    pool.stop();
    pool.join();
  }
}

/// A handler of the client's context throws while a blocking call runs that context. Before
/// the call's operation has started, the exception leaves the call at once and no read is left
/// behind (the next read is not refused as one in progress). With the operation under way, the
/// call cancels it, waits for its end, and then lets the exception go: the answer that comes
/// after that is the next read's, not lost (where the answer beats the cancel, the call
/// returns it and the exception leaves the context's next run). A start that throws (here,
/// reading the buffer sequence) throws from the call.
void blocking_calls_meet_throwing_handlers(transport kind) {
  using asio::use_awaitable;
  asio::io_context server_io, client_io;
  const socket_options options{.kind = kind};
  acceptor listener(server_io, {test_address(), 0}, options);
  // The server answers only once released, by the client's throwing handler: the client's read
  // is surely under way when that throws.
  asio::steady_timer release(server_io, std::chrono::seconds(60));  // a watchdog, too
  bool released = false;
  std::exception_ptr server_failure;
  asio::co_spawn(
      server_io,
      [&]() -> asio::awaitable<void> {
        socket s = co_await listener.async_accept(use_awaitable);
        std::string word = co_await read_word(s);
        if (!released) co_await release.async_wait(asio::as_tuple(use_awaitable));
        co_await answer_upper_cased(s, std::move(word));
        char byte = 0;
        co_await s.async_read_some(asio::buffer(&byte, 1), asio::as_tuple(use_awaitable));  // the end
        s.close();
      },
      [&](std::exception_ptr e) { server_failure = e; });
  server_runner server(server_io);

  socket client(client_io, options);
  BOOST_REQUIRE_NO_THROW(client.connect(listener.local_endpoint()));
  BOOST_TEST(asio::write(client, asio::buffer("hello", 5)) == 5u);

  std::string upper(5, '\0');
  asio::post(client_io, [] { throw std::runtime_error("before"); });
  BOOST_CHECK_EXCEPTION(client.read_some(asio::buffer(upper)), std::runtime_error, says("before"));
  BOOST_CHECK_EXCEPTION(client.read_some(failing_buffers{}), std::runtime_error, says("sequence"));

  // Cancelled by the exception, the read ends before the server's answer: that comes to the
  // next read. (A read left behind by "before" would make the reads here fail with
  // in_progress.)
  asio::steady_timer soon(client_io, std::chrono::milliseconds(20));
  soon.async_wait([&](error_code) {
    asio::post(server_io, [&] {
      released = true;
      release.cancel();
    });
    throw std::runtime_error("during");
  });
  std::string during;
  std::size_t n = 0;
  try {
    n = asio::read(client, asio::buffer(upper));
  } catch (const std::runtime_error& e) {
    during = e.what();
  }
  if (during.empty()) {
    // The answer beat the cancel (in the same batch of completions, say): the read's result
    // is kept, and the exception leaves the context's next run.
    BOOST_TEST(n == 5u);
    BOOST_CHECK_EXCEPTION(client_io.poll(), std::runtime_error, says("during"));
  } else {
    BOOST_TEST(during == "during");
    BOOST_TEST(asio::read(client, asio::buffer(upper)) == 5u);
  }
  BOOST_TEST(upper == "HELLO");

  close_and_wait(client, client_io, server.stopped());
  server.stop();
  BOOST_TEST(!server_failure);
}

/// The shape of Asio's blocking echo server: the server's io_context is never run but by its
/// blocking calls. accept() reports each client's address, accept(peer) takes the next client
/// into a socket, reads and writes block; each client's word comes back upper-cased and its
/// end of stream is seen. Inside a handler of the acceptor's context accept() fails with
/// would_block; once closed, with bad_descriptor (the throwing form throws).
void blocking_server(transport kind) {
  asio::io_context server_io, client_io;
  const socket_options options{.kind = kind};
  acceptor listener(server_io, {test_address(), 0}, options);
  const asio::ip::tcp::endpoint server = listener.local_endpoint();
  // Three clients, one after the other, on a thread of their own.
  const std::array<std::string, 3> words{"hello", "again", "third"};
  std::vector<asio::ip::tcp::endpoint> client_ends;
  std::vector<std::string> answers;
  std::exception_ptr client_failure;
  asio::co_spawn(
      client_io,
      [&]() -> asio::awaitable<void> {
        for (const std::string& word : words) {
          socket c(client_io, options);
          co_await c.async_connect(server, asio::use_awaitable);
          client_ends.push_back(c.local_endpoint());
          co_await asio::async_write(c, asio::buffer(word), asio::use_awaitable);
          answers.push_back(co_await read_word(c));
          c.close();
        }
      },
      [&](std::exception_ptr e) {
        client_failure = e;
        // A blocking accept waiting for a client that failed would wait for good: end it.
        if (e) asio::post(server_io, [&] { listener.cancel(); });
      });
  server_runner clients(client_io);

  const auto answer = [](socket& s) {  // one word back upper-cased, then the end of the stream
    std::string word(5, '\0');
    asio::read(s, asio::buffer(word));
    asio::write(s, asio::buffer(upper_cased(word)));
    error_code end;
    char byte = 0;
    s.read_some(asio::buffer(&byte, 1), end);
    s.close();
    return end;
  };
  asio::ip::tcp::endpoint first_peer, second_peer;
  socket first = listener.accept(first_peer);
  BOOST_TEST((first.transport_in_use() == kind));
  const error_code first_end = answer(first);
  BOOST_TEST((first_end == asio::error::eof), first_end.message());
  socket second(server_io, options);
  listener.accept(second, second_peer);
  BOOST_TEST(second.is_open());
  const error_code second_end = answer(second);
  BOOST_TEST((second_end == asio::error::eof), second_end.message());
  error_code third_ec;
  socket third = listener.accept(third_ec);
  BOOST_TEST(!third_ec, third_ec.message());
  const asio::ip::tcp::endpoint third_peer =
      third.is_open() ? third.remote_endpoint() : asio::ip::tcp::endpoint();
  const error_code third_end = answer(third);
  BOOST_TEST((third_end == asio::error::eof), third_end.message());
  run_until_stopped(server_io, clients.stopped());
  clients.stop();
  BOOST_TEST(!client_failure);
  BOOST_REQUIRE(client_ends.size() == 3u);
  BOOST_TEST((first_peer == client_ends[0]));
  BOOST_TEST((second_peer == client_ends[1]));
  BOOST_TEST((third_peer == client_ends[2]));
  BOOST_TEST((answers == std::vector<std::string>{"HELLO", "AGAIN", "THIRD"}));

  error_code inside;
  bool ran = false;
  asio::post(server_io, [&] {
    listener.accept(inside);
    ran = true;
  });
  server_io.restart();
  while (!ran && server_io.run_one() > 0) {
  }
  BOOST_TEST((inside == asio::error::would_block), inside.message());
  listener.close();
  error_code closed;
  const socket none = listener.accept(closed);
  BOOST_TEST((closed == asio::error::bad_descriptor), closed.message());
  BOOST_TEST(!none.is_open());
  BOOST_CHECK_THROW(listener.accept(), boost::system::system_error);
}

}  // namespace coverbs::test
