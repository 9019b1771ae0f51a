// async_read: one-sided RDMA READ from a peer's registered memory.
#pragma once

#include "coverbs/async_queue_pair.hpp"
#include "coverbs/detail/initiate.hpp"

namespace coverbs {

/// Reads `local.size` bytes from the start of `remote` into `local` (registered with local
/// write). The peer's CPU is not involved. Completion: `void(error_code, std::size_t)`.
/// A wrong key, a range outside the peer's region or a region without remote read gives
/// `wc_errc::remote_access` (condition `std::errc::permission_denied`).
template <class CompletionToken = detail::default_token>
auto async_read(async_queue_pair& qp, const verbs::local_buffer& local, const remote_buffer& remote,
                CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
      [](auto handler, async_queue_pair* qp, verbs::local_buffer local, remote_buffer remote) {
        detail::start_one_sided(std::move(handler), qp->send_queue(), IBV_WR_RDMA_READ, local, remote);
      },
      token, &qp, local, remote);
}

}  // namespace coverbs
