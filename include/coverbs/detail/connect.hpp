// Establishing connections for coverbs::socket and coverbs::acceptor, on either transport.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <optional>
#include <vector>

#include "coverbs/cm/id.hpp"
#include "coverbs/detail/rdma_stream.hpp"
#include "coverbs/detail/socket_option.hpp"
#include "coverbs/detail/stream_core.hpp"

namespace coverbs {
struct socket_options;
enum class transport;
}  // namespace coverbs

namespace coverbs::detail {

/// An established connection, ready to be attached to a socket.
struct connection {
  std::shared_ptr<stream_core> stream;
  boost::asio::ip::tcp::endpoint local, remote;
  transport kind;
};

using connect_handler = boost::asio::any_completion_handler<void(error_code, connection)>;

/// What a socket said before connecting: bind()'s address and set_option()'s options.
struct connect_setup {
  std::optional<boost::asio::ip::tcp::endpoint> local;
  /// Over TCP set before the bind and the connect (no_delay again once connected, over the
  /// stream's own); over RDMA only options it takes are ever here, which change nothing.
  std::vector<raw_socket_option> options;
  /// The family `options` were checked for (open()'s or bind()'s): a TCP attempt to a peer
  /// of another fails with address_family_not_supported.
  std::optional<boost::asio::ip::tcp> family;
};

/// Connects to `peer` with the transport `options` ask for (automatic: RDMA where a device
/// reaches the peer and it accepts RDMA, else TCP), set up as `setup` says.
void async_connect(const boost::asio::any_io_executor& executor, const boost::asio::ip::tcp::endpoint& peer,
                   const connect_setup& setup, const socket_options& options, connect_handler handler);

/// What an RDMA connection's QP depends on, in the order it must be torn down: the cm id
/// (which frees the QP) first, then the completion service and the protection domain.
struct rdma_resources {
  std::optional<verbs::protection_domain> pd;
  std::optional<completion_service> service;
  cm::id id;

  explicit rdma_resources(cm::id i) : id(std::move(i)) {}
};

/// Builds the RDMA stream of a resolved id or a connection request: PD, completion service,
/// QP and receive pool, with the receives posted. `peer` is known on the accepting side.
std::shared_ptr<rdma_stream> make_rdma_stream(cm::id id, const socket_options& options);
/// Once the connection is established: watches for the peer's disconnect, and disconnects on
/// close (or on a failure) from here on.
void watch_rdma_connection(const std::shared_ptr<rdma_stream>& stream);
/// Sizes the stream's send pool after the peer's receive pool and returns the connection; `ec`
/// says where the pool could not be allocated or registered (the stream is to be closed then).
connection finish_rdma_connection(const std::shared_ptr<rdma_stream>& stream, stream_geometry peer,
                                  error_code& ec);
/// The local pool a socket with `options` offers.
stream_geometry local_geometry(const socket_options& options);

}  // namespace coverbs::detail
