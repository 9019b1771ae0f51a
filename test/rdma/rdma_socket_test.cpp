// coverbs::socket and coverbs::acceptor over RDMA (rdma_cm), through a real listen and
// connect in the Soft-RoCE VM: the same bodies as tcp_socket_test.
#include <boost/test/unit_test.hpp>

#include "accept_cancellation_tests.hpp"
#include "accept_executor_tests.hpp"
#include "allocation_tests.hpp"
#include "blocking_tests.hpp"
#include "connect_lifetime_tests.hpp"
#include "context_shutdown_tests.hpp"
#include "default_token_tests.hpp"
#include "echo_program.hpp"
#include "readiness_tests.hpp"
#include "socket_tests.hpp"
#include "stalled_handshake_tests.hpp"
#include "tls_tests.hpp"
#include "unconnected_tests.hpp"
#include "websocket_tests.hpp"

#include <array>
#include <boost/asio/read.hpp>
#include <optional>

#include "stream_tests.hpp"
#include "test_address.hpp"

using namespace coverbs;

BOOST_AUTO_TEST_SUITE(rdma_socket)

BOOST_AUTO_TEST_CASE(bulk) { test::socket_suite_bulk(transport::rdma, 4 << 20); }
BOOST_AUTO_TEST_CASE(lines_and_eof) { test::socket_suite_lines(transport::rdma); }
BOOST_AUTO_TEST_CASE(close) { test::socket_suite_close(transport::rdma); }
BOOST_AUTO_TEST_CASE(lazy_operations) {
  test::socket_suite_lazy(transport::rdma);
}
BOOST_AUTO_TEST_CASE(small_writes) {
  test::socket_suite_small_writes(transport::rdma);
}
BOOST_AUTO_TEST_CASE(cancelled_read) { test::socket_suite_cancelled_read(transport::rdma); }
BOOST_AUTO_TEST_CASE(cancelled_write) {
  test::socket_suite_cancelled_write(transport::rdma, 8 << 20);
}
BOOST_AUTO_TEST_CASE(cancelled_registered_write) {
  test::socket_suite_cancelled_registered_write(transport::rdma, 8 << 20);
}
BOOST_AUTO_TEST_CASE(registered_writes) {
  test::socket_suite_registered_writes(transport::rdma, 4 << 20);
}
BOOST_AUTO_TEST_CASE(registered_messages) {
  test::socket_suite_registered_messages(transport::rdma, false);
}
BOOST_AUTO_TEST_CASE(zero_copy_messages) {
  test::socket_suite_registered_messages(transport::rdma, true);
}
BOOST_AUTO_TEST_CASE(ported_asio_echo) { test::ported_echo(transport::rdma); }
BOOST_AUTO_TEST_CASE(socket_options) {
  test::socket_options_as_asio(transport::rdma);
}
BOOST_AUTO_TEST_CASE(available_bytes) {
  test::available_bytes(transport::rdma);
}
BOOST_AUTO_TEST_CASE(stalled_handshake_does_not_hold_an_accept_onto_a_strand) {
  test::stalled_handshake_does_not_hold_an_accept(test::accept_onto::strand);
}
BOOST_AUTO_TEST_CASE(stalled_handshake_does_not_hold_an_accept_onto_another_context) {
  test::stalled_handshake_does_not_hold_an_accept(test::accept_onto::other_context);
}
BOOST_AUTO_TEST_CASE(closing_the_acceptor_aborts_a_stalled_handshake) {
  for (const auto where :
       {test::accept_onto::own_executor, test::accept_onto::strand, test::accept_onto::other_context}) {
    BOOST_TEST_CONTEXT("accept onto " << static_cast<int>(where)) {
      test::ending_the_accept_gives_up_a_stalled_handshake(where, test::accept_ended_by::close);
    }
  }
}
BOOST_AUTO_TEST_CASE(a_stalled_handshake_for_the_next_accept_is_given_up_on) {
  test::ending_the_accept_gives_up_a_stalled_handshake(test::accept_onto::own_executor,
                                                       test::accept_ended_by::cancel);
}
BOOST_AUTO_TEST_CASE(closing_the_acceptor_with_an_accepted_connection_on_its_way_ends_the_accept) {
  test::closing_the_acceptor_with_an_accepted_connection_on_its_way_ends_the_accept();
}
BOOST_AUTO_TEST_CASE(client_asking_for_too_large_a_pool_is_refused) {
  test::client_asking_for_too_large_a_pool_is_refused();
}
BOOST_AUTO_TEST_CASE(blocking_calls) {
  test::blocking_calls(transport::rdma);
}
BOOST_AUTO_TEST_CASE(blocking_calls_on_a_thread_pool) {
  test::blocking_calls_on_a_thread_pool(transport::rdma);
}
BOOST_AUTO_TEST_CASE(blocking_calls_meet_throwing_handlers) {
  test::blocking_calls_meet_throwing_handlers(transport::rdma);
}
BOOST_AUTO_TEST_CASE(blocking_server) {
  test::blocking_server(transport::rdma);
}
BOOST_AUTO_TEST_CASE(accept_onto_executor) {
  test::accept_onto_executor(transport::rdma);
}
BOOST_AUTO_TEST_CASE(accepted_connection_outlives_the_acceptors_context) {
  test::accepted_connection_outlives_the_acceptors_context(transport::rdma);
}
BOOST_AUTO_TEST_CASE(default_token_types) {
  test::default_token_types(transport::rdma);
}
BOOST_AUTO_TEST_CASE(asio_names_and_overloads) {
  test::asio_names_and_overloads(transport::rdma);
}
BOOST_AUTO_TEST_CASE(acceptor_set_up_step_by_step) {
  test::acceptor_set_up_step_by_step(transport::rdma);
}
BOOST_AUTO_TEST_CASE(tls_over_the_socket) {
  test::tls_echo(transport::rdma);
}
BOOST_AUTO_TEST_CASE(tls_wrong_certificate_fails) {
  test::tls_wrong_certificate_fails(transport::rdma);
}
BOOST_AUTO_TEST_CASE(websocket_over_the_socket) {
  test::websocket_echo(transport::rdma);
}
BOOST_AUTO_TEST_CASE(websocket_idle_timeout) {
  test::websocket_idle_timeout(transport::rdma);
}
BOOST_AUTO_TEST_CASE(connection_refused) { test::refused(transport::rdma); }
BOOST_AUTO_TEST_CASE(connect_to_first_that_accepts) {
  test::connect_to_first_that_accepts(transport::rdma);
}
BOOST_AUTO_TEST_CASE(bound_before_connecting) {
  test::bound_before_connecting(transport::rdma);
}
BOOST_AUTO_TEST_CASE(unconnected_operations) {
  test::unconnected_operations(transport::rdma);
}
BOOST_AUTO_TEST_CASE(accept_cancellation) {
  test::accept_cancellation(transport::rdma);
}
BOOST_AUTO_TEST_CASE(options_before_connecting) {
  test::options_before_connecting(transport::rdma);
}
BOOST_AUTO_TEST_CASE(waits) {
  test::waits_as_asio(transport::rdma);
}
BOOST_AUTO_TEST_CASE(wait_for_greeting) {
  test::wait_for_greeting(transport::rdma);
}
BOOST_AUTO_TEST_CASE(full_pipe_then_reactor_style_reads) {
  test::full_pipe_then_reactor_style_reads(transport::rdma);
}
BOOST_AUTO_TEST_CASE(non_blocking) {
  test::non_blocking_as_asio(transport::rdma);
}
BOOST_AUTO_TEST_CASE(message_flags) {
  test::message_flags_as_asio(transport::rdma);
}
BOOST_AUTO_TEST_CASE(connect_cancelled_by_timer) { test::connect_cancelled_by_timer(transport::rdma); }
BOOST_AUTO_TEST_CASE(connect_outlived_or_moved) {
  test::connect_outlived_or_moved(transport::rdma);
}
BOOST_AUTO_TEST_CASE(connect_cancelled_or_taken_over) {
  test::connect_cancelled_or_taken_over(transport::rdma);
}
BOOST_AUTO_TEST_CASE(destroyed_context_frees_pending_coroutines) {
  test::destroyed_context_frees_pending_coroutines(transport::rdma);
}
BOOST_AUTO_TEST_CASE(steady_state_operations_allocate_nothing) {
  test::steady_state_operations_allocate_nothing(transport::rdma);
}

BOOST_AUTO_TEST_CASE(one_automatic_acceptor_serves_rdma_and_tcp_clients) {
  namespace asio = boost::asio;
  asio::io_context io;
  acceptor server(io, asio::ip::tcp::endpoint(test::test_address(), 0));
  BOOST_REQUIRE(server.accepts_rdma());
  BOOST_REQUIRE(server.accepts_tcp());
  asio::co_spawn(io, echo::server(server, 2), asio::detached);
  coverbs::socket rdma_client(io), tcp_client(io, {.kind = transport::tcp});
  int finished = 0;
  std::string r1, r2;
  auto done = [&](std::string& out) {
    return [&](std::exception_ptr e, std::string r) {
      if (e) std::rethrow_exception(e);
      out = std::move(r);
      if (++finished == 2) io.stop();
    };
  };
  asio::co_spawn(io, echo::client(rdma_client, server.local_endpoint(), {"over rdma"}), done(r1));
  asio::co_spawn(io, echo::client(tcp_client, server.local_endpoint(), {"over tcp"}), done(r2));
  io.run_for(std::chrono::seconds(60));
  BOOST_REQUIRE(finished == 2);
  BOOST_TEST(r1 == "over rdma\n");
  BOOST_TEST(r2 == "over tcp\n");
  BOOST_TEST((rdma_client.transport_in_use() == transport::rdma));  // automatic picked RDMA
  BOOST_TEST((tcp_client.transport_in_use() == transport::tcp));
}

// A receive pool larger than a completion queue of the default depth (4096, which rxe rounds up
// to 8191) holds: when the connection ends, every receive still posted completes at once
// (flushed), and the CQ must hold them all; one that overran lost completions, and the close
// waited for them.
BOOST_AUTO_TEST_CASE(pool_larger_than_the_default_completion_queue) {
  namespace asio = boost::asio;
  asio::io_context io;
  const coverbs::socket_options options{.kind = transport::rdma, .receive_buffers = 10000, .buffer_size = 256,
                                        // a close that waits for lost completions outlasts the test
                                        .close_timeout = std::chrono::seconds(120)};
  acceptor server(io, asio::ip::tcp::endpoint(test::test_address(), 0), options);
  coverbs::socket client(io, options);
  std::optional<coverbs::socket> accepted;
  server.async_accept([&](error_code ec, coverbs::socket s) {
    BOOST_TEST(!ec, ec.message());
    accepted.emplace(std::move(s));
  });
  std::optional<error_code> connected;
  client.async_connect(server.local_endpoint(), [&](error_code ec) { connected = ec; });
  test::run_until(
      io, [&] { return connected.has_value() && accepted.has_value(); }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE((connected == error_code()));
  BOOST_TEST_REQUIRE(accepted.has_value());
  std::array<char, 5> got{};
  std::optional<error_code> read, end;
  asio::async_write(client, asio::buffer("hello", 5), [](error_code, std::size_t) {});
  asio::async_read(*accepted, asio::buffer(got), [&](error_code ec, std::size_t) { read = ec; });
  test::run_until(io, [&] { return read.has_value(); });
  BOOST_TEST((read == error_code()));
  BOOST_TEST(std::string(got.data(), got.size()) == "hello");
  accepted->async_read_some(asio::buffer(got), [&](error_code ec, std::size_t) { end = ec; });
  client.close();
  test::run_until(
      io, [&] { return end.has_value(); }, std::chrono::seconds(60));
  BOOST_TEST((end == asio::error::eof), end.value_or(asio::error::would_block).message());
  accepted->close();
  server.close();
  // Everything the connections posted completes: the context runs out of work.
  io.restart();
  const auto started = std::chrono::steady_clock::now();
  io.run_for(std::chrono::seconds(60));
  BOOST_TEST(io.stopped());
  BOOST_TEST((std::chrono::steady_clock::now() - started < std::chrono::seconds(30)));
}

BOOST_AUTO_TEST_SUITE_END()
