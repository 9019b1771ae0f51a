// One operation, every kind of completion token: the initiating functions are plain Asio.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <thread>

#include "async_pair.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using coverbs::test::async_pair;

namespace {

struct written_fixture : async_pair {
  static constexpr std::size_t size = 4096;
  written_fixture() { std::memset(a_mem.data(), 0x5a, size); }
  bool landed() const { return std::memcmp(b_mem.data(), a_mem.data(), size) == 0; }
  auto target() const { return b_mr.remote(0, size); }
  auto source() const { return a_mr.slice(0, size); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(completion_tokens, written_fixture)

BOOST_AUTO_TEST_CASE(use_awaitable) {
  run([&]() -> asio::awaitable<void> {
    const std::size_t n = co_await async_write(a, source(), target(), asio::use_awaitable);
    BOOST_TEST(n == size);
  });
  BOOST_TEST(landed());
}

BOOST_AUTO_TEST_CASE(as_tuple_with_use_awaitable) {
  run([&]() -> asio::awaitable<void> {
    auto [ec, n] = co_await async_write(a, source(), target(), asio::as_tuple(asio::use_awaitable));
    BOOST_TEST(!ec);
    BOOST_TEST(n == size);
  });
  BOOST_TEST(landed());
}

BOOST_AUTO_TEST_CASE(deferred_starts_only_when_invoked) {
  auto op = async_write(a, source(), target(), asio::deferred);
  io.run_for(std::chrono::milliseconds(50));
  BOOST_TEST(!landed());  // nothing posted yet
  std::size_t result = 0;
  std::move(op)([&](error_code ec, std::size_t n) {
    BOOST_TEST(!ec);
    result = n;
  });
  io.restart();
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST(result == size);
  BOOST_TEST(landed());
}

BOOST_AUTO_TEST_CASE(plain_callback_is_not_called_inside_the_initiating_function) {
  bool called = false;
  async_write(a, source(), target(), [&](error_code ec, std::size_t n) {
    BOOST_TEST(!ec);
    BOOST_TEST(n == size);
    called = true;
  });
  BOOST_TEST(!called);
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST(called);
  BOOST_TEST(landed());
}

BOOST_AUTO_TEST_CASE(a_handler_bound_to_another_context_keeps_it_running) {
  // As with Asio's I/O objects: until the handler is handed over, it counts as work of its own
  // executor's context, so a thread running only that context waits for it.
  asio::io_context other;
  bool ran = false, on_other = false;
  async_write(a, source(), target(), asio::bind_executor(other, [&](error_code ec, std::size_t n) {
                BOOST_TEST(!ec);
                BOOST_TEST(n == size);
                ran = true;
                on_other = other.get_executor().running_in_this_thread();
              }));
  BOOST_TEST(other.poll() == 0u);
  BOOST_TEST(!other.stopped(), "the handler's context ran out of work before the handler came");
  io.run_for(std::chrono::seconds(20));  // until the write's completion went to `other`
  BOOST_TEST(!ran);
  other.run_for(std::chrono::seconds(20));  // returns once the handler ran
  BOOST_TEST(ran);
  BOOST_TEST(on_other);
  BOOST_TEST(landed());
}

BOOST_AUTO_TEST_CASE(use_future_from_another_thread) {
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run_for(std::chrono::seconds(20)); });
  std::future<std::size_t> f = async_write(a, source(), target(), asio::use_future);
  BOOST_TEST((f.wait_for(std::chrono::seconds(20)) == std::future_status::ready));
  BOOST_TEST(f.get() == size);
  work.reset();
  io.stop();
  runner.join();
  BOOST_TEST(landed());
}

BOOST_AUTO_TEST_CASE(use_future_carries_errors_as_exceptions) {
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run_for(std::chrono::seconds(20)); });
  remote_buffer wrong = target();
  wrong.rkey ^= 0x5a5a;
  auto f = async_write(a, source(), wrong, asio::use_future);
  try {
    f.get();
    BOOST_FAIL("a write with a wrong rkey succeeded");
  } catch (const boost::system::system_error& e) {
    BOOST_TEST((e.code() == std::errc::permission_denied));
  }
  work.reset();
  io.stop();
  runner.join();
}

BOOST_AUTO_TEST_SUITE_END()
