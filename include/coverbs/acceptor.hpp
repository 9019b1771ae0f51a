// coverbs::acceptor: accepts RDMA and TCP connections with the shape of
// boost::asio::ip::tcp::acceptor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>

#include "coverbs/socket.hpp"

namespace coverbs {

namespace detail {
class acceptor_impl;
using accept_handler = boost::asio::any_completion_handler<void(error_code, connection)>;
void async_accept(const std::shared_ptr<acceptor_impl>& impl, accept_handler handler);
}  // namespace detail

/// Listens on an address and port and yields connected sockets, like
/// `boost::asio::ip::tcp::acceptor`. With `transport::automatic` (the default) it listens
/// with rdma_cm and with TCP on the same port number, so RDMA and TCP clients are served by
/// one acceptor; `transport::rdma` or `transport::tcp` listen on one only. With
/// `socket_options::max_connections` it keeps at most that many connections open and turns
/// further clients away at once (they see `connection_refused`) while it goes on serving.
class acceptor {
 public:
  using executor_type = boost::asio::any_io_executor;
  using protocol_type = boost::asio::ip::tcp;
  using endpoint_type = boost::asio::ip::tcp::endpoint;

  /// Opens, binds to `endpoint` (port 0: the system picks one) and listens. Throws
  /// boost::system::system_error; with `transport::automatic` a missing RDMA stack only
  /// means TCP alone.
  acceptor(const executor_type& executor, const endpoint_type& endpoint, const socket_options& options = {},
           bool reuse_address = true);
  /// As above, on `context`'s executor.
  template <class ExecutionContext>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
  acceptor(ExecutionContext& context, const endpoint_type& endpoint, const socket_options& options = {},
           bool reuse_address = true)
      : acceptor(context.get_executor(), endpoint, options, reuse_address) {}
  acceptor(acceptor&&) noexcept = default;
  acceptor& operator=(acceptor&&) noexcept = default;
  /// Closes; pending accepts end with operation_aborted.
  ~acceptor();

  /// The executor on which handlers run by default.
  executor_type get_executor() const noexcept { return executor_; }
  /// True until closed.
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The bound address and port.
  endpoint_type local_endpoint() const;
  /// True when RDMA clients can connect (rdma_cm listens).
  bool accepts_rdma() const noexcept;
  /// True when TCP clients can connect.
  bool accepts_tcp() const noexcept;
  /// Stops listening; pending accepts end with operation_aborted.
  void close();
  /// Ends pending accepts with operation_aborted; the acceptor keeps listening.
  void cancel();

  /// The next connection, whichever transport it came by, as a new socket:
  /// `void(error_code, coverbs::socket)`. Call again for each further connection.
  template <class CompletionToken = detail::default_socket_token>
  auto async_accept(CompletionToken&& token = detail::default_socket_token()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, socket)>(
        [](auto handler, acceptor* self) {
          auto done = [ex = self->executor_, options = self->options_, h = std::move(handler)](
                          error_code ec, detail::connection c) mutable {
            socket s(ex, options);
            if (!ec) s.attach(std::move(c.stream), c.kind, c.local, c.remote);
            auto hex = boost::asio::get_associated_executor(h, ex);
            boost::asio::dispatch(hex, boost::asio::append(std::move(h), ec, std::move(s)));
          };
          self->start_accept(detail::accept_handler(std::move(done)));
        },
        token, this);
  }
  /// The next connection into `peer` (closed first): `void(error_code)`.
  template <class CompletionToken = detail::default_socket_token>
  auto async_accept(socket& peer, CompletionToken&& token = detail::default_socket_token()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [](auto handler, acceptor* self, socket* peer) {
          peer->close();
          auto done = [ex = self->executor_, peer, h = std::move(handler)](error_code ec,
                                                                             detail::connection c) mutable {
            if (!ec) peer->attach(std::move(c.stream), c.kind, c.local, c.remote);
            auto hex = boost::asio::get_associated_executor(h, ex);
            boost::asio::dispatch(hex, boost::asio::append(std::move(h), ec));
          };
          self->start_accept(detail::accept_handler(std::move(done)));
        },
        token, this, &peer);
  }

 private:
  void start_accept(detail::accept_handler handler);

  executor_type executor_;
  socket_options options_;
  std::shared_ptr<detail::acceptor_impl> impl_;
};

}  // namespace coverbs
