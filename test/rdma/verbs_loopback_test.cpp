// The verbs layer alone, no async: two RC queue pairs on one device connected to each other,
// a SEND/RECV and an RDMA WRITE, completions polled synchronously.
#include <array>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>
#include <string_view>

#include "coverbs/verbs/completion_queue.hpp"
#include "coverbs/verbs/memory_region.hpp"
#include "coverbs/verbs/queue_pair.hpp"
#include "rdma_env.hpp"

using namespace coverbs;

namespace {

ibv_wc wait_one(verbs::completion_queue& cq) {
  std::array<ibv_wc, 1> wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cq.poll(wc) == 0) {
    if (std::chrono::steady_clock::now() > deadline) BOOST_FAIL("no completion within 10 s");
  }
  return wc[0];
}

struct loopback : test::rdma_env {
  verbs::protection_domain pd{dev};
  verbs::completion_queue cq{dev, 64};
  verbs::queue_pair a{pd, cq, cq};
  verbs::queue_pair b{pd, cq, cq};
  std::array<std::byte, 4096> a_mem{};
  std::array<std::byte, 4096> b_mem{};
  verbs::memory_region a_mr{pd, a_mem, verbs::access::local_write};
  verbs::memory_region b_mr{pd, b_mem, verbs::access::local_write | verbs::access::remote_write};

  loopback() {
    verbs::connect_options options{.local_gid = gid};
    a.connect(b.address(gid), options);
    b.connect(a.address(gid), options);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(verbs_loopback, loopback)

BOOST_AUTO_TEST_CASE(device_has_an_ipv4_roce_v2_gid) {
  BOOST_TEST_MESSAGE("device " << dev.name() << ", gid index " << gid.index);
  BOOST_TEST(gid.type == IBV_GID_TYPE_ROCE_V2);
  BOOST_TEST(a.state() == IBV_QPS_RTS);
  BOOST_TEST(b.state() == IBV_QPS_RTS);
}

BOOST_AUTO_TEST_CASE(send_and_receive_a_message) {
  constexpr std::string_view message = "hello over Soft-RoCE";
  auto recv_buf = b_mr.slice(0, 256);
  ibv_sge recv_sge{reinterpret_cast<std::uint64_t>(recv_buf.data), recv_buf.size, recv_buf.lkey};
  ibv_recv_wr recv{.wr_id = 2, .next = nullptr, .sg_list = &recv_sge, .num_sge = 1};
  ibv_recv_wr* bad_recv = nullptr;
  BOOST_REQUIRE(ibv_post_recv(b.native_handle(), &recv, &bad_recv) == 0);

  std::memcpy(a_mem.data(), message.data(), message.size());
  auto send_buf = a_mr.slice(0, message.size());
  ibv_sge send_sge{reinterpret_cast<std::uint64_t>(send_buf.data), send_buf.size, send_buf.lkey};
  ibv_send_wr send{};
  send.wr_id = 1;
  send.sg_list = &send_sge;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad_send = nullptr;
  BOOST_REQUIRE(ibv_post_send(a.native_handle(), &send, &bad_send) == 0);

  bool sent = false, received = false;
  for (int i = 0; i < 2; ++i) {
    const ibv_wc wc = wait_one(cq);
    BOOST_TEST_REQUIRE(wc.status == IBV_WC_SUCCESS, ibv_wc_status_str(wc.status));
    if (wc.wr_id == 1) sent = true;
    if (wc.wr_id == 2) {
      received = true;
      BOOST_TEST(wc.byte_len == message.size());
    }
  }
  BOOST_TEST(sent);
  BOOST_TEST(received);
  BOOST_TEST(std::string_view(reinterpret_cast<const char*>(b_mem.data()), message.size()) == message);
}

BOOST_AUTO_TEST_CASE(rdma_write_lands_in_the_remote_region) {
  for (std::size_t i = 0; i < 1024; ++i) a_mem[i] = static_cast<std::byte>(i * 7 + 3);
  const remote_buffer target = b_mr.remote(2048, 1024);
  auto local = a_mr.slice(0, 1024);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(local.data), local.size, local.lkey};
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = target.address;
  wr.wr.rdma.rkey = target.rkey;
  ibv_send_wr* bad = nullptr;
  BOOST_REQUIRE(ibv_post_send(a.native_handle(), &wr, &bad) == 0);
  const ibv_wc wc = wait_one(cq);
  BOOST_TEST_REQUIRE(wc.status == IBV_WC_SUCCESS, ibv_wc_status_str(wc.status));
  BOOST_TEST(std::memcmp(b_mem.data() + 2048, a_mem.data(), 1024) == 0);
  BOOST_TEST(std::all_of(b_mem.begin(), b_mem.begin() + 2048, [](std::byte x) { return x == std::byte{0}; }));
}

BOOST_AUTO_TEST_SUITE_END()
