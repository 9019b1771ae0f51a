// Reliable-connected queue pair with the state machine walked for the caller.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "coverbs/verbs/completion_queue.hpp"
#include "coverbs/verbs/device.hpp"
#include "coverbs/verbs/protection_domain.hpp"

namespace coverbs::verbs {

class shared_receive_queue;

/// Sizes and attachments of a new queue pair.
struct queue_pair_options {
  std::uint32_t max_send_wr = 128;      ///< send queue depth
  std::uint32_t max_recv_wr = 128;      ///< receive queue depth (ignored with an SRQ)
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
  std::uint32_t max_inline_data = 64;   ///< sends up to this size are copied into the WQE
  shared_receive_queue* srq = nullptr;  ///< take receives from this SRQ instead of an own queue
};

/// What a peer needs to connect its queue pair to this one (exchanged out of band or by rdma_cm).
struct queue_pair_address {
  std::uint32_t qp_num = 0;
  std::uint32_t psn = 0;  ///< first packet sequence number
  ibv_gid gid{};
  std::uint16_t lid = 0;
};

/// Path and reliability settings for `queue_pair::connect`.
struct connect_options {
  gid_entry local_gid;               ///< which local GID (and port) to send from
  ibv_mtu mtu = ibv_mtu{};           ///< zero: the port's active MTU
  std::uint8_t max_rd_atomic = 16;   ///< outstanding reads/atomics (capped by the device)
  std::uint8_t timeout = 14;         ///< local ACK timeout, 4.096 us * 2^timeout
  /// Transport retries: 6, not 7, because Soft-RoCE (rxe) retries for ever at 7 (which means
  /// "for ever" only for the RNR retry count), so a send to a peer that is gone without its
  /// disconnect arriving would never fail there; with 6 it fails within seconds, as it does
  /// on hardware with 7. rdma_cm's connections use the same value.
  std::uint8_t retry_count = 6;
  std::uint8_t rnr_retry = 7;        ///< 7 retries forever on receiver-not-ready
  std::uint8_t min_rnr_timer = 12;
  /// Remote rights the peer's requests get on this QP (memory regions still decide per region).
  int remote_access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
};

/// The creation attributes of an RC QP with `options` (shared by ibv_create_qp and rdma_cm).
ibv_qp_init_attr init_attributes(const completion_queue& send_cq, const completion_queue& recv_cq,
                                 const queue_pair_options& options) noexcept;
/// `options` as the device granted them after creation (inline room never over-promised).
queue_pair_options granted(const queue_pair_options& options, const ibv_qp_init_attr& created) noexcept;

/// Owns an RC `ibv_qp`.
class queue_pair {
 public:
  /// Creates a QP in RESET state.
  queue_pair(const protection_domain& pd, const completion_queue& send_cq,
             const completion_queue& recv_cq, const queue_pair_options& options = {});
  /// Wraps a QP created by rdma_cm (rdma_create_qp); the cm id destroys it.
  static queue_pair adopt(ibv_qp* qp, const queue_pair_options& options) noexcept;

  /// The libibverbs handle.
  ibv_qp* native_handle() const noexcept { return qp_.get(); }
  /// The sizes the QP was created with (the device may round depths up).
  const queue_pair_options& options() const noexcept { return options_; }
  /// This QP's address using `gid`, for the peer's `connect`.
  queue_pair_address address(const gid_entry& gid) const noexcept;
  /// Moves RESET -> INIT -> RTR -> RTS towards `peer`. Throws std::system_error.
  void connect(const queue_pair_address& peer, const connect_options& options);
  /// Moves the QP to ERROR: outstanding work requests complete with a flush status.
  void to_error() noexcept;
  /// The QP's current state as the device reports it.
  ibv_qp_state state() const;
  /// Whether rdma_cm created it (adopt): its id destroys it, not this object.
  bool adopted() const noexcept { return !qp_.get_deleter().owned; }
  /// Discards the work requests still posted, raising no completion for them: through RESET,
  /// which every state may enter, and back to ERROR through INIT, so that rdma_cm can still
  /// disconnect it (RESET may go nowhere but INIT). mlx5 also removes the QP's completions not
  /// yet polled from its CQ; rxe leaves them. False where the device refuses RESET.
  bool discard_posted() noexcept;
  /// Destroys a QP of its own now (true when ibv_destroy_qp did); lets go of an adopted one.
  /// native_handle() is null after.
  bool destroy() noexcept;

 private:
  struct destroyer {
    bool owned = true;
    void operator()(ibv_qp* qp) const noexcept {
      if (owned && qp != nullptr) ibv_destroy_qp(qp);
    }
  };
  queue_pair(ibv_qp* qp, bool owned, const queue_pair_options& options) noexcept
      : qp_(qp, destroyer{owned}), options_(options) {}
  std::unique_ptr<ibv_qp, destroyer> qp_;
  queue_pair_options options_;
  std::uint32_t psn_ = 0;
  std::uint8_t port_ = 1;
};

/// queue_pair::discard_posted for a QP known by its handle (a queue of the completion service's
/// whose owner it does not hold).
bool discard_posted(ibv_qp* qp) noexcept;
/// queue_pair::to_error for a QP known by its handle.
void move_to_error(ibv_qp* qp) noexcept;

}  // namespace coverbs::verbs
