// A socket's connect that the peer's CM rejects as stale (REJ reason 10: it holds a connection
// from the same QP number, say from a process or host that vanished without a DREQ) is tried
// once more with a new QP, and gets through. The stale connection is played by a plain
// rdma_cm requester without a QP, which announces whatever QP number its connect names.
#include <fcntl.h>
#include <rdma/rdma_cma.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>
#include <optional>
#include <string>
#include <vector>

#include "coverbs/coverbs.hpp"
#include "coverbs/detail/connect.hpp"
#include "coverbs/detail/handshake.hpp"
#include "echo_program.hpp"
#include "test_address.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

// Soft-RoCE numbers QPs in turn, device-wide (rxe's pool allocates cyclically): a QP created
// and destroyed now tells the number of the next, unless another process takes it first. (A
// device that numbers them otherwise cannot run this test.)
std::uint32_t next_qp_number(const verbs::device& dev) {
  verbs::protection_domain pd(dev);
  verbs::completion_queue cq(dev, 1);
  verbs::queue_pair qp(pd, cq, cq, {.max_send_wr = 1, .max_recv_wr = 1});
  return qp.native_handle()->qp_num + 1;
}

/// An rdma_cm requester without a QP, driven by hand: rdma_cm then announces the QP number
/// the connect's parameters name. It offers a coverbs handshake, so an acceptor takes it.
class announcing_requester {
 public:
  explicit announcing_requester(asio::io_context& io) : fd_(io) {
    channel_ = rdma_create_event_channel();
    BOOST_REQUIRE(channel_ != nullptr);
    BOOST_REQUIRE(fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK) == 0);
    fd_.assign(channel_->fd);
    BOOST_REQUIRE(rdma_create_id(channel_, &id_, nullptr, RDMA_PS_TCP) == 0);
  }
  ~announcing_requester() {
    fd_.release();  // the channel owns the descriptor
    if (id_ != nullptr) {
      rdma_disconnect(id_);
      rdma_destroy_id(id_);
    }
    rdma_destroy_event_channel(channel_);
  }
  announcing_requester(const announcing_requester&) = delete;
  announcing_requester& operator=(const announcing_requester&) = delete;

  /// Connects to `server` announcing QP number `qp_number`; false when the acceptor's answer
  /// does not come (its QP took the number announced here, and the REP looks stale to this
  /// side's CM, the same kernel's, which then rejects it).
  asio::awaitable<bool> connect(tcp::endpoint server, std::uint32_t qp_number) {
    BOOST_REQUIRE(rdma_resolve_addr(id_, nullptr, server.data(), 2000) == 0);
    BOOST_REQUIRE(co_await next_event() == RDMA_CM_EVENT_ADDR_RESOLVED);
    BOOST_REQUIRE(rdma_resolve_route(id_, 2000) == 0);
    BOOST_REQUIRE(co_await next_event() == RDMA_CM_EVENT_ROUTE_RESOLVED);
    const auto hello = coverbs::detail::encode_handshake(coverbs::detail::local_geometry(socket_options{}));
    rdma_conn_param param{};
    param.private_data = hello.data();
    param.private_data_len = static_cast<std::uint8_t>(hello.size());
    param.qp_num = qp_number;
    param.retry_count = 6;
    param.rnr_retry_count = 7;
    BOOST_REQUIRE(rdma_connect(id_, &param) == 0);
    // Without a QP librdmacm leaves the RTU to the caller.
    if (co_await next_event() != RDMA_CM_EVENT_CONNECT_RESPONSE) co_return false;
    BOOST_REQUIRE(rdma_establish(id_) == 0);
    co_return true;
  }

  /// The type of the next event, or nothing within `limit`.
  asio::awaitable<std::optional<rdma_cm_event_type>> next_event(std::chrono::milliseconds limit = 5s) {
    asio::steady_timer timer(fd_.get_executor(), limit);
    for (;;) {
      rdma_cm_event* event = nullptr;
      if (rdma_get_cm_event(channel_, &event) == 0) {
        const rdma_cm_event_type type = event->event;
        rdma_ack_cm_event(event);
        co_return type;
      }
      BOOST_REQUIRE(errno == EAGAIN);
      auto woken = co_await (fd_.async_wait(asio::posix::descriptor_base::wait_read, use_awaitable) ||
                             timer.async_wait(use_awaitable));
      if (woken.index() == 1) co_return std::nullopt;
    }
  }

 private:
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  asio::posix::stream_descriptor fd_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(stale_retry)

BOOST_AUTO_TEST_CASE(a_stale_reject_is_tried_again_with_a_new_queue_pair) {
  asio::io_context io;
  const socket_options rdma_only{.kind = transport::rdma};
  acceptor server(io, tcp::endpoint(test::rdma_address(), 0), rdma_only);
  const verbs::device dev = verbs::device::open_for(test::rdma_address());
  asio::co_spawn(io, echo::server(server, 20), asio::detached);
  bool collided = false, finished = false;
  std::string echoed;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int attempt = 0; attempt < 5 && !collided; ++attempt) {
          BOOST_TEST_CHECKPOINT("attempt " << attempt);
          const std::uint32_t next = next_qp_number(dev);
          announcing_requester vanished(io);
          // The acceptor's QP for it takes `next`; the client's first QP the number after.
          if (!co_await vanished.connect(server.local_endpoint(), next + 1)) continue;
          coverbs::socket client(io, rdma_only);
          std::vector<std::string> lines{"after a stale reject"};  // g++ 12: not in the co_await
          echoed = co_await echo::client(client, server.local_endpoint(), std::move(lines));
          BOOST_TEST((client.transport_in_use() == transport::rdma));
          // The CM disconnects the connection it took the client's first number for: the sign
          // that the numbers met (else another process took one of them: try again).
          collided = co_await vanished.next_event(2s) == RDMA_CM_EVENT_DISCONNECTED;
        }
        finished = true;
      },
      [&](std::exception_ptr e) {
        io.stop();
        if (e) std::rethrow_exception(e);
      });
  io.run_for(120s);
  BOOST_REQUIRE_MESSAGE(finished, "the exchange did not finish within 120 s");
  BOOST_TEST(collided,
             "no attempt met a stale reject: another process took the QP numbers predicted, or the "
             "device does not number QPs in turn as Soft-RoCE does");
  BOOST_TEST(echoed == "after a stale reject\n");
}

BOOST_AUTO_TEST_SUITE_END()
