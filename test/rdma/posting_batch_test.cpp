// A posting_queue::batch hands its requests to the device in one ibv_post_* call, and a
// request the device refuses there fails, with every one behind it, through its handler.
#include <boost/test/unit_test.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "async_pair.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using coverbs::test::async_pair;

namespace {

// Counts the provider's post_send calls on one context, and can refuse a chain from its n-th
// request on (taking those before it), as a device that runs out of room part-way does.
struct post_send_spy {
  using post_send_fn = int (*)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
  static inline post_send_fn original = nullptr;
  static inline int calls = 0;
  static inline std::optional<std::size_t> refuse_from;

  ibv_context* context;
  explicit post_send_spy(ibv_qp* qp) : context(qp->context) {
    original = context->ops.post_send;
    calls = 0;
    refuse_from.reset();
    context->ops.post_send = &counting_post_send;
  }
  ~post_send_spy() { context->ops.post_send = original; }
  post_send_spy(const post_send_spy&) = delete;
  post_send_spy& operator=(const post_send_spy&) = delete;

  static int counting_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    ++calls;
    if (!refuse_from) return original(qp, wr, bad);
    ibv_send_wr* before = nullptr;
    ibv_send_wr* refused = wr;
    for (std::size_t i = 0; i < *refuse_from && refused != nullptr; ++i)
      before = std::exchange(refused, refused->next);
    if (refused == nullptr) return original(qp, wr, bad);
    int rc = 0;
    if (before != nullptr) {
      before->next = nullptr;  // the device takes the head of the chain only
      rc = original(qp, wr, bad);
      before->next = refused;
    }
    if (rc == 0) *bad = refused;
    return rc == 0 ? ENOMEM : rc;
  }
};

void fill_pattern(std::span<std::byte> bytes, unsigned seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
}

// Runs `io` until `done()` holds, at most 30 s (pending receives keep it from running out of work).
template <class Done>
void run_until(asio::io_context& io, Done done) {
  io.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(100));
}

constexpr std::size_t message_count = 8;
constexpr std::size_t message_size = 4096;

}  // namespace

BOOST_AUTO_TEST_SUITE(posting_batch)

BOOST_AUTO_TEST_CASE(a_batch_posts_its_sends_with_one_device_call_in_order) {
  async_pair p;
  fill_pattern(std::span(p.a_mem).first(message_count * message_size), 3);
  std::vector<std::size_t> received, sent;
  for (std::size_t i = 0; i < message_count; ++i) {
    async_receive(p.b, p.b_mr.slice(i * message_size, message_size), [&, i](error_code ec, std::size_t n) {
      BOOST_TEST(!ec);
      BOOST_TEST(n == message_size - i);
      received.push_back(i);
    });
  }
  post_send_spy spy(p.a.native().native_handle());
  {
    const detail::posting_queue::batch together(p.a.send_queue());
    for (std::size_t i = 0; i < message_count; ++i) {
      // Each one shorter than the one before, so that the receives tell them apart.
      async_send(p.a, p.a_mr.slice(i * message_size, message_size - i), [&, i](error_code ec, std::size_t n) {
        BOOST_TEST(!ec);
        BOOST_TEST(n == message_size - i);
        sent.push_back(i);
      });
    }
    BOOST_TEST(post_send_spy::calls == 0);  // held until the batch closes
  }
  BOOST_TEST(post_send_spy::calls == 1);
  p.io.run_for(std::chrono::seconds(30));
  const std::vector<std::size_t> in_order{0, 1, 2, 3, 4, 5, 6, 7};
  BOOST_TEST(sent == in_order, boost::test_tools::per_element());
  BOOST_TEST(received == in_order, boost::test_tools::per_element());
  for (std::size_t i = 0; i < message_count; ++i) {
    BOOST_TEST(std::memcmp(p.b_mem.data() + i * message_size, p.a_mem.data() + i * message_size,
                           message_size - i) == 0);
  }
  BOOST_TEST(p.service.outstanding() == 0u);
}

BOOST_AUTO_TEST_CASE(a_request_refused_in_a_batch_fails_with_those_behind_it) {
  async_pair p;
  constexpr std::size_t taken = 3;
  std::vector<std::size_t> received;
  for (std::size_t i = 0; i < message_count; ++i) {
    async_receive(p.b, p.b_mr.slice(i * message_size, message_size),
                  [&, i](error_code ec, std::size_t) { received.push_back(ec ? 100 + i : i); });
  }
  std::vector<std::optional<error_code>> results(message_count);
  std::size_t done = 0;
  {
    post_send_spy spy(p.a.native().native_handle());
    post_send_spy::refuse_from = taken;
    const detail::posting_queue::batch together(p.a.send_queue());
    for (std::size_t i = 0; i < message_count; ++i) {
      async_send(p.a, p.a_mr.slice(i * message_size, 64), [&, i](error_code ec, std::size_t) {
        results[i] = ec;
        ++done;
      });
    }
  }
  run_until(p.io, [&] { return done == message_count && received.size() == taken; });
  BOOST_TEST(done == message_count);  // every handler ran: none was lost with the refused post
  for (std::size_t i = 0; i < message_count; ++i) {
    BOOST_TEST_INFO("send " << i);
    BOOST_REQUIRE(results[i].has_value());
    if (i < taken) {
      BOOST_TEST(!*results[i]);
    } else {
      BOOST_TEST(*results[i] == error_code(ENOMEM, boost::system::system_category()));
    }
  }
  // What the device took arrived; nothing else did, and the QP still works afterwards.
  BOOST_TEST(received == (std::vector<std::size_t>{0, 1, 2}), boost::test_tools::per_element());
  bool sent_after = false;
  async_send(p.a, p.a_mr.slice(0, 64), [&](error_code ec, std::size_t) { sent_after = !ec; });
  run_until(p.io, [&] { return sent_after && received.size() == taken + 1; });
  BOOST_TEST(sent_after);
  BOOST_TEST(received.size() == taken + 1);
  // The receives still waiting end with the QP's flush.
  p.b.close();
  run_until(p.io, [&] { return p.service.outstanding() == 0; });
  BOOST_TEST(p.service.outstanding() == 0u);
  BOOST_TEST(p.a.send_queue().in_flight() == 0u);  // the refused ones hold no slot
  BOOST_TEST(received.size() == message_count);
}

BOOST_AUTO_TEST_SUITE_END()
