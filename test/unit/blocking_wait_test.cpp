// blocking_wait against operations made up here, so that the order of events is fixed: which
// handler throws, and whether the operation ends before or after its cancel.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "coverbs/detail/blocking_wait.hpp"

namespace asio = boost::asio;
using coverbs::error_code;
using coverbs::detail::run_blocking;

namespace {
void throw_later(asio::io_context& io, const char* what) {
  asio::post(io, [what] { throw std::runtime_error(what); });
}

// What the next run of `io` throws; empty if it throws nothing. (A context that ran out of work
// in the call has stopped, as after any run: Asio's restart() comes first.)
std::string thrown_by_poll(asio::io_context& io) {
  try {
    io.restart();
    io.poll();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return {};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(blocking_wait)

// The operation succeeds although two handlers threw while it ran: the result is kept, and the
// exceptions leave the next runs in the order they were thrown.
BOOST_AUTO_TEST_CASE(held_exceptions_leave_in_order_after_a_success) {
  asio::io_context io;
  error_code ec;
  const int value = run_blocking<int>(io.get_executor(), ec, [&](auto handler) {
    throw_later(io, "first");
    throw_later(io, "second");
    // Deaf to its cancel, as an answer that came in the same batch of completions is.
    asio::post(io, [h = std::move(handler)]() mutable { h(error_code(), 7); });
  });
  BOOST_TEST(!ec);
  BOOST_TEST(value == 7);
  BOOST_TEST(thrown_by_poll(io) == "first");
  BOOST_TEST(thrown_by_poll(io) == "second");
  BOOST_TEST(thrown_by_poll(io).empty());
}

// The first exception cancels the operation and is rethrown by the call; the second leaves the
// next run.
BOOST_AUTO_TEST_CASE(the_first_exception_cancels_and_is_rethrown) {
  asio::io_context io;
  error_code ec;
  bool cancelled = false;
  auto call = [&] {
    run_blocking(io.get_executor(), ec, [&](auto handler) {
      using handler_type = decltype(handler);
      auto slot = asio::get_associated_cancellation_slot(handler);
      auto held = std::make_shared<std::optional<handler_type>>(std::move(handler));
      slot.assign([&cancelled, held](asio::cancellation_type) {
        cancelled = true;
        handler_type h = std::move(**held);
        held->reset();
        h(asio::error::timed_out);  // not the call's default, so that ec shows it came
      });
      throw_later(io, "first");
      throw_later(io, "second");
    });
  };
  BOOST_CHECK_EXCEPTION(call(), std::runtime_error,
                        [](const std::runtime_error& e) { return std::string(e.what()) == "first"; });
  BOOST_TEST(cancelled);
  BOOST_TEST(ec == asio::error::timed_out);
  BOOST_TEST(thrown_by_poll(io) == "second");
  BOOST_TEST(thrown_by_poll(io).empty());
}

// A handler that throws before the start has run ends the call at once; the start never runs.
BOOST_AUTO_TEST_CASE(an_exception_before_the_start_abandons_it) {
  asio::io_context io;
  throw_later(io, "before");
  error_code ec;
  bool started = false;
  BOOST_CHECK_THROW(run_blocking(io.get_executor(), ec, [&](auto) { started = true; }), std::runtime_error);
  io.poll();
  BOOST_TEST(!started);
}

// A handler destroyed uncalled ends the call with operation_aborted, as for any dropped
// operation.
BOOST_AUTO_TEST_CASE(a_dropped_handler_ends_the_call) {
  asio::io_context io;
  error_code ec;
  run_blocking(io.get_executor(), ec, [](auto) {});
  BOOST_TEST(ec == asio::error::operation_aborted);
}

// Inside a handler of the context, blocking would stop the thread the operation needs.
BOOST_AUTO_TEST_CASE(refused_on_a_thread_that_runs_the_context) {
  asio::io_context io;
  error_code ec;
  bool started = false;
  asio::post(io, [&] { run_blocking(io.get_executor(), ec, [&](auto) { started = true; }); });
  io.run();
  BOOST_TEST(ec == asio::error::would_block);
  BOOST_TEST(!started);
}

// On a thread_pool the pool's threads run the operation; the start's own exception comes back
// to the caller.
BOOST_AUTO_TEST_CASE(runs_on_a_thread_pool) {
  asio::thread_pool pool(1);
  error_code ec;
  const int value = run_blocking<int>(pool.get_executor(), ec, [&](auto handler) {
    asio::post(pool, [h = std::move(handler)]() mutable { h(error_code(), 5); });
  });
  BOOST_TEST(!ec);
  BOOST_TEST(value == 5);
  BOOST_CHECK_THROW(run_blocking(pool.get_executor(), ec, [](auto) { throw std::logic_error("start"); }),
                    std::logic_error);
  pool.join();
}

// A stopped pool runs nothing again (stop(), or join() once it ran out of work): a call whose
// start it would never run ends with operation_aborted instead of waiting for ever, on the
// pool's executor or a strand's over it.
BOOST_AUTO_TEST_CASE(a_stopped_thread_pool_ends_the_call) {
  for (const bool stop : {true, false}) {
    for (const bool strand : {false, true}) {
      asio::thread_pool pool(1);
      if (stop) pool.stop();
      pool.join();
      const asio::any_io_executor executor = strand ? asio::any_io_executor(asio::make_strand(pool))
                                                    : asio::any_io_executor(pool.get_executor());
      error_code ec;
      bool started = false;
      run_blocking(executor, ec, [&](auto) { started = true; });
      BOOST_TEST(ec == asio::error::operation_aborted, (stop ? "stopped" : "joined")
                                                           << (strand ? ", strand: " : ": ") << ec.message());
      BOOST_TEST(!started);
    }
  }
}

// The pool stops while the call waits, its start queued behind a handler that is still running.
BOOST_AUTO_TEST_CASE(a_pool_stopped_during_the_call_ends_it) {
  asio::thread_pool pool(1);
  std::promise<void> release;
  asio::post(pool, [released = release.get_future()] { released.wait(); });
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pool.stop();
    release.set_value();
  });
  error_code ec;
  bool started = false;
  run_blocking(pool.get_executor(), ec, [&](auto) { started = true; });
  stopper.join();
  pool.join();
  BOOST_TEST(ec == asio::error::operation_aborted, ec.message());
  BOOST_TEST(!started);
}

BOOST_AUTO_TEST_SUITE_END()
