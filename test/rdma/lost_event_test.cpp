// A completion whose channel event never comes (Soft-RoCE in Linux 6.1 loses some) still ends
// its wait: the lost-event check polls a wait that stood a whole period.
#include <poll.h>

#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <memory>

#include "async_pair.hpp"
#include "coverbs/detail/completion_engine.hpp"

namespace asio = boost::asio;
namespace data = boost::unit_test::data;
using namespace coverbs;
using namespace std::chrono_literals;
using coverbs::test::async_pair;
using clock_type = std::chrono::steady_clock;

namespace std {
inline std::ostream& operator<<(std::ostream& os, polling_mode m) {
  return os << coverbs::test::mode_name(m);
}
}  // namespace std

namespace {

// Takes the CQ's next event from its channel before the service can: as if it were never raised.
void steal_event_of(completion_service& service) {
  verbs::completion_channel& channel = *service.engine()->channel;
  pollfd readable{.fd = channel.fd(), .events = POLLIN, .revents = 0};
  BOOST_REQUIRE_MESSAGE(::poll(&readable, 1, 5000) == 1, "the completion raised no event at all");
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  BOOST_REQUIRE(ibv_get_cq_event(channel.native_handle(), &cq, &context) == 0);
  service.queue().acknowledge(1);
}

const auto sleeping_modes = data::make({polling_mode::event, polling_mode::adaptive});

// A receive on `b` that the test lets wait in the channel, then a send from `a` whose event
// the test steals.
struct lost_exchange {
  async_pair& p;
  bool received = false;
  bool sent = false;

  explicit lost_exchange(async_pair& pair) : p(pair) {
    const std::size_t arms = p.service.arms();
    async_receive(p.b, p.b_mr.slice(0, 64), [this](error_code ec, std::size_t n) {
      BOOST_TEST(!ec);
      BOOST_TEST(n == 16u);
      received = true;
    });
    // Adaptive mode spins first: the wait must stand (the CQ armed) before the send.
    const auto deadline = clock_type::now() + 10s;
    while (p.service.arms() == arms && clock_type::now() < deadline) p.io.run_one_for(10ms);
    p.io.restart();
    BOOST_REQUIRE_MESSAGE(p.service.arms() > arms, "the loop never armed the CQ");
    BOOST_REQUIRE(!received);
    async_send(p.a, p.a_mr.slice(0, 16), [this](error_code ec, std::size_t) {
      BOOST_TEST(!ec);
      sent = true;
    });
    steal_event();
  }

  void steal_event() const { steal_event_of(p.service); }

  /// Runs the service until both completed or `limit` passed; returns how long it ran.
  clock_type::duration run(clock_type::duration limit) {
    const auto start = clock_type::now();
    while (!(received && sent) && clock_type::now() - start < limit) p.io.run_one_for(10ms);
    p.io.restart();
    return clock_type::now() - start;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(lost_event)

BOOST_DATA_TEST_CASE(a_wait_whose_event_was_lost_ends_within_a_few_periods, sleeping_modes, mode) {
  async_pair p({.mode = mode, .lost_event_check = 200ms});
  lost_exchange exchange(p);
  const auto took = exchange.run(10s);
  BOOST_TEST(exchange.received);
  BOOST_TEST(exchange.sent);
  BOOST_TEST(p.service.lost_events() == 1u);
  BOOST_TEST(took < 1s,  // the default period would take longer
             "took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  BOOST_TEST(p.service.outstanding() == 0u);

  // The CQ is armed again after the rescue: the next exchange completes by its event.
  const std::size_t events = p.service.events();
  bool again = false;
  async_receive(p.b, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { again = !ec; });
  async_send(p.a, p.a_mr.slice(0, 16), [](error_code, std::size_t) {});
  p.io.run_for(5s);
  BOOST_TEST(again);
  BOOST_TEST(p.io.stopped());  // and the timer went with the loop
  BOOST_TEST(p.service.lost_events() == 1u);
  if (mode == polling_mode::event) BOOST_TEST(p.service.events() > events);
}

BOOST_AUTO_TEST_CASE(without_the_check_a_lost_event_stalls_the_wait) {
  // What the check is for: nothing else would end this wait but another completion.
  async_pair p({.lost_event_check = 0ms});
  lost_exchange exchange(p);
  exchange.run(1500ms);
  BOOST_TEST(!exchange.received);
  BOOST_TEST(p.service.lost_events() == 0u);
  BOOST_TEST(p.service.outstanding() == 2u);
}  // the pair's queue pairs drain their requests as they are destroyed

BOOST_AUTO_TEST_CASE(the_check_leaves_a_wait_with_nothing_in_the_cq_alone) {
  async_pair p({.lost_event_check = 50ms});
  bool received = false;
  async_receive(p.b, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { received = !ec; });
  p.io.run_for(500ms);  // about ten ticks, each finding the wait still standing
  p.io.restart();
  BOOST_TEST(!received);
  BOOST_TEST(p.service.lost_events() == 0u);
  // Its completion may meet a tick before its event is readable (a late event counts as lost):
  // what matters is that it completes.
  async_send(p.a, p.a_mr.slice(0, 16), [](error_code, std::size_t) {});
  p.io.run_for(5s);
  BOOST_TEST(received);
}

BOOST_AUTO_TEST_CASE(a_wait_left_with_nothing_outstanding_ends) {
  // A queue pair destroyed while the wait stands completes its receive by polling the CQ itself;
  // if the flush's event is lost too, nothing else would end the wait, nor io_context::run.
  async_pair p({.lost_event_check = 100ms});
  auto c = std::make_unique<async_queue_pair>(p.service, p.pd);
  async_queue_pair d(p.service, p.pd);
  c->connect(d.address(p.gid), {.local_gid = p.gid});  // a queue pair in RESET takes no receive
  d.connect(c->address(p.gid), {.local_gid = p.gid});
  bool flushed = false;
  async_receive(*c, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { flushed = bool(ec); });
  p.io.run_for(20ms);
  p.io.restart();
  c.reset();
  steal_event_of(p.service);
  BOOST_TEST(p.service.outstanding() == 0u);
  const auto start = clock_type::now();
  p.io.run_for(10s);
  const auto took = clock_type::now() - start;
  BOOST_TEST(flushed);
  BOOST_TEST(p.io.stopped());
  BOOST_TEST(took < 2s);
}

BOOST_DATA_TEST_CASE(the_check_does_not_keep_run_from_returning, sleeping_modes, mode) {
  async_pair p({.mode = mode, .lost_event_check = 60s});
  bool received = false;
  async_receive(p.b, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { received = !ec; });
  async_send(p.a, p.a_mr.slice(0, 16), [](error_code, std::size_t) {});
  const auto start = clock_type::now();
  p.io.run_for(30s);  // returns when nothing is pending: no timer may be left behind
  BOOST_TEST(received);
  BOOST_TEST(p.io.stopped());
  const auto took = clock_type::now() - start;
  BOOST_TEST(took < 5s);
}

BOOST_AUTO_TEST_SUITE_END()
