// coverbs::socket and coverbs::acceptor over TCP, through a real listen and connect.
#include <boost/test/unit_test.hpp>
#include <functional>
#include <optional>
#include <vector>

#include "accept_cancellation_tests.hpp"
#include "accept_executor_tests.hpp"
#include "allocation_tests.hpp"
#include "blocking_tests.hpp"
#include "connect_lifetime_tests.hpp"
#include "connected_pair.hpp"
#include "context_shutdown_tests.hpp"
#include "default_token_tests.hpp"
#include "echo_program.hpp"
#include "readiness_tests.hpp"
#include "socket_tests.hpp"
#include "tls_tests.hpp"
#include "unconnected_tests.hpp"
#include "websocket_tests.hpp"

using namespace coverbs;

BOOST_AUTO_TEST_SUITE(tcp_socket)

BOOST_AUTO_TEST_CASE(bulk) { test::socket_suite_bulk(transport::tcp, 16 << 20); }
BOOST_AUTO_TEST_CASE(lines_and_eof) { test::socket_suite_lines(transport::tcp); }
BOOST_AUTO_TEST_CASE(close) { test::socket_suite_close(transport::tcp); }
BOOST_AUTO_TEST_CASE(lazy_operations) {
  test::socket_suite_lazy(transport::tcp);
}
BOOST_AUTO_TEST_CASE(small_writes) {
  test::socket_suite_small_writes(transport::tcp);
}
BOOST_AUTO_TEST_CASE(cancelled_read) { test::socket_suite_cancelled_read(transport::tcp); }
BOOST_AUTO_TEST_CASE(cancelled_write) {
  test::socket_suite_cancelled_write(transport::tcp, 32 << 20);
}
BOOST_AUTO_TEST_CASE(cancelled_registered_write) {
  test::socket_suite_cancelled_registered_write(transport::tcp, 32 << 20);
}
BOOST_AUTO_TEST_CASE(registered_writes) {
  test::socket_suite_registered_writes(transport::tcp, 32 << 20);
}
BOOST_AUTO_TEST_CASE(registered_messages) {
  test::socket_suite_registered_messages(transport::tcp, false);
}
BOOST_AUTO_TEST_CASE(zero_copy_messages) {
  test::socket_suite_registered_messages(transport::tcp, true);
}
BOOST_AUTO_TEST_CASE(ported_asio_echo) { test::ported_echo(transport::tcp); }
BOOST_AUTO_TEST_CASE(the_echo_program_is_plain_asio) {
  // The same source the coverbs tests instantiate, here with Asio's own TCP types.
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::acceptor server(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::co_spawn(io, echo::server(server, 1), asio::detached);
  asio::ip::tcp::socket client(io);
  std::string reply;
  asio::co_spawn(io, echo::client(client, server.local_endpoint(), {"plain"}), [&](std::exception_ptr e, std::string r) {
    if (e) std::rethrow_exception(e);
    reply = std::move(r);
  });
  io.run_for(std::chrono::seconds(10));
  BOOST_TEST(reply == "plain\n");
}

BOOST_AUTO_TEST_CASE(socket_options) {
  test::socket_options_as_asio(transport::tcp);
}
BOOST_AUTO_TEST_CASE(available_bytes) {
  test::available_bytes(transport::tcp);
}
BOOST_AUTO_TEST_CASE(blocking_calls) {
  test::blocking_calls(transport::tcp);
}
BOOST_AUTO_TEST_CASE(blocking_calls_on_a_thread_pool) {
  test::blocking_calls_on_a_thread_pool(transport::tcp);
}
BOOST_AUTO_TEST_CASE(blocking_calls_meet_throwing_handlers) {
  test::blocking_calls_meet_throwing_handlers(transport::tcp);
}
BOOST_AUTO_TEST_CASE(blocking_server) {
  test::blocking_server(transport::tcp);
}
BOOST_AUTO_TEST_CASE(accept_onto_executor) {
  test::accept_onto_executor(transport::tcp);
}
BOOST_AUTO_TEST_CASE(accepted_connection_outlives_the_acceptors_context) {
  test::accepted_connection_outlives_the_acceptors_context(transport::tcp);
}
BOOST_AUTO_TEST_CASE(default_token_types) {
  test::default_token_types(transport::tcp);
}
BOOST_AUTO_TEST_CASE(asio_names_and_overloads) {
  test::asio_names_and_overloads(transport::tcp);
}
BOOST_AUTO_TEST_CASE(acceptor_set_up_step_by_step) {
  test::acceptor_set_up_step_by_step(transport::tcp);
}
BOOST_AUTO_TEST_CASE(tls_over_the_socket) {
  test::tls_echo(transport::tcp);
}
BOOST_AUTO_TEST_CASE(tls_wrong_certificate_fails) {
  test::tls_wrong_certificate_fails(transport::tcp);
}
BOOST_AUTO_TEST_CASE(websocket_over_the_socket) {
  test::websocket_echo(transport::tcp);
}
BOOST_AUTO_TEST_CASE(websocket_idle_timeout) {
  test::websocket_idle_timeout(transport::tcp);
}
BOOST_AUTO_TEST_CASE(connection_refused) { test::refused(transport::tcp); }
BOOST_AUTO_TEST_CASE(connect_to_first_that_accepts) {
  test::connect_to_first_that_accepts(transport::tcp);
}
BOOST_AUTO_TEST_CASE(bound_before_connecting) {
  test::bound_before_connecting(transport::tcp);
}
BOOST_AUTO_TEST_CASE(unconnected_operations) {
  test::unconnected_operations(transport::tcp);
}
BOOST_AUTO_TEST_CASE(accept_cancellation) {
  test::accept_cancellation(transport::tcp);
}
BOOST_AUTO_TEST_CASE(options_before_connecting) {
  test::options_before_connecting(transport::tcp);
}
BOOST_AUTO_TEST_CASE(waits) {
  test::waits_as_asio(transport::tcp);
}
BOOST_AUTO_TEST_CASE(wait_for_greeting) {
  test::wait_for_greeting(transport::tcp);
}
BOOST_AUTO_TEST_CASE(full_pipe_then_reactor_style_reads) {
  test::full_pipe_then_reactor_style_reads(transport::tcp);
}
BOOST_AUTO_TEST_CASE(non_blocking) {
  test::non_blocking_as_asio(transport::tcp);
}
BOOST_AUTO_TEST_CASE(message_flags) {
  test::message_flags_as_asio(transport::tcp);
}
BOOST_AUTO_TEST_CASE(connect_cancelled_by_timer) { test::connect_cancelled_by_timer(transport::tcp); }
BOOST_AUTO_TEST_CASE(connect_outlived_or_moved) {
  test::connect_outlived_or_moved(transport::tcp);
}
BOOST_AUTO_TEST_CASE(connect_cancelled_or_taken_over) {
  test::connect_cancelled_or_taken_over(transport::tcp);
}
BOOST_AUTO_TEST_CASE(destroyed_context_frees_pending_coroutines) {
  test::destroyed_context_frees_pending_coroutines(transport::tcp);
}
BOOST_AUTO_TEST_CASE(steady_state_operations_allocate_nothing) {
  test::steady_state_operations_allocate_nothing(transport::tcp);
}

BOOST_AUTO_TEST_CASE(close_at_any_turn_of_a_connect_leaves_the_socket_closed) {
  // close() after n turns of the context's queue, for each n from 0 until the connect is done:
  // before, the connect ends aborted; after, it ended connected. Either way the socket stays
  // closed. (Not reached here: over TCP the connect's last step and the attach run in one
  // turn; over RDMA the ESTABLISHED event's completion is posted, and a close() in the turn
  // before it runs used to leave the connection attached: socket::connect_done drops it.)
  namespace asio = boost::asio;
  asio::io_context io;
  const coverbs::socket_options options{.kind = transport::tcp};
  coverbs::acceptor listener(io, asio::ip::tcp::endpoint(test::test_address(), 0), options);
  std::vector<coverbs::socket> served;
  test::accept_all(listener, served);
  int aborted = 0, completed_first = 0;
  for (int turns = 0; turns < 60 && completed_first < 5; ++turns) {
    BOOST_TEST_CONTEXT("close() after " << turns << " turns") {
      coverbs::socket s(io, options);
      std::optional<error_code> result;
      bool closed = false, result_after_close = false;
      s.async_connect(listener.local_endpoint(), [&](error_code ec) {
        result = ec;
        result_after_close = closed;
      });
      std::function<void(int)> turn = [&](int left) {
        if (left > 0) return asio::post(io, [&turn, left] { turn(left - 1); });
        s.close();
        closed = true;
      };
      turn(turns);
      io.restart();
      while (!(result && closed) && io.run_one_for(std::chrono::seconds(10)) > 0) {
      }
      BOOST_REQUIRE(result.has_value());
      BOOST_REQUIRE(closed);
      BOOST_TEST(!s.is_open());
      if (result_after_close) {
        BOOST_TEST((*result == asio::error::operation_aborted), result->message());
        ++aborted;
      } else {
        BOOST_TEST(!*result, result->message());
        ++completed_first;
      }
    }
  }
  BOOST_TEST(aborted > 0);
  BOOST_TEST(completed_first > 0);  // the turns reached past the whole connect
  listener.close();
  for (auto& s : served) s.close();
  io.restart();
  io.run_for(std::chrono::seconds(1));
}

// Only meaningful without a device: where one is, the run reports the test as skipped.
boost::test_tools::assertion_result no_rdma_device(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result none = verbs::device::names().empty();
  if (!none) none.message() << "this machine has an RDMA device";
  return none;
}

// On a machine without an RDMA device, the default transport must quietly be TCP.
BOOST_AUTO_TEST_CASE(automatic_transport_without_rdma_is_tcp,
                     *boost::unit_test::precondition(no_rdma_device)) {
  test::connected_pair p(transport::tcp);
  coverbs::socket s(p.io);  // default options: automatic
  bool connected = false;
  s.async_connect(p.listener->local_endpoint(), [&](error_code ec) {
    connected = !ec;
    p.io.stop();
  });
  p.io.restart();
  p.io.run_for(std::chrono::seconds(10));
  BOOST_TEST(connected);
  BOOST_TEST((s.transport_in_use() == transport::tcp));
}

BOOST_AUTO_TEST_SUITE_END()
