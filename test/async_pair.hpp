// Two async queue pairs on one device, connected to each other, with registered buffers:
// the stage for the async verbs tests.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <optional>
#include <vector>

#include "coverbs/coverbs.hpp"
#include "rdma_env.hpp"

namespace coverbs::test {

inline const char* mode_name(polling_mode m) {
  switch (m) {
    case polling_mode::event: return "event";
    case polling_mode::busy: return "busy";
    case polling_mode::adaptive: return "adaptive";
  }
  return "?";
}

struct async_pair_options {
  polling_mode mode = polling_mode::event;
  std::chrono::microseconds spin = completion_options{}.spin;  ///< adaptive mode
  std::chrono::microseconds max_spin = completion_options{}.max_spin;
  std::chrono::milliseconds lost_event_check = completion_options{}.lost_event_check;
  std::chrono::milliseconds flush_timeout = completion_options{}.flush_timeout;
  verbs::queue_pair_options qp{};
  verbs::access remote_rights =
      verbs::access::remote_read | verbs::access::remote_write | verbs::access::remote_atomic;
  std::size_t buffer_size = 1 << 20;
};

struct async_pair : rdma_env {
  boost::asio::io_context io;
  verbs::protection_domain pd{dev};
  completion_service service;
  async_queue_pair a;
  async_queue_pair b;
  std::vector<std::byte> a_mem;
  std::vector<std::byte> b_mem;
  verbs::memory_region a_mr;
  verbs::memory_region b_mr;

  explicit async_pair(const async_pair_options& o = {})
      : service(io.get_executor(), dev,
                {.mode = o.mode,
                 .spin = o.spin,
                 .max_spin = o.max_spin,
                 .lost_event_check = o.lost_event_check,
                 .flush_timeout = o.flush_timeout}),
        a(service, pd, o.qp),
        b(service, pd, o.qp),
        a_mem(o.buffer_size),
        b_mem(o.buffer_size),
        a_mr(pd, a_mem, verbs::access::local_write | o.remote_rights),
        b_mr(pd, b_mem, verbs::access::local_write | o.remote_rights) {
    verbs::connect_options options{.local_gid = gid};
    a.connect(b.address(gid), options);
    b.connect(a.address(gid), options);
  }

  /// Runs `body` as a coroutine on `io` to completion (bounded), rethrowing its exception.
  template <class F>
  void run(F body, std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::exception_ptr failure;
    bool finished = false;
    boost::asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
      failure = e;
      finished = true;
    });
    io.run_for(limit);
    io.restart();
    BOOST_REQUIRE_MESSAGE(finished, "coroutine did not finish within the time limit");
    if (failure) std::rethrow_exception(failure);
  }
};

}  // namespace coverbs::test
