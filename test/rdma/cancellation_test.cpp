// Cancellation is honest: a posted receive ends only with its flush completion; a request
// still waiting for a queue slot is withdrawn without disturbing the queue pair.
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "async_pair.hpp"
#include "poll_shim.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using namespace asio::experimental::awaitable_operators;
using coverbs::test::async_pair;

BOOST_AUTO_TEST_SUITE(cancellation)

// Runs `io` until `done()` (bounded).
template <class Predicate>
void run_until(asio::io_context& io, Predicate done) {
  for (auto start = std::chrono::steady_clock::now();
       !done() && std::chrono::steady_clock::now() - start < std::chrono::seconds(30);) {
    io.run_for(std::chrono::milliseconds(10));
  }
}

BOOST_AUTO_TEST_CASE(cancelled_receive_completes_after_its_flush) {
  async_pair p;
  asio::cancellation_signal signal;
  error_code result = asio::error::would_block;
  std::size_t outstanding_at_completion = 99;
  async_receive(p.b, p.b_mr.slice(0, 64),
                asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::size_t) {
                  result = ec;
                  outstanding_at_completion = p.service.outstanding();
                }));
  p.io.run_for(std::chrono::milliseconds(20));
  BOOST_TEST(p.service.outstanding() == 1u);
  signal.emit(asio::cancellation_type::terminal);
  BOOST_TEST((result == asio::error::would_block));  // never completed inside emit
  p.io.run_for(std::chrono::seconds(30));
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
  BOOST_TEST(outstanding_at_completion == 0u);  // the device gave the buffer back first
  BOOST_TEST(p.b.native().state() == IBV_QPS_ERR);
}

BOOST_AUTO_TEST_CASE(total_cancel_leaves_a_posted_request_be) {
  // Partial and total cancellation promise to leave the I/O object as it was: a posted
  // receive stays posted (the QP up), and the next message still lands in it.
  async_pair p;
  for (const auto type : {asio::cancellation_type::total, asio::cancellation_type::partial}) {
    BOOST_TEST_CONTEXT("type " << static_cast<int>(type)) {
      asio::cancellation_signal signal;
      error_code result = asio::error::would_block;
      std::size_t received = 0;
      async_receive(p.b, p.b_mr.slice(0, 64),
                    asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::size_t n) {
                      result = ec;
                      received = n;
                    }));
      p.io.restart();
      p.io.run_for(std::chrono::milliseconds(20));
      signal.emit(type);
      p.io.run_for(std::chrono::milliseconds(100));
      BOOST_TEST((result == asio::error::would_block));  // still posted
      BOOST_TEST(p.b.native().state() == IBV_QPS_RTS);
      error_code sent = asio::error::would_block;
      async_send(p.a, p.a_mr.slice(0, 24), [&](error_code ec, std::size_t) { sent = ec; });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while ((result == asio::error::would_block || sent == asio::error::would_block) &&
             p.io.run_one_until(deadline) > 0) {
      }
      BOOST_TEST(!sent, sent.message());
      BOOST_TEST(!result, result.message());
      BOOST_TEST(received == 24u);
    }
  }
}

BOOST_AUTO_TEST_CASE(receive_with_a_timeout_through_awaitable_operators) {
  async_pair p;
  p.run([&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(100));
    auto result = co_await (async_receive(p.b, p.b_mr.slice(0, 64), asio::as_tuple(asio::use_awaitable)) ||
                            timer.async_wait(asio::use_awaitable));
    BOOST_TEST(result.index() == 1u);  // the timer won
  });
  BOOST_TEST(p.service.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(waiting_request_is_withdrawn_without_erroring_the_queue_pair) {
  async_pair p({.qp = {.max_send_wr = 1}});
  // The peer posts no receive, so the first send sits in RNR retry and holds the only slot.
  std::vector<error_code> results(2, asio::error::would_block);
  asio::cancellation_signal signal;
  async_send(p.a, p.a_mr.slice(0, 8), [&](error_code ec, std::size_t) { results[0] = ec; });
  async_send(p.a, p.a_mr.slice(0, 8),
             asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::size_t) { results[1] = ec; }));
  p.io.run_for(std::chrono::milliseconds(20));
  signal.emit(asio::cancellation_type::terminal);
  p.io.run_for(std::chrono::milliseconds(200));
  BOOST_TEST((results[1] == asio::error::operation_aborted));
  BOOST_TEST((results[0] == asio::error::would_block));  // still pending, unharmed
  BOOST_TEST(p.a.native().state() == IBV_QPS_RTS);
  // Now let the first one through.
  async_receive(p.b, p.b_mr.slice(0, 64), [](error_code, std::size_t) {});
  p.io.run_for(std::chrono::seconds(30));
  BOOST_TEST(!results[0]);
}

BOOST_AUTO_TEST_CASE(cancel_after_the_completion_was_polled_changes_nothing) {
  // One poll takes both writes' completions (held back until both have come); the first one's
  // handler cancels the second, whose completion is already in hand: too late, as in Asio.
  // The QP went to error here before, failing the connection for a cancel that did nothing.
  async_pair p;
  std::optional<coverbs::test::held_completions> both(std::in_place, p.service.queue().native_handle(), 2);
  asio::cancellation_signal signal;
  std::vector<error_code> results(3, asio::error::would_block);
  async_write(p.a, p.a_mr.slice(0, 64), p.b_mr.remote(0, 64), [&](error_code ec, std::size_t) {
    results[0] = ec;
    signal.emit(asio::cancellation_type::terminal);
  });
  async_write(
      p.a, p.a_mr.slice(64, 64), p.b_mr.remote(64, 64),
      asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::size_t) { results[1] = ec; }));
  run_until(p.io, [&] { return results[1] != asio::error::would_block; });
  both.reset();
  BOOST_TEST(!results[0], results[0].message());
  BOOST_TEST(!results[1], results[1].message());
  BOOST_TEST(p.a.native().state() == IBV_QPS_RTS);
  async_write(p.a, p.a_mr.slice(0, 64), p.b_mr.remote(128, 64),
              [&](error_code ec, std::size_t) { results[2] = ec; });
  p.io.restart();  // it ran out of work
  p.io.run_for(std::chrono::seconds(5));
  BOOST_TEST(!results[2], results[2].message());
}

BOOST_AUTO_TEST_CASE(a_cancel_after_its_queue_pair_went_reaches_nothing) {
  // As above, but the first handler destroys the queue pair before it cancels the second
  // write, whose completion is in the same batch: the cancel must not reach the queue that
  // went with the queue pair (under ASan it did: heap-use-after-free).
  async_pair p;
  const coverbs::test::held_completions both(p.service.queue().native_handle(), 2);
  auto x = std::make_unique<async_queue_pair>(p.service, p.pd);
  async_queue_pair y(p.service, p.pd);
  x->connect(y.address(p.gid), {.local_gid = p.gid});
  y.connect(x->address(p.gid), {.local_gid = p.gid});
  asio::cancellation_signal signal;
  std::vector<error_code> results(2, asio::error::would_block);
  async_write(*x, p.a_mr.slice(0, 64), p.b_mr.remote(0, 64), [&](error_code ec, std::size_t) {
    results[0] = ec;
    x.reset();
    signal.emit(asio::cancellation_type::terminal);
  });
  async_write(
      *x, p.a_mr.slice(64, 64), p.b_mr.remote(64, 64),
      asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::size_t) { results[1] = ec; }));
  run_until(p.io, [&] { return results[1] != asio::error::would_block; });
  BOOST_TEST(!x);
  BOOST_TEST(!results[0], results[0].message());
  BOOST_TEST(!results[1], results[1].message());
  BOOST_TEST(p.service.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(withdrawn_request_is_freed_when_the_context_goes_before_its_abort_runs) {
  // The abort of a withdrawn request is posted; an io_context destroyed before running it must
  // destroy the request's handler (as Asio destroys every pending handler), not leak it.
  std::weak_ptr<int> probe;
  bool invoked = false;
  {
    asio::cancellation_signal signal;  // outlives the handler that is connected to it
    async_pair p({.qp = {.max_send_wr = 1}});
    auto owned = std::make_shared<int>();
    probe = owned;
    // The peer posts no receive, so the first send holds the only slot and the second waits.
    async_send(p.a, p.a_mr.slice(0, 8), [](error_code, std::size_t) {});
    async_send(p.a, p.a_mr.slice(0, 8),
               asio::bind_cancellation_slot(signal.slot(), [owned = std::move(owned), &invoked](error_code, std::size_t) {
                 invoked = true;
               }));
    p.io.run_for(std::chrono::milliseconds(20));
    signal.emit(asio::cancellation_type::terminal);
  }  // no run: the abort never ran
  BOOST_TEST(!invoked);
  BOOST_TEST(probe.expired());
}

BOOST_AUTO_TEST_CASE(destroying_a_queue_pair_completes_its_pending_operations) {
  async_pair p;
  error_code result = asio::error::would_block;
  {
    async_queue_pair extra(p.service, p.pd);
    extra.connect(p.a.address(p.gid), {.local_gid = p.gid});
    async_receive(extra, p.b_mr.slice(0, 64), [&](error_code ec, std::size_t) { result = ec; });
    p.io.run_for(std::chrono::milliseconds(20));
  }
  p.io.run_for(std::chrono::seconds(10));
  BOOST_TEST((result == make_error_code(wc_errc::flushed)), result.message());
  BOOST_TEST(p.service.outstanding() == 0u);
}

// A flush later than completion_options::flush_timeout (here: none waited for) must neither
// leave operations behind (they kept io_context::run going, and a late completion reached their
// destroyed queue) nor release a buffer the device may still write.

namespace {

constexpr int late_receives = 8;
constexpr auto no_wait = std::chrono::milliseconds(0);

// What each of `late_receives` receives reported, and whether their handlers are gone.
struct late_results {
  std::vector<std::optional<error_code>> ends = std::vector<std::optional<error_code>>(late_receives);
  std::weak_ptr<int> probe;

  template <class Queue>
  void post(Queue& queue, verbs::memory_region& mr) {
    auto owned = std::make_shared<int>();
    probe = owned;
    for (int i = 0; i < late_receives; ++i) {
      async_receive(queue, mr.slice(64 * i, 64),
                    [this, i, owned](error_code ec, std::size_t) { ends[i] = ec; });
    }
  }
  int ended() const {
    return static_cast<int>(std::ranges::count_if(ends, [](const auto& e) { return e.has_value(); }));
  }
  int aborted() const {
    return static_cast<int>(
        std::ranges::count_if(ends, [](const auto& e) { return e == asio::error::operation_aborted; }));
  }
  // Every receive ended, as a late flush or a discarded request ends.
  bool all_discarded() const {
    return std::ranges::all_of(ends, [](const auto& e) {
      return e == asio::error::operation_aborted || e == make_error_code(wc_errc::flushed);
    });
  }
};

// A send and its receive between `p.a` and `p.b`: the service polls its CQ again, where a late
// completion naming a freed operation would be found (under AddressSanitizer, a failure).
void round_trip(async_pair& p) {
  int done = 0;
  async_receive(p.b, p.b_mr.slice(4096, 64), [&](error_code ec, std::size_t) { done += !ec; });
  async_send(p.a, p.a_mr.slice(0, 8), [&](error_code ec, std::size_t) { done += !ec; });
  p.io.restart();
  for (auto start = std::chrono::steady_clock::now();
       done < 2 && std::chrono::steady_clock::now() - start < std::chrono::seconds(30);) {
    p.io.run_for(std::chrono::milliseconds(10));
  }
  BOOST_TEST(done == 2);
}

// An RC QP of `service`'s CQ made outside coverbs (as rdma_cm makes one), in INIT state so that
// it takes receives; from `srq` where given.
ibv_qp* foreign_queue_pair(completion_service& service, verbs::protection_domain& pd,
                           ibv_srq* srq = nullptr) {
  ibv_qp_init_attr attr = verbs::init_attributes(service.queue(), service.queue(), {});
  attr.srq = srq;
  ibv_qp* qp = ibv_create_qp(pd.native_handle(), &attr);
  BOOST_TEST_REQUIRE(qp != nullptr);
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  BOOST_TEST_REQUIRE(ibv_modify_qp(qp, &init, mask) == 0);
  return qp;
}

// What the SRQ cases share; `results` outlives the service (declared inside a test's block),
// whose shutdown may still complete them.
struct srq_stage {
  coverbs::test::rdma_env env;
  asio::io_context io;
  verbs::protection_domain pd{env.dev};
  std::vector<std::byte> mem = std::vector<std::byte>(4096);
  verbs::memory_region mr{pd, mem, verbs::access::local_write};
  late_results results;

  // Waits (bounded; nothing polls meanwhile) until the message `marker` has landed in one of
  // the receives' slots. Soft-RoCE adds its completion to the CQ in the same pass, just after
  // the copy; the pause covers that, a descheduled vCPU included.
  void wait_until_landed(const char (&marker)[5]) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    auto landed = [&] {
      for (int i = 0; i < late_receives; ++i) {
        if (std::memcmp(mem.data() + 64 * i, marker, 4) == 0) return true;
      }
      return false;
    };
    while (!landed() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    BOOST_REQUIRE_MESSAGE(landed(), "the message never landed");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
};

// A sender and a receiver that takes its receives from `srq`, connected, on `service`; each
// may be reset on its own (declared in the order the tests destroyed them).
struct srq_connection {
  std::optional<async_shared_receive_queue> srq;
  async_queue_pair sender;
  std::optional<async_queue_pair> receiver;

  srq_connection(completion_service& service, srq_stage& stage,
                 const verbs::shared_receive_queue_options& options = {})
      : srq(std::in_place, service, stage.pd, options),
        sender(service, stage.pd),
        receiver(std::in_place, service, stage.pd, verbs::queue_pair_options{.srq = &srq->native()}) {
    sender.connect(receiver->address(stage.env.gid), {.local_gid = stage.env.gid});
    receiver->connect(sender.address(stage.env.gid), {.local_gid = stage.env.gid});
  }
};

// Receives left to `service` (run by `io`) by an SRQ destroyed while a QP used it, a QP made
// outside coverbs, so that nothing tells the service when it goes; it is gone afterwards.
void leave_receives_to(completion_service& service, srq_stage& stage, asio::io_context& io) {
  std::optional<async_shared_receive_queue> srq(std::in_place, service, stage.pd);
  ibv_qp* raw = foreign_queue_pair(service, stage.pd, srq->native().native_handle());
  stage.results.post(*srq, stage.mr);
  io.run_for(std::chrono::milliseconds(20));
  srq.reset();  // refused while `raw` uses it
  BOOST_TEST(ibv_destroy_qp(raw) == 0);
  BOOST_TEST(service.outstanding() == std::size_t{late_receives});
  BOOST_TEST(stage.results.ended() == 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_late_flush_resets_the_queue_pair_and_ends_what_it_held) {
  // No lost-event check: nothing but the library may end the service's wait.
  async_pair p({.lost_event_check = no_wait, .flush_timeout = no_wait});
  late_results results;
  {
    async_queue_pair extra(p.service, p.pd);
    extra.connect(p.a.address(p.gid), {.local_gid = p.gid});
    results.post(extra, p.b_mr);
    p.io.run_for(std::chrono::milliseconds(20));
    BOOST_TEST(p.service.outstanding() == std::size_t{late_receives});
  }
  // Reset, the QP discarded what it held: each receive ended (operation_aborted, or its flush
  // where that was polled first), and nothing is left.
  BOOST_TEST(p.service.outstanding() == 0u);
  p.io.run_for(std::chrono::seconds(10));
  BOOST_TEST(p.io.stopped());  // no wait of the service's kept io_context::run going
  BOOST_TEST(results.ended() == late_receives);
  BOOST_TEST(results.all_discarded());
  BOOST_TEST(results.probe.expired());
  round_trip(p);
}

BOOST_AUTO_TEST_CASE(an_adopted_queue_pair_discards_them_too) {
  async_pair p({.lost_event_check = no_wait, .flush_timeout = no_wait});
  ibv_qp* raw = foreign_queue_pair(p.service, p.pd);
  late_results results;
  {
    async_queue_pair extra(p.service, verbs::queue_pair::adopt(raw, {}));
    results.post(extra, p.b_mr);
    p.io.run_for(std::chrono::milliseconds(20));
  }
  // Its owner destroys the QP later (as a cm id does): the discard alone ended the receives.
  BOOST_TEST(p.service.outstanding() == 0u);
  p.io.run_for(std::chrono::seconds(10));
  BOOST_TEST(p.io.stopped());
  BOOST_TEST(results.ended() == late_receives);
  BOOST_TEST(results.all_discarded());
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  BOOST_TEST(ibv_query_qp(raw, &attr, IBV_QP_STATE, &init) == 0);
  BOOST_TEST(attr.qp_state == IBV_QPS_ERR);  // back from RESET, for rdma_disconnect
  round_trip(p);
  BOOST_TEST(ibv_destroy_qp(raw) == 0);
}

BOOST_AUTO_TEST_CASE(an_srq_destroyed_before_its_queue_pair_keeps_its_receives) {
  srq_stage stage;
  auto& [env, io, pd, mem, mr, results] = stage;
  std::memcpy(mem.data() + 2048, "late", 4);
  {
    completion_service service(io.get_executor(), env.dev, {.lost_event_check = no_wait});
    auto [srq, sender, receiver] = srq_connection(service, stage);
    results.post(*srq, mr);
    io.run_for(std::chrono::milliseconds(20));
    srq.reset();  // refused by the device while `receiver` uses it: the receives stay posted
    BOOST_TEST(service.outstanding() == std::size_t{late_receives});
    bool sent = false;
    async_send(sender, mr.slice(2048, 4), [&](error_code ec, std::size_t) { sent = !ec; });
    run_until(io, [&] { return sent && results.ended() == 1; });
    BOOST_TEST_REQUIRE(results.ended() == 1);
    const auto took = std::ranges::find_if(results.ends, [](const auto& e) { return e.has_value(); });
    BOOST_TEST((*took == error_code()));
    BOOST_TEST(std::memcmp(mem.data() + 64 * (took - results.ends.begin()), "late", 4) == 0);
    BOOST_TEST(service.outstanding() == std::size_t{late_receives - 1});
    // The SRQ goes with the last QP that used it; the receives it held end.
    receiver.reset();
    BOOST_TEST(service.outstanding() == 0u);
    run_until(io, [&] { return results.ended() == late_receives; });
    BOOST_TEST(io.stopped());
  }
  BOOST_TEST(results.ended() == late_receives);
  BOOST_TEST(results.aborted() == late_receives - 1);
  BOOST_TEST(results.probe.expired());
}

BOOST_AUTO_TEST_CASE(an_srq_destroyed_with_receives_waiting_posts_none_of_them) {
  // Beyond its depth receives wait in the queue; a completion polled while the SRQ goes must
  // not post one of them to the destroyed SRQ.
  srq_stage stage;
  auto& [env, io, pd, mem, mr, results] = stage;
  {
    completion_service service(io.get_executor(), env.dev);
    auto [srq, sender, receiver] = srq_connection(service, stage, {.max_wr = 4});
    results.post(*srq, mr);  // 4 posted, 4 waiting
    bool sent = false;
    std::memcpy(mem.data() + 2048, "gone", 4);
    async_send(sender, mr.slice(2048, 4), [&](error_code ec, std::size_t) { sent = !ec; });
    // Nothing polls meanwhile (the context does not run): the receive's completion stays in
    // the CQ until the SRQ goes, which polls it, freeing a slot of the destroyed SRQ.
    stage.wait_until_landed("gone");
    receiver.reset();
    srq.reset();
    run_until(io, [&] { return sent && results.ended() == late_receives; });
    BOOST_TEST(sent);
  }
  BOOST_TEST(results.ended() == late_receives);
  BOOST_TEST(results.aborted() == late_receives - 1);  // one took the message
  BOOST_TEST(results.probe.expired());
}

// A receive that a QP took from its SRQ, whose completion is still in the CQ when that QP goes,
// ends with its message. Some devices (mlx5) remove a QP's completions from the CQ as it is
// destroyed, so the destructor polls them first; rxe leaves them there, so on rxe this shows
// only that polling them then changes nothing of the result.
BOOST_AUTO_TEST_CASE(a_receive_taken_from_an_srq_ends_with_its_message_when_its_queue_pair_goes) {
  srq_stage stage;
  auto& [env, io, pd, mem, mr, results] = stage;
  std::memcpy(mem.data() + 2048, "late", 4);
  {
    completion_service service(io.get_executor(), env.dev);
    auto [srq, sender, receiver] = srq_connection(service, stage);
    results.post(*srq, mr);
    bool sent = false;
    async_send(sender, mr.slice(2048, 4), [&](error_code ec, std::size_t) { sent = !ec; });
    stage.wait_until_landed("late");  // nothing polls meanwhile
    receiver.reset();
    run_until(io, [&] { return sent && results.ended() == 1; });
    BOOST_TEST_REQUIRE(results.ended() == 1);
    const auto took = std::ranges::find_if(results.ends, [](const auto& e) { return e.has_value(); });
    BOOST_TEST((*took == error_code()), took->value().message());
    BOOST_TEST(std::memcmp(mem.data() + 64 * (took - results.ends.begin()), "late", 4) == 0);
    BOOST_TEST(service.outstanding() == std::size_t{late_receives - 1});  // the rest stay posted
    srq.reset();
    run_until(io, [&] { return results.ended() == late_receives; });
  }
  BOOST_TEST(results.ended() == late_receives);
  BOOST_TEST(results.aborted() == late_receives - 1);
  BOOST_TEST(results.probe.expired());
}

BOOST_AUTO_TEST_CASE(receives_left_to_a_service_end_when_it_goes) {
  srq_stage stage;
  {
    completion_service service(stage.io.get_executor(), stage.env.dev);
    leave_receives_to(service, stage, stage.io);
  }
  // The service went, and the SRQ with it: what it held ends with operation_aborted.
  stage.io.restart();
  stage.io.run_for(std::chrono::seconds(10));
  BOOST_TEST(stage.io.stopped());
  BOOST_TEST(stage.results.aborted() == late_receives);
  BOOST_TEST(stage.results.probe.expired());
}

BOOST_AUTO_TEST_CASE(receives_left_to_a_service_go_with_its_context) {
  srq_stage stage;
  std::optional<asio::io_context> context(std::in_place);
  completion_service service(context->get_executor(), stage.env.dev);
  leave_receives_to(service, stage, *context);
  context.reset();  // shut down first: the handlers are destroyed, never run, as Asio's are
  BOOST_TEST(stage.results.ended() == 0);
  BOOST_TEST(stage.results.probe.expired());
}

// The context goes with a receive posted: its handler is destroyed, never run, as Asio's are,
// and the device must not write into its buffer afterwards, which the application may use for
// something else by then. The sender has a context of its own, which goes on.
BOOST_AUTO_TEST_CASE(a_context_destroyed_with_a_receive_posted_leaves_its_buffer_alone) {
  coverbs::test::rdma_env env;
  verbs::protection_domain pd(env.dev);
  std::vector<std::byte> mem(4096, std::byte{0x5a});
  verbs::memory_region mr(pd, mem, verbs::access::local_write);
  std::memcpy(mem.data() + 2048, "late", 4);
  asio::io_context sender_io;
  completion_service sender_service(sender_io.get_executor(), env.dev);
  async_queue_pair sender(sender_service, pd);
  std::optional<asio::io_context> io(std::in_place);
  completion_service service(io->get_executor(), env.dev);
  async_queue_pair receiver(service, pd);
  sender.connect(receiver.address(env.gid), {.local_gid = env.gid});
  receiver.connect(sender.address(env.gid), {.local_gid = env.gid});
  bool ran = false;
  async_receive(receiver, mr.slice(0, 64), [&](error_code, std::size_t) { ran = true; });
  io.reset();  // shut down: the receive's handler is destroyed with the receive still posted
  BOOST_TEST(!ran);
  std::optional<error_code> sent;
  async_send(sender, mr.slice(2048, 4), [&](error_code ec, std::size_t) { sent = ec; });
  // The send ends either way: delivered into the receive (which must not happen), or failed
  // once the sender's retries find no queue pair that takes it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!sent && std::chrono::steady_clock::now() < deadline) {
    sender_io.restart();
    sender_io.run_for(std::chrono::milliseconds(10));
  }
  BOOST_TEST_REQUIRE(sent.has_value(), "the send did not end");
  BOOST_TEST(*sent, "delivered into a receive whose context is gone");
  BOOST_TEST(std::all_of(mem.begin(), mem.begin() + 64, [](std::byte b) { return b == std::byte{0x5a}; }));
}

BOOST_AUTO_TEST_SUITE_END()
