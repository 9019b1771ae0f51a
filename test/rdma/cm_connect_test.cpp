// rdma_cm connections between ids of one process over rxe: private data both ways, traffic on
// the QPs rdma_cm set up, tear-down seen by both sides, refusals, and the limits.
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coverbs/coverbs.hpp"
#include "test_address.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

std::span<const std::byte> bytes(std::string_view text) {
  return std::as_bytes(std::span(text));
}

/// Runs `a` and `b` together as `a && b` does, but a failure reports the exception that came
/// first. `&&` reports its left operand's, which may be only the cancellation that the right
/// one's failure caused ("Operation canceled"), hiding the cause.
asio::awaitable<void> both(asio::awaitable<void> a, asio::awaitable<void> b) {
  const auto ex = co_await asio::this_coro::executor;
  auto [order, e0, e1] =
      co_await asio::experimental::make_parallel_group(asio::co_spawn(ex, std::move(a), asio::deferred),
                                                       asio::co_spawn(ex, std::move(b), asio::deferred))
          .async_wait(asio::experimental::wait_for_one_error(), use_awaitable);
  const std::exception_ptr first = order[0] == 0 ? e0 : e1;
  if (first) std::rethrow_exception(first);
  if (e0 || e1) std::rethrow_exception(e0 ? e0 : e1);
}

/// True when `data` starts with `text` (what the CM delivers is padded with zeros).
bool starts_with(std::span<const std::byte> data, std::string_view text) {
  return data.size() >= text.size() && std::memcmp(data.data(), text.data(), text.size()) == 0;
}

struct cm_fixture {
  asio::io_context io;
  // One PD and CQ for the device, declared before every id: a QP belongs to its id, and a PD
  // or CQ cannot be freed while a QP uses it.
  std::optional<verbs::protection_domain> pd;
  std::optional<completion_service> service;
  completion_options service_options{};
  cm::id listener{io.get_executor()};
  tcp::endpoint server;

  cm_fixture() {
    listener.bind({asio::ip::address_v4::any(), 0});
    listener.listen();
    server = {test::rdma_address(), listener.local_endpoint().port()};
  }
  void use_device(const verbs::device& dev) {
    if (!pd) {
      pd.emplace(dev);
      service.emplace(io.get_executor(), dev, service_options);
    }
  }
  /// An id with the QP it connects: rdma_cm announces QP number 0 without one, and the CM
  /// refuses a second such connection between the same devices as stale (REJ reason 10).
  struct connection {
    explicit connection(cm::id i) : id(std::move(i)) {}
    cm::id id;
    std::optional<async_queue_pair> qp;  // declared after the id: destroyed before it
  };
  void add_queue_pair(connection& c) {
    use_device(c.id.device());
    c.qp.emplace(*service, c.id.create_queue_pair(*service, *pd));
  }
  asio::awaitable<cm::id> resolved_client(tcp::endpoint to) {
    cm::id client(io.get_executor());
    co_await client.async_resolve(to, 2s, use_awaitable);
    co_return client;
  }
  /// Runs `body` on `io`, bounded; a hang fails the test instead of blocking it.
  template <class F>
  void run(F body, std::chrono::seconds limit = 30s) {
    std::exception_ptr failure;
    bool finished = false;
    asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
      failure = e;
      finished = true;
    });
    io.run_for(limit);
    io.restart();
    BOOST_REQUIRE_MESSAGE(finished, "the coroutine did not finish within the time limit");
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

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cm_connect, cm_fixture)

BOOST_AUTO_TEST_CASE(private_data_send_write_and_disconnect) {
  run([&]() -> asio::awaitable<void> {
    cm::id client = co_await resolved_client(server);
    use_device(client.device());
    std::vector<std::byte> client_mem(4096), server_mem(4096);
    verbs::memory_region client_mr(*pd, client_mem, verbs::access::local_write | verbs::access::remote_write);
    verbs::memory_region server_mr(*pd, server_mem, verbs::access::local_write);
    async_queue_pair client_qp(*service, client.create_queue_pair(*service, *pd));
    // The client's buffer travels in the request: the server can write into it at once.
    const auto descriptor = client_mr.remote(0, 1024).serialize();
    std::optional<cm::id> conn;
    std::optional<async_queue_pair> server_qp;

    auto client_side = [&]() -> asio::awaitable<void> {
      co_await client.async_connect(descriptor, use_awaitable);
      BOOST_TEST(starts_with(client.peer_private_data(), "welcome"));
      BOOST_TEST(client.peer_private_data().size() == cm::id::max_accept_private_data);  // padded
      std::string ping = "ping";
      co_await async_send(client_qp, {ping.data(), 4, 0}, use_awaitable);  // inline
    };
    auto server_side = [&]() -> asio::awaitable<void> {
      conn.emplace(co_await listener.async_get_request(use_awaitable));
      const auto request = conn->peer_private_data();
      BOOST_TEST(request.size() == cm::id::max_connect_private_data);  // padded to 56 on RoCE
      remote_buffer target;
      BOOST_REQUIRE(!remote_buffer::parse(request.first(remote_buffer::wire_size), target));
      BOOST_TEST(&conn->device() == &client.device());  // one object per device
      BOOST_TEST(conn->remote_endpoint().address() == server.address());
      server_qp.emplace(*service, conn->create_queue_pair(*service, *pd));
      const std::size_t received =
          co_await (async_receive(*server_qp, server_mr.slice(0, 64), use_awaitable) &&
                    conn->async_accept(bytes("welcome"), use_awaitable));
      BOOST_TEST(received == 4u);
      BOOST_TEST(starts_with(server_mem, "ping"));
      std::memset(server_mem.data() + 1024, 0x5a, 512);
      co_await async_write(*server_qp, server_mr.slice(1024, 512), target.sub(0, 512), use_awaitable);
    };
    co_await both(client_side(), server_side());
    BOOST_TEST(std::all_of(client_mem.begin(), client_mem.begin() + 512,
                           [](std::byte b) { return b == std::byte{0x5a}; }));

    // The passive side's wait answers the peer and errors its QP: its posted receive flushes.
    auto [ec, n] =
        co_await (client.async_disconnect(use_awaitable) && conn->async_wait_disconnected(use_awaitable) &&
                  async_receive(*server_qp, server_mr.slice(0, 64), asio::as_tuple(use_awaitable)));
    BOOST_TEST((ec == wc_errc::flushed), ec.message());
    BOOST_TEST(server_qp->native().state() == IBV_QPS_ERR);
    co_await client.async_wait_disconnected(use_awaitable);  // already happened: completes at once
  });
}

BOOST_AUTO_TEST_CASE(a_late_flush_leaves_the_connection_free_to_disconnect) {
  // The QP discards what a late flush left (through RESET) and goes back to ERROR: rdma_cm's
  // disconnect moves it to ERROR, which RESET refuses, and would then send the peer nothing.
  service_options.flush_timeout = 0s;
  run([&]() -> asio::awaitable<void> {
    cm::id client = co_await resolved_client(server);
    use_device(client.device());
    std::vector<std::byte> mem(4096);
    verbs::memory_region mr(*pd, mem, verbs::access::local_write);
    std::optional<async_queue_pair> client_qp(std::in_place, *service,
                                              client.create_queue_pair(*service, *pd));
    std::optional<cm::id> conn;
    std::optional<async_queue_pair> server_qp;
    auto client_side = [&]() -> asio::awaitable<void> {
      co_await client.async_connect(bytes("hi"), use_awaitable);
    };
    auto server_side = [&]() -> asio::awaitable<void> {
      conn.emplace(co_await listener.async_get_request(use_awaitable));
      server_qp.emplace(*service, conn->create_queue_pair(*service, *pd));
      co_await conn->async_accept(bytes("ok"), use_awaitable);
    };
    co_await both(client_side(), server_side());
    int discarded = 0;  // aborted, or flushed where the device flushed before it discarded
    for (int i = 0; i < 4; ++i) {
      async_receive(*client_qp, mr.slice(64 * i, 64), [&](error_code ec, std::size_t) {
        discarded += ec == asio::error::operation_aborted || ec == make_error_code(wc_errc::flushed);
      });
    }
    client_qp.reset();  // no flush waited for: its receives are discarded
    BOOST_TEST(service->outstanding() == 0u);
    co_await (client.async_disconnect(use_awaitable) && conn->async_wait_disconnected(use_awaitable));
    BOOST_TEST(discarded == 4);
  });
}

BOOST_AUTO_TEST_CASE(connect_without_listener_is_refused) {
  tcp::endpoint nobody;
  {
    cm::id probe(io.get_executor());  // a port that was free a moment ago
    probe.bind({asio::ip::address_v4::any(), 0});
    nobody = {server.address(), probe.local_endpoint().port()};
  }
  run([&]() -> asio::awaitable<void> {
    cm::id client = co_await resolved_client(nobody);
    auto [ec] = co_await client.async_connect({}, asio::as_tuple(use_awaitable));
    // The remote CM answers a REQ for a service id nobody listens on with a REJ.
    BOOST_TEST((ec == asio::error::connection_refused), ec.message());
  });
}

BOOST_AUTO_TEST_CASE(reject_carries_private_data) {
  run([&]() -> asio::awaitable<void> {
    cm::id client = co_await resolved_client(server);
    auto refuse = [&]() -> asio::awaitable<void> {
      cm::id request = co_await listener.async_get_request(use_awaitable);
      BOOST_TEST(starts_with(request.peer_private_data(), "may I?"));
      request.reject(bytes("go away"));
    };
    error_code ec;
    auto ask = [&]() -> asio::awaitable<void> {
      std::tie(ec) = co_await client.async_connect(bytes("may I?"), asio::as_tuple(use_awaitable));
    };
    co_await both(ask(), refuse());
    BOOST_TEST((ec == asio::error::connection_refused), ec.message());
    BOOST_TEST(starts_with(client.peer_private_data(), "go away"));
    BOOST_TEST(client.peer_private_data().size() == cm::id::max_reject_private_data);
  });
}

// Two requesters without a QP both announce QP number 0: the listener's CM takes the second
// request for a stale copy of the first, answers it with a REJ (reason 10) itself and
// disconnects the first. That is not the peer refusing (an automatic socket would fall back to
// TCP on a refusal): it has its own code. The server's side has a QP: its REP announcing QP 0
// as well would be stale to the requester's CM, the same kernel's here.
BOOST_AUTO_TEST_CASE(stale_connection_is_not_a_refusal) {
  std::unique_ptr<connection> accepted;
  run([&]() -> asio::awaitable<void> {
    cm::id first = co_await resolved_client(server);
    cm::id second = co_await resolved_client(server);
    auto serve = [&]() -> asio::awaitable<void> {
      accepted = std::make_unique<connection>(co_await listener.async_get_request(use_awaitable));
      add_queue_pair(*accepted);
      co_await accepted->id.async_accept({}, use_awaitable);
    };
    co_await both(first.async_connect({}, use_awaitable), serve());
    auto [ec] = co_await second.async_connect({}, asio::as_tuple(use_awaitable));
    BOOST_TEST((ec == make_error_code(errc::stale_connection)), ec.message());
    BOOST_TEST((ec == std::errc::resource_unavailable_try_again));
    BOOST_TEST((ec != asio::error::connection_refused));
    co_await first.async_wait_disconnected(use_awaitable);  // within run()'s time limit
  });
}

BOOST_AUTO_TEST_CASE(concurrent_connections_through_one_listener) {
  constexpr int clients = 4;
  std::vector<std::unique_ptr<connection>> accepted;
  int established = 0;
  run([&]() -> asio::awaitable<void> {
    auto serve = [&]() -> asio::awaitable<void> {
      for (int i = 0; i < clients; ++i) {
        auto& c = *accepted.emplace_back(
            std::make_unique<connection>(co_await listener.async_get_request(use_awaitable)));
        add_queue_pair(c);
        // Answer each with its own greeting, without waiting for the previous accept.
        const std::string who(reinterpret_cast<const char*>(c.id.peer_private_data().data()), 8);
        asio::co_spawn(io, c.id.async_accept(bytes("hello " + who), use_awaitable), asio::detached);
      }
    };
    auto connect = [&](int i) -> asio::awaitable<void> {
      connection c(co_await resolved_client(server));
      add_queue_pair(c);
      const std::string me = "client-" + std::to_string(i);
      co_await c.id.async_connect(bytes(me), use_awaitable);
      BOOST_TEST(starts_with(c.id.peer_private_data(), "hello " + me));
      ++established;
      co_await c.id.async_disconnect(use_awaitable);
    };
    co_await (serve() && connect(0) && connect(1) && connect(2) && connect(3));
  });
  BOOST_TEST(established == clients);
}

BOOST_AUTO_TEST_CASE(private_data_limits) {
  run([&]() -> asio::awaitable<void> {
    connection client(co_await resolved_client(server));
    add_queue_pair(client);
    const std::vector<std::byte> max_request(cm::id::max_connect_private_data, std::byte{1});
    const std::vector<std::byte> max_reply(cm::id::max_accept_private_data, std::byte{2});
    const std::vector<std::byte> too_long(cm::id::max_accept_private_data + 1, std::byte{3});

    auto [ec] = co_await client.id.async_connect(
        std::span(too_long).first(cm::id::max_connect_private_data + 1), asio::as_tuple(use_awaitable));
    BOOST_TEST((ec == asio::error::message_size), ec.message());

    auto serve = [&]() -> asio::awaitable<void> {
      connection request(co_await listener.async_get_request(use_awaitable));
      add_queue_pair(request);
      BOOST_TEST((std::ranges::equal(request.id.peer_private_data(), max_request)));
      error_code reject_ec;
      request.id.reject(std::span(too_long).first(cm::id::max_reject_private_data + 1), reject_ec);
      BOOST_TEST((reject_ec == asio::error::message_size));
      auto [accept_ec] = co_await request.id.async_accept(too_long, asio::as_tuple(use_awaitable));
      BOOST_TEST((accept_ec == asio::error::message_size));
      co_await request.id.async_accept(max_reply, use_awaitable);  // nothing was sent: still pending
      co_await request.id.async_wait_disconnected(use_awaitable);
    };
    auto connect = [&]() -> asio::awaitable<void> {
      co_await client.id.async_connect(max_request, use_awaitable);
      BOOST_TEST((std::ranges::equal(client.id.peer_private_data(), max_reply)));
      co_await client.id.async_disconnect(use_awaitable);
    };
    co_await both(serve(), connect());
  });
}

BOOST_AUTO_TEST_CASE(cancelled_wait_lets_the_context_go_idle) {
  run([&]() -> asio::awaitable<void> {
    asio::steady_timer timer(io, 100ms);
    auto result = co_await (listener.async_get_request(use_awaitable) || timer.async_wait(use_awaitable));
    BOOST_TEST(result.index() == 1u);  // the timer won; the request wait was withdrawn
  });
  const auto start = std::chrono::steady_clock::now();
  io.run_for(5s);  // nothing waits for CM events now: returns at once
  BOOST_TEST((std::chrono::steady_clock::now() - start < 1s));
}

BOOST_AUTO_TEST_CASE(a_disconnect_that_failed_leaves_the_next_one_to_say_so) {
  // An id that never connected: disconnect() fails (EINVAL) and sends nothing, so a later
  // async_disconnect must report not_connected at once, not wait for an event that never comes.
  cm::id lone(io.get_executor());
  lone.disconnect();
  std::optional<error_code> result;
  lone.async_disconnect([&](error_code ec) { result = ec; });
  const auto start = std::chrono::steady_clock::now();
  while (!result && std::chrono::steady_clock::now() - start < 10s) io.run_one_for(10ms);
  BOOST_REQUIRE(result.has_value());
  BOOST_TEST((*result == asio::error::not_connected), result->message());
}

BOOST_AUTO_TEST_CASE(destroying_an_id_aborts_its_waits_later) {
  std::optional<cm::id> doomed(io.get_executor());
  doomed->bind({asio::ip::address_v4::any(), 0});
  doomed->listen();
  error_code result = asio::error::would_block;
  doomed->async_get_request([&](error_code ec, cm::id) { result = ec; });
  doomed.reset();
  BOOST_TEST((result == asio::error::would_block));  // posted, never run inside the destructor
  io.run_for(5s);
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
}

BOOST_AUTO_TEST_CASE(destroying_an_id_aborts_an_operation_whose_event_is_on_its_way) {
  // The address is resolved (its event read, the wait complete) and the next step handed to
  // the handler's executor, which has not run it yet when the id goes: that step must not
  // touch the id (it would resolve the route of a freed rdma_cm_id).
  asio::io_context other;
  std::optional<cm::id> doomed(io.get_executor());
  error_code result = asio::error::would_block;
  doomed->async_resolve(server, 2s, asio::bind_executor(other, [&](error_code ec) { result = ec; }));
  io.run_for(2s);  // resolving the device's own address takes milliseconds, even in the VM
  BOOST_TEST((result == asio::error::would_block));
  doomed.reset();
  other.restart();
  other.run_for(5s);
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
}

BOOST_AUTO_TEST_CASE(cancellation_slot_withdraws_a_pending_request) {
  asio::cancellation_signal signal;
  error_code result = asio::error::would_block;
  listener.async_get_request(asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, cm::id peer) {
    result = ec;
    BOOST_TEST(!peer.is_open());
  }));
  io.run_for(20ms);
  signal.emit(asio::cancellation_type::terminal);
  BOOST_TEST((result == asio::error::would_block));
  io.run_for(5s);
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
}

BOOST_AUTO_TEST_CASE(resolving_loopback_fails_on_rxe) {
  run([&]() -> asio::awaitable<void> {
    cm::id client(io.get_executor());
    auto [ec] = co_await client.async_resolve({asio::ip::make_address("127.0.0.1"), server.port()}, 2s,
                                              asio::as_tuple(use_awaitable));
    // rxe has no GID for loopback addresses: ADDR_ERROR with -ENODEV.
    BOOST_TEST((ec == asio::error::no_such_device), ec.message());
  });
}

BOOST_AUTO_TEST_SUITE_END()
