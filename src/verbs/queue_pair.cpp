#include "coverbs/verbs/queue_pair.hpp"

#include <algorithm>
#include <random>

#include "coverbs/detail/throw_error.hpp"
#include "coverbs/verbs/shared_receive_queue.hpp"

namespace coverbs::verbs {
namespace {

void modify(ibv_qp* qp, ibv_qp_attr& attr, int mask, const char* what) {
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) detail::throw_errno(what, rc);
}

std::uint32_t random_psn() {
  static thread_local std::minstd_rand engine{std::random_device{}()};
  return engine() & 0xffffffu;  // PSNs are 24 bits
}

}  // namespace

queue_pair::queue_pair(const protection_domain& pd,
                       const completion_queue& send_cq, const completion_queue& recv_cq,
                       const queue_pair_options& options)
    : qp_(nullptr, destroyer{true}), options_(options), psn_(random_psn()) {
  ibv_qp_init_attr attr = init_attributes(send_cq, recv_cq, options);
  qp_.reset(ibv_create_qp(pd.native_handle(), &attr));
  if (!qp_) detail::throw_errno("ibv_create_qp");
  options_ = granted(options, attr);
}

ibv_qp_init_attr init_attributes(const completion_queue& send_cq, const completion_queue& recv_cq,
                                 const queue_pair_options& options) noexcept {
  ibv_qp_init_attr attr{};
  attr.send_cq = send_cq.native_handle();
  attr.recv_cq = recv_cq.native_handle();
  attr.srq = options.srq != nullptr ? options.srq->native_handle() : nullptr;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = options.max_send_wr;
  attr.cap.max_recv_wr = options.srq != nullptr ? 0 : options.max_recv_wr;
  attr.cap.max_send_sge = options.max_send_sge;
  attr.cap.max_recv_sge = options.max_recv_sge;
  attr.cap.max_inline_data = options.max_inline_data;
  return attr;
}

queue_pair_options granted(const queue_pair_options& options, const ibv_qp_init_attr& created) noexcept {
  // The device may grant more inline room than asked; never promise more than it granted.
  queue_pair_options result = options;
  result.max_inline_data = std::min(options.max_inline_data, created.cap.max_inline_data);
  return result;
}

queue_pair queue_pair::adopt(ibv_qp* qp, const queue_pair_options& options) noexcept {
  return queue_pair(qp, false, options);
}

queue_pair_address queue_pair::address(const gid_entry& gid) const noexcept {
  queue_pair_address a;
  a.qp_num = qp_->qp_num;
  a.psn = psn_;
  a.gid = gid.gid;
  ibv_port_attr port{};
  if (ibv_query_port(qp_->context, gid.port, &port) == 0) a.lid = port.lid;
  return a;
}

void queue_pair::connect(const queue_pair_address& peer, const connect_options& options) {
  port_ = options.local_gid.port;
  ibv_device_attr dev{};
  if (int rc = ibv_query_device(qp_->context, &dev); rc != 0) detail::throw_errno("ibv_query_device", rc);
  ibv_port_attr port{};
  if (int rc = ibv_query_port(qp_->context, port_, &port); rc != 0) detail::throw_errno("ibv_query_port", rc);

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port_;
  attr.qp_access_flags = options.remote_access;
  modify(qp_.get(), attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
         "ibv_modify_qp(INIT)");

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = options.mtu != ibv_mtu{} ? options.mtu : port.active_mtu;
  attr.dest_qp_num = peer.qp_num;
  attr.rq_psn = peer.psn;
  attr.max_dest_rd_atomic =
      static_cast<std::uint8_t>(std::min<int>(options.max_rd_atomic, dev.max_qp_rd_atom));
  attr.min_rnr_timer = options.min_rnr_timer;
  attr.ah_attr.port_num = port_;
  attr.ah_attr.dlid = peer.lid;
  // RoCE has no LIDs: the path is the GRH, which must name the GID index of the right type.
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = peer.gid;
  attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(options.local_gid.index);
  attr.ah_attr.grh.hop_limit = 64;
  modify(qp_.get(), attr,
         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
         "ibv_modify_qp(RTR)");

  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = psn_;
  attr.timeout = options.timeout;
  attr.retry_cnt = options.retry_count;
  attr.rnr_retry = options.rnr_retry;
  attr.max_rd_atomic = static_cast<std::uint8_t>(std::min<int>(options.max_rd_atomic, dev.max_qp_init_rd_atom));
  modify(qp_.get(), attr,
         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC,
         "ibv_modify_qp(RTS)");
}

void queue_pair::to_error() noexcept {
  move_to_error(qp_.get());
}

bool queue_pair::discard_posted() noexcept {
  return verbs::discard_posted(qp_.get());
}

void move_to_error(ibv_qp* qp) noexcept {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

bool discard_posted(ibv_qp* qp) noexcept {
  constexpr int init_mask = IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS;
  ibv_qp_attr was{};
  ibv_qp_init_attr created{};
  const bool known = ibv_query_qp(qp, &was, init_mask, &created) == 0;
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  if (ibv_modify_qp(qp, &reset, IBV_QP_STATE) != 0) return false;
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = was.port_num;
  init.pkey_index = was.pkey_index;
  init.qp_access_flags = was.qp_access_flags;
  if (known && ibv_modify_qp(qp, &init, IBV_QP_STATE | init_mask) == 0) move_to_error(qp);
  return true;  // discarded, even where the QP stays in RESET
}

bool queue_pair::destroy() noexcept {
  if (qp_ && qp_.get_deleter().owned && ibv_destroy_qp(qp_.get()) != 0) return false;
  (void)qp_.release();  // destroyed above, or its id destroys it
  return true;
}

ibv_qp_state queue_pair::state() const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (int rc = ibv_query_qp(qp_.get(), &attr, IBV_QP_STATE, &init); rc != 0) {
    detail::throw_errno("ibv_query_qp", rc);
  }
  return attr.qp_state;
}

}  // namespace coverbs::verbs
