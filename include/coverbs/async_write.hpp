// async_write and async_write_with_immediate: one-sided RDMA WRITE into a peer's memory.
#pragma once

#include "coverbs/async_queue_pair.hpp"
#include "coverbs/detail/initiate.hpp"

namespace coverbs {

/// Writes `local` to the start of `remote` without involving the peer's CPU.
/// Completion: `void(error_code, std::size_t)`. Access failures as for `async_read`.
template <class CompletionToken = detail::default_token>
auto async_write(async_queue_pair& qp, const verbs::local_buffer& local, const remote_buffer& remote,
                 CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
      [](auto handler, async_queue_pair* qp, verbs::local_buffer local, remote_buffer remote) {
        detail::start_one_sided(std::move(handler), qp->send_queue(), IBV_WR_RDMA_WRITE, local, remote);
      },
      token, &qp, local, remote);
}

/// Writes like `async_write`, then consumes one receive at the peer, which completes its
/// `async_receive_immediate` with `immediate`: the data is visible there when it does.
template <class CompletionToken = detail::default_token>
auto async_write_with_immediate(async_queue_pair& qp, const verbs::local_buffer& local,
                                const remote_buffer& remote, std::uint32_t immediate,
                                CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
      [](auto handler, async_queue_pair* qp, verbs::local_buffer local, remote_buffer remote,
         std::uint32_t immediate) {
        detail::start_one_sided(std::move(handler), qp->send_queue(), IBV_WR_RDMA_WRITE_WITH_IMM,
                                local, remote, immediate);
      },
      token, &qp, local, remote, immediate);
}

}  // namespace coverbs
