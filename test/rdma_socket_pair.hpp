// Two coverbs::sockets joined over RDMA on one device without the connection manager: the
// stream protocol alone, on loopback queue pairs.
#pragma once

#include "coverbs/detail/rdma_stream.hpp"
#include "coverbs/socket.hpp"
#include "rdma_env.hpp"

namespace coverbs::test {

struct rdma_socket_pair : rdma_env {
  boost::asio::io_context io;
  std::shared_ptr<verbs::protection_domain> pd = std::make_shared<verbs::protection_domain>(dev);
  std::shared_ptr<completion_service> service;
  socket a{io};
  socket b{io};

  explicit rdma_socket_pair(detail::stream_geometry geometry = {}, polling_mode mode = polling_mode::event)
      : service(std::make_shared<completion_service>(io.get_executor(), dev, completion_options{.mode = mode})) {
    auto qa = std::make_unique<async_queue_pair>(*service, *pd);
    auto qb = std::make_unique<async_queue_pair>(*service, *pd);
    qa->connect(qb->address(gid), {.local_gid = gid});
    qb->connect(qa->address(gid), {.local_gid = gid});
    // The streams keep the PD and the service alive until their last flush completion.
    auto keep = std::make_shared<std::pair<std::shared_ptr<completion_service>, std::shared_ptr<verbs::protection_domain>>>(service, pd);
    auto sa = std::make_shared<detail::rdma_stream>(keep, std::move(qa), *pd, geometry);
    auto sb = std::make_shared<detail::rdma_stream>(keep, std::move(qb), *pd, geometry);
    sa->start();
    sb->start();
    sa->set_peer(geometry);
    sb->set_peer(geometry);
    a.attach(sa, transport::rdma, {}, {});
    b.attach(sb, transport::rdma, {}, {});
  }
  ~rdma_socket_pair() {
    a.close();
    b.close();
    io.restart();
    io.run_for(std::chrono::seconds(5));  // let the flushes release the streams
  }
};

}  // namespace coverbs::test
