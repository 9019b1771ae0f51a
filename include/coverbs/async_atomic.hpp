// async_fetch_add and async_compare_swap: 64-bit remote atomics.
#pragma once

#include "coverbs/async_queue_pair.hpp"
#include "coverbs/detail/initiate.hpp"

namespace coverbs {

/// Atomically adds `add` to the 8-byte word at `remote` (8-aligned, remote atomic access).
/// `local` (8 bytes, registered with local write) receives the prior value, which is also
/// passed to the handler: `void(error_code, std::uint64_t previous)`.
template <class CompletionToken = detail::default_token>
auto async_fetch_add(async_queue_pair& qp, const verbs::local_buffer& local,
                     const remote_buffer& remote, std::uint64_t add,
                     CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::uint64_t)>(
      [](auto handler, async_queue_pair* qp, verbs::local_buffer local, remote_buffer remote,
         std::uint64_t add) {
        detail::start_atomic(std::move(handler), qp->send_queue(), IBV_WR_ATOMIC_FETCH_AND_ADD,
                             local, remote, add, 0);
      },
      token, &qp, local, remote, add);
}

/// Atomically replaces the word at `remote` with `swap` if it equals `compare`.
/// Completion: `void(error_code, std::uint64_t previous)`; it succeeded iff previous == compare.
template <class CompletionToken = detail::default_token>
auto async_compare_swap(async_queue_pair& qp, const verbs::local_buffer& local,
                        const remote_buffer& remote, std::uint64_t compare, std::uint64_t swap,
                        CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::uint64_t)>(
      [](auto handler, async_queue_pair* qp, verbs::local_buffer local, remote_buffer remote,
         std::uint64_t compare, std::uint64_t swap) {
        detail::start_atomic(std::move(handler), qp->send_queue(), IBV_WR_ATOMIC_CMP_AND_SWP,
                             local, remote, compare, swap);
      },
      token, &qp, local, remote, compare, swap);
}

}  // namespace coverbs
