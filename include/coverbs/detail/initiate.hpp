// Common shape of the async verbs initiating functions.
#pragma once

#include <arpa/inet.h>

#include <boost/asio/async_result.hpp>


#include "coverbs/detail/wr_operation.hpp"
#include "coverbs/remote_buffer.hpp"
#include "coverbs/verbs/memory_region.hpp"

namespace coverbs::detail {

using default_token = boost::asio::default_completion_token_t<boost::asio::any_io_executor>;

/// Fills a one-sided send-queue request (read, write, atomics) aimed at `remote`.
inline void fill_one_sided(operation& op, ibv_wr_opcode opcode, const verbs::local_buffer& local,
                           const remote_buffer& remote) {
  op.sge = {reinterpret_cast<std::uint64_t>(local.data), local.size, local.lkey};
  op.byte_len = local.size;
  op.wr.send.opcode = opcode;
  op.wr.send.wr.rdma.remote_addr = remote.address;
  op.wr.send.wr.rdma.rkey = remote.rkey;
}

/// Starts a one-sided transfer after the argument checks every one-sided operation shares.
template <class Handler>
void start_one_sided(Handler&& handler, posting_queue& queue, ibv_wr_opcode opcode,
                     const verbs::local_buffer& local, const remote_buffer& remote,
                     std::uint32_t immediate = 0) {
  if (local.size > remote.length) {
    fail_immediately<bytes_result>(std::forward<Handler>(handler), queue.engine().executor,
                                   make_error_code(errc::buffer_too_small));
    return;
  }
  start<bytes_result>(std::forward<Handler>(handler), queue, true, [&](operation& op) {
    fill_one_sided(op, opcode, local, remote);
    op.wr.send.imm_data = htonl(immediate);
  });
}


template <class Handler>
void start_atomic(Handler&& handler, posting_queue& queue, ibv_wr_opcode opcode,
                  const verbs::local_buffer& local, const remote_buffer& remote,
                  std::uint64_t compare_add, std::uint64_t swap) {
  error_code ec;
  if (local.size < 8 || remote.length < 8) {
    ec = make_error_code(errc::buffer_too_small);
  } else if (remote.address % 8 != 0 || reinterpret_cast<std::uintptr_t>(local.data) % 8 != 0) {
    ec = make_error_code(errc::misaligned_atomic);
  }
  if (ec) {
    fail_immediately<atomic_result>(std::forward<Handler>(handler), queue.engine().executor, ec);
    return;
  }
  start<atomic_result>(std::forward<Handler>(handler), queue, true, [&](operation& op) {
    op.sge = {reinterpret_cast<std::uint64_t>(local.data), 8, local.lkey};
    op.wr.send.opcode = opcode;
    op.wr.send.wr.atomic.remote_addr = remote.address;
    op.wr.send.wr.atomic.rkey = remote.rkey;
    op.wr.send.wr.atomic.compare_add = compare_add;
    op.wr.send.wr.atomic.swap = swap;
  });
}

}  // namespace coverbs::detail
