// Two coverbs::sockets joined over the TCP fallback on loopback, without the acceptor: the
// framed protocol alone.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "coverbs/detail/tcp_stream.hpp"
#include "coverbs/socket.hpp"
#include "peer_context.hpp"

namespace coverbs::test {

struct tcp_socket_pair {
  boost::asio::io_context io;
  boost::asio::io_context peer_io;  ///< b's, with peer_context::own
  socket a{io};
  socket b;

  /// `kernel_buffer`, when not 0, sizes a's send buffer and b's receive buffer (SO_SNDBUF,
  /// SO_RCVBUF): what a writes beyond both together then waits in its stream until b reads.
  explicit tcp_socket_pair(std::size_t max_message = 64 * 1024, peer_context where = peer_context::shared,
                           int kernel_buffer = 0)
      : b(where == peer_context::own ? peer_io : io) {
    namespace ip = boost::asio::ip;
    ip::tcp::acceptor acceptor(io, ip::tcp::endpoint(ip::make_address("127.0.0.1"), 0));
    ip::tcp::socket client(io), server(where == peer_context::own ? peer_io : io);
    if (kernel_buffer != 0) {  // before the connection, whose window follows the receive buffer
      acceptor.set_option(boost::asio::socket_base::receive_buffer_size(kernel_buffer));
      client.open(ip::tcp::v4());
      client.set_option(boost::asio::socket_base::send_buffer_size(kernel_buffer));
    }
    client.connect(acceptor.local_endpoint());
    acceptor.accept(server);
    auto sa = std::make_shared<detail::tcp_stream>(std::move(client), max_message);
    auto sb = std::make_shared<detail::tcp_stream>(std::move(server), max_message);
    sa->start();
    sb->start();
    a.attach(sa, transport::tcp, {}, {});
    b.attach(sb, transport::tcp, {}, {});
  }
  ~tcp_socket_pair() {
    a.close();
    b.close();
    for (auto* context : {&io, &peer_io}) {
      context->restart();
      context->run_for(std::chrono::seconds(2));  // returns at once where nothing is left to run
    }
  }
};

}  // namespace coverbs::test
