// When an rdma_cm event loop cannot allocate what an event needs, the event is acknowledged
// all the same (rdma_destroy_id waits for every event of its id to be), the bad_alloc leaves
// run(), and nothing is left waiting: a connection request whose private data or new id's state
// cannot be kept is refused, and the listener serves the next one; a connect whose answer's
// private data cannot be copied ends without it.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <thread>

#include "coverbs/coverbs.hpp"
#include "failing_allocation.hpp"
#include "test_address.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using namespace std::chrono_literals;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

/// Each id connects with a queue pair of its own: rdma_cm announces QP number 0 without one,
/// which the CM may take for a connection it still holds.
struct rdma_end {
  explicit rdma_end(asio::io_context& io, const verbs::device& device)
      : pd(device), service(io.get_executor(), device) {}
  verbs::protection_domain pd;
  completion_service service;
  async_queue_pair queue_pair_for(cm::id& id) { return {service, id.create_queue_pair(service, pd)}; }
};

/// Runs `io` for up to 30 s; a bad_alloc that leaves run() is noted and the context runs on for
/// up to 30 s more (what it was doing must still end). Whether one left it.
bool ran_through_bad_alloc(asio::io_context& io) {
  try {
    io.run_for(30s);
    return false;
  } catch (const std::bad_alloc&) {
    io.run_for(30s);
    return true;
  }
}

/// Where the allocation fails, and which of the client's connects it falls in.
enum class failing_side { server, client };

struct connect_results {
  error_code first, second;
  std::size_t first_private_data = 0;  ///< how much of the server's answer the first one saw
  bool threw = false;                  ///< bad_alloc left the client's run()
  std::exception_ptr failure;
  bool finished = false;
};

/// Connects to `server` (twice when the server's allocation fails: the first is refused), on a
/// thread and context of its own, and disconnects what is established. With `failing` > 0,
/// this thread's next allocation of that size fails from the first connect on.
void connect(tcp::endpoint server, int attempts, std::size_t failing, connect_results& results) {
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::optional<rdma_end> end;
        for (int i = 0; i < attempts; ++i) {
          cm::id client(io.get_executor());
          co_await client.async_resolve(server, 2s, use_awaitable);
          if (!end) end.emplace(io, client.device());
          async_queue_pair qp = end->queue_pair_for(client);
          if (i == 0) test::fail_next_allocation_of(failing);
          auto [ec] = co_await client.async_connect({}, asio::as_tuple(use_awaitable));
          (i == 0 ? results.first : results.second) = ec;
          if (i == 0) results.first_private_data = client.peer_private_data().size();
          if (!ec) co_await client.async_disconnect(use_awaitable);
        }
      },
      [&](std::exception_ptr e) {
        results.failure = e;
        results.finished = true;
      });
  results.threw = ran_through_bad_alloc(io);
}

struct listening_server {
  asio::io_context io;
  cm::id listener{io.get_executor()};
  std::optional<rdma_end> end;
  tcp::endpoint endpoint;

  listening_server() {
    listener.bind({test::rdma_address(), 0});  // a device's address: the listener knows its device
    listener.listen();
    end.emplace(io, listener.device());
    endpoint = {test::rdma_address(), listener.local_endpoint().port()};
  }

  /// Accepts one connection and waits for the client to end it.
  asio::awaitable<void> serve_one() {
    cm::id connection = co_await listener.async_get_request(use_awaitable);
    async_queue_pair qp = end->queue_pair_for(connection);
    co_await connection.async_accept({}, use_awaitable);
    co_await connection.async_wait_disconnected(use_awaitable);
  }
};

struct outcome {
  connect_results client;
  bool server_threw = false;
  int failed = 0;  ///< allocations failed on the failing side's thread
};

/// One connection served while `side`'s event loop fails its next allocation of `size` bytes
/// in the first connect's events.
outcome serve_with_a_failing_allocation(failing_side side, std::size_t size) {
  listening_server server;
  outcome result;
  bool served = false;
  std::exception_ptr server_failure;
  asio::co_spawn(server.io, server.serve_one(), [&](std::exception_ptr e) {
    server_failure = e;
    served = true;
  });
  server.io.poll();  // the accept waits: what this thread allocates next is the event loop's
  BOOST_REQUIRE(!served);
  const int failed_before = test::failed_allocations();
  // Armed from within the context, so that nothing else on this thread (starting the client's
  // thread) can take the failure.
  if (side == failing_side::server) asio::post(server.io, [size] { test::fail_next_allocation_of(size); });

  const int attempts = side == failing_side::server ? 2 : 1;
  std::thread client_thread([&] {
    const int client_failed_before = test::failed_allocations();
    connect(server.endpoint, attempts, side == failing_side::client ? size : 0, result.client);
    if (side == failing_side::client) result.failed = test::failed_allocations() - client_failed_before;
  });
  result.server_threw = ran_through_bad_alloc(server.io);  // the listener goes on after one
  client_thread.join();
  if (side == failing_side::server) result.failed = test::failed_allocations() - failed_before;
  test::fail_next_allocation_of(0);

  BOOST_REQUIRE(result.client.finished);
  BOOST_REQUIRE(!result.client.failure);
  BOOST_REQUIRE(served);
  BOOST_TEST(!server_failure);
  return result;
}

/// The server's next allocation of `size` bytes fails while it reads the first request.
void first_request_fails_then_the_next_is_served(std::size_t size) {
  const outcome o = serve_with_a_failing_allocation(failing_side::server, size);
  BOOST_TEST(o.failed == 1);
  BOOST_TEST(o.server_threw, "the bad_alloc left run()");
  BOOST_TEST(o.client.first == asio::error::connection_refused, o.client.first.message());
  BOOST_TEST(!o.client.second, o.client.second.message());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cm_allocation_failure)

BOOST_AUTO_TEST_CASE(a_request_whose_private_data_cannot_be_copied_is_refused) {
  first_request_fails_then_the_next_is_served(cm::id::max_connect_private_data);
}

BOOST_AUTO_TEST_CASE(a_request_whose_id_cannot_be_kept_is_refused) {
  first_request_fails_then_the_next_is_served(sizeof(cm::detail::id_state));
}

// The client's connect is answered with private data (padded to 196 bytes on RoCE) that its
// event loop cannot copy: the connect still ends, without the data, and the bad_alloc leaves
// the client's run().
BOOST_AUTO_TEST_CASE(an_answer_whose_private_data_cannot_be_copied_still_ends_the_connect) {
  const outcome o = serve_with_a_failing_allocation(failing_side::client, cm::id::max_accept_private_data);
  BOOST_TEST(o.failed == 1);
  BOOST_TEST(o.client.threw, "the bad_alloc left the client's run()");
  BOOST_TEST(!o.client.first, o.client.first.message());
  BOOST_TEST(o.client.first_private_data == 0u);
  BOOST_TEST(!o.server_threw);
}

BOOST_AUTO_TEST_SUITE_END()
