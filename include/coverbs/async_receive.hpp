// async_receive and async_receive_immediate: take the next message from a QP or an SRQ.
#pragma once

#include "coverbs/async_queue_pair.hpp"
#include "coverbs/async_shared_receive_queue.hpp"
#include "coverbs/detail/initiate.hpp"

namespace coverbs {
namespace detail {

template <class Result>
struct initiate_receive {
  template <class Handler>
  void operator()(Handler&& handler, posting_queue* queue, verbs::local_buffer buffer) const {
    start<Result>(std::forward<Handler>(handler), *queue, false, [&](operation& op) {
      op.sge = {reinterpret_cast<std::uint64_t>(buffer.data), buffer.size, buffer.lkey};
      if (buffer.size == 0) op.wr.recv.num_sge = 0;
    });
  }
};

}  // namespace detail

/// Posts a receive into `buffer` (registered with local write) and completes when a message
/// lands in it. Completion: `void(error_code, std::size_t bytes_received)`. A message longer
/// than `buffer` ends in `wc_errc::local_length`. A peer's write with immediate consumes a
/// posted receive too, and completes it with 0 bytes (its data went to the written region; take
/// immediates with `async_receive_immediate`). Cancelling (terminal) moves the QP to ERROR and
/// completes with `operation_aborted` once the device has flushed the receive.
template <class CompletionToken = detail::default_token>
auto async_receive(async_queue_pair& qp, const verbs::local_buffer& buffer,
                   CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
      detail::initiate_receive<detail::bytes_result>{}, token, &qp.receive_queue(), buffer);
}

/// As above, posting to a shared receive queue: whichever attached QP gets a message first
/// fills `buffer`. A posted SRQ receive cannot be recalled; cancellation only withdraws one
/// still waiting for a slot.
template <class CompletionToken = detail::default_token>
auto async_receive(async_shared_receive_queue& srq, const verbs::local_buffer& buffer,
                   CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
      detail::initiate_receive<detail::bytes_result>{}, token, &srq.receive_queue(), buffer);
}

/// Posts an empty receive that a peer's `async_write_with_immediate` consumes.
/// Completion: `void(error_code, std::uint32_t immediate)` (host byte order).
template <class CompletionToken = detail::default_token>
auto async_receive_immediate(async_queue_pair& qp,
                             CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::uint32_t)>(
      detail::initiate_receive<detail::immediate_result>{}, token, &qp.receive_queue(),
      verbs::local_buffer{});
}

}  // namespace coverbs
