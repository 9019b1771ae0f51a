// Two coverbs::sockets joined over RDMA on one device without the connection manager: the
// stream protocol alone, on loopback queue pairs.
#pragma once

#include <optional>

#include "coverbs/detail/rdma_stream.hpp"
#include "coverbs/socket.hpp"
#include "peer_context.hpp"
#include "rdma_env.hpp"

namespace coverbs::test {

struct rdma_socket_pair : rdma_env {
  boost::asio::io_context io;
  boost::asio::io_context peer_io;  ///< b's, with peer_context::own
  std::shared_ptr<verbs::protection_domain> pd = std::make_shared<verbs::protection_domain>(dev);
  std::shared_ptr<completion_service> service, peer_service;
  socket a{io};
  socket b;

  /// `peer_receives` false: b never posts its receive pool (a stopped peer, say), so every
  /// send of a's meets receiver-not-ready, which its QP retries for ever. `a_is_told`: the pool
  /// a believes b has, where that is not b's (a peer that breaks the protocol).
  explicit rdma_socket_pair(detail::stream_geometry geometry = {}, polling_mode mode = polling_mode::event,
                            peer_context where = peer_context::shared, bool peer_receives = true,
                            std::optional<detail::stream_geometry> a_is_told = std::nullopt)
      : service(
            std::make_shared<completion_service>(io.get_executor(), dev, completion_options{.mode = mode})),
        peer_service(where == peer_context::own
                         ? std::make_shared<completion_service>(peer_io.get_executor(), dev,
                                                                completion_options{.mode = mode})
                         : service),
        b(where == peer_context::own ? peer_io : io) {
    auto qa = std::make_unique<async_queue_pair>(*service, *pd);
    auto qb = std::make_unique<async_queue_pair>(*peer_service, *pd);
    qa->connect(qb->address(gid), {.local_gid = gid});
    qb->connect(qa->address(gid), {.local_gid = gid});
    // The streams keep the PD and the service alive until their last flush completion.
    using kept = std::pair<std::shared_ptr<completion_service>, std::shared_ptr<verbs::protection_domain>>;
    auto sa = std::make_shared<detail::rdma_stream>(std::make_shared<kept>(service, pd), std::move(qa), *pd,
                                                    geometry);
    auto sb = std::make_shared<detail::rdma_stream>(std::make_shared<kept>(peer_service, pd), std::move(qb),
                                                    *pd, geometry);
    sa->start();
    if (peer_receives) sb->start();
    sa->set_peer(a_is_told.value_or(geometry));
    sb->set_peer(geometry);
    a.attach(sa, transport::rdma, {}, {});
    b.attach(sb, transport::rdma, {}, {});
  }
  ~rdma_socket_pair() {
    // What rdma_cm's DISCONNECTED does for a connected pair: without it, an end of stream sent
    // to a QP that has gone waits out its retries.
    for (socket* s : {&a, &b}) {
      if (auto impl = s->impl()) static_cast<detail::rdma_stream&>(*impl).peer_disconnected();
    }
    a.close();
    b.close();
    for (auto* context : {&io, &peer_io}) {  // let the flushes release the streams
      context->restart();
      context->run_for(std::chrono::seconds(5));  // returns at once where nothing is left to run
    }
  }
};

}  // namespace coverbs::test
