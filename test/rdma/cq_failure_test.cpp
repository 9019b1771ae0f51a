// A CQ that the device fails to poll (ibv_poll_cq < 0; rxe never does, so the test makes the
// provider's poll fail) ends every request of its queue pairs with io_error, and a socket's
// reads with it: before, the failure left io_context::run as an exception, and the requests
// never completed.
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>
#include <optional>

#include <rdma/rdma_cma.h>

#include <array>
#include <thread>

#include "async_pair.hpp"
#include "connected_pair.hpp"
#include "poll_shim.hpp"

namespace asio = boost::asio;
namespace data = boost::unit_test::data;
using namespace coverbs;
using namespace std::chrono_literals;
using coverbs::test::async_pair;

namespace std {
inline std::ostream& operator<<(std::ostream& os, polling_mode m) {
  return os << coverbs::test::mode_name(m);
}
}  // namespace std

namespace {

// While it lives, every poll of `cq` fails (of every CQ of `context` where `cq` is null), or
// only the next `failures` of them; the others poll as before.
class failing_polls {
 public:
  explicit failing_polls(ibv_cq* cq, int failures = -1) : failing_polls(cq->context, cq, failures) {}
  failing_polls(ibv_context* context, ibv_cq* cq, int failures = -1) : swap_(context, &poll) {
    failures_left = failures;
    target = cq;
  }

 private:
  static int poll(ibv_cq* cq, int entries, ibv_wc* wc) {
    if ((target == nullptr || cq == target) && failures_left != 0) {
      if (failures_left > 0) --failures_left;
      return -1;
    }
    return coverbs::test::swapped_poll_cq::original(cq, entries, wc);
  }
  static inline ibv_cq* target = nullptr;
  static inline int failures_left = -1;  ///< negative: all
  coverbs::test::swapped_poll_cq swap_;
};

// Runs `io` until `done()` holds, within a bound; an exception leaving run fails the test.
template <class Predicate>
void run_until(asio::io_context& io, Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(10ms);
  io.restart();
  BOOST_REQUIRE_MESSAGE(done(), "the operations did not complete within the time limit");
}

bool is_io_error(const std::optional<error_code>& ec) {
  return ec && *ec == std::errc::io_error;
}

const auto all_modes = data::make({polling_mode::event, polling_mode::busy, polling_mode::adaptive});

}  // namespace

BOOST_AUTO_TEST_SUITE(cq_failure)

BOOST_DATA_TEST_CASE(a_failed_poll_ends_every_request_with_io_error, all_modes, mode) {
  async_pair p({.mode = mode});
  std::optional<error_code> received;
  std::optional<error_code> sent;
  async_receive(p.b, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { received = ec; });
  p.io.run_for(20ms);  // the receive is posted, and the loop waits (or spins) for it
  p.io.restart();
  BOOST_REQUIRE(!received);
  {
    const failing_polls failing(p.service.queue().native_handle());
    async_send(p.a, p.a_mr.slice(0, 16), [&](error_code ec, std::size_t) { sent = ec; });
    run_until(p.io, [&] { return received && sent; });
    BOOST_TEST(is_io_error(received), "receive: " << received->message());
    BOOST_TEST(is_io_error(sent), "send: " << sent->message());
    BOOST_TEST(p.service.outstanding() == 0u);
  }
  // The CQ stays broken, though its polls would work again: later requests fail at once,
  // and nothing waits for them.
  std::optional<error_code> later;
  async_write(p.a, p.a_mr.slice(0, 8), p.b_mr.remote(0, 8), [&](error_code ec, std::size_t) { later = ec; });
  run_until(p.io, [&] { return later.has_value(); });
  BOOST_TEST(is_io_error(later), "write: " << later->message());
  BOOST_TEST(p.service.outstanding() == 0u);
  p.io.run_for(50ms);
  BOOST_TEST(p.io.stopped());  // no wait or timer of the loop is left
}  // the queue pairs and the service go without waiting for flushes

BOOST_AUTO_TEST_CASE(a_cq_whose_poll_failed_is_not_polled_again) {
  // A busy step polls on after a failed poll, and a provider may then return entries (mlx5's
  // poll fails on one bad entry and goes on): of requests that the failure ended and freed.
  async_pair p({.mode = polling_mode::busy});
  std::optional<error_code> received;
  std::optional<error_code> sent;
  async_receive(p.b, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { received = ec; });
  std::memcpy(p.a_mem.data(), "marked message", 15);
  async_send(p.a, p.a_mr.slice(0, 16), [&](error_code ec, std::size_t) { sent = ec; });
  // Posted and, while the context does not run, not polled: the device completes them meanwhile
  // (the receive's with the message's landing, the send's with the acknowledgement after it).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::memcmp(p.b_mem.data(), "marked message", 15) != 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  BOOST_REQUIRE_MESSAGE(std::memcmp(p.b_mem.data(), "marked message", 15) == 0, "the message never landed");
  std::this_thread::sleep_for(50ms);
  {
    const failing_polls failing(p.service.queue().native_handle(), 1);  // the next poll only
    run_until(p.io, [&] { return received && sent; });
  }
  BOOST_TEST(is_io_error(received), "receive: " << received->message());
  BOOST_TEST(is_io_error(sent), "send: " << sent->message());
  BOOST_TEST(p.service.completions() == 0u, "entries were taken from the failed CQ");
  BOOST_TEST(p.service.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(a_socket_whose_cq_fails_reports_io_error_to_its_reads) {
  coverbs::test::connected_pair p(transport::rdma);
  std::optional<error_code> read;
  std::array<char, 16> in{};
  p.a.async_read_some(asio::buffer(in), [&](error_code ec, std::size_t) { read = ec; });
  p.io.run_for(20ms);
  p.io.restart();
  BOOST_REQUIRE(!read);
  // The sockets' queue pairs live in librdmacm's device contexts: every CQ of them fails.
  int devices = 0;
  ibv_context** contexts = rdma_get_devices(&devices);
  BOOST_REQUIRE(contexts != nullptr && devices == 1);
  {
    const failing_polls failing(contexts[0], nullptr);
    p.b.async_write_some(asio::buffer("hello", 5), [](error_code, std::size_t) {});
    run_until(p.io, [&] { return read.has_value(); });
    BOOST_TEST(is_io_error(read), "read: " << read->message());  // not eof: no peer ended it
  }
  rdma_free_devices(contexts);
}

BOOST_AUTO_TEST_SUITE_END()
