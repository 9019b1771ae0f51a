// async_send: a two-sided message to the peer's posted receive.
#pragma once

#include "coverbs/async_queue_pair.hpp"
#include "coverbs/detail/initiate.hpp"

namespace coverbs {

/// Sends `buffer` as one message. Sizes up to `qp.max_inline()` are copied into the work
/// request, so their buffer is free as soon as this returns and needs no registration (`lkey`
/// is ignored). Completion: `void(error_code, std::size_t bytes_sent)`. Waits for a send slot
/// when the send queue is full.
template <class CompletionToken = detail::default_token>
auto async_send(async_queue_pair& qp, const verbs::local_buffer& buffer,
                CompletionToken&& token = detail::default_token()) {
  return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
      [](auto handler, async_queue_pair* qp, verbs::local_buffer buffer) {
        detail::start<detail::bytes_result>(std::move(handler), qp->send_queue(), true,
                                            [&](detail::operation& op) {
          op.sge = {reinterpret_cast<std::uint64_t>(buffer.data), buffer.size, buffer.lkey};
          op.byte_len = buffer.size;
          op.wr.send.opcode = IBV_WR_SEND;
          if (buffer.size <= qp->max_inline()) op.wr.send.send_flags |= IBV_SEND_INLINE;
          if (buffer.size == 0) op.wr.send.num_sge = 0;
        });
      },
      token, &qp, buffer);
}

}  // namespace coverbs
