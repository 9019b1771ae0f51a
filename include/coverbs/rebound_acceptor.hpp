// coverbs::rebound_acceptor: an acceptor whose executor type carries a default completion
// token, what `asio::use_awaitable_t<>::as_default_on_t<coverbs::acceptor>` names (through
// `acceptor::rebind_executor`), as for tcp::acceptor.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <type_traits>
#include <utility>

#include "coverbs/acceptor.hpp"
#include "coverbs/rebound_socket.hpp"

namespace coverbs {

/// A `coverbs::acceptor` whose `executor_type` is `Executor`: its `async_accept` takes that
/// executor's default completion token when given none, and yields
/// `rebound_socket<Executor>`, the socket type with the same default (as
/// `tcp::acceptor::async_accept` yields `tcp::socket::rebind_executor<executor_type>::other`).
template <class Executor>
class rebound_acceptor : public acceptor {
 public:
  using executor_type = Executor;
  /// The socket type `async_accept` yields.
  using socket_type = rebound_socket<Executor>;
  /// The same acceptor with yet another executor type.
  template <class OtherExecutor>
  struct rebind_executor {
    using other = typename acceptor::template rebind_executor<OtherExecutor>::other;
  };

  /// As acceptor's: opens, binds to `endpoint` and listens.
  rebound_acceptor(const executor_type& executor, const endpoint_type& endpoint,
                   const socket_options& options = {}, bool reuse_address = true)
      : acceptor(executor, endpoint, options, reuse_address) {}
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  rebound_acceptor(ExecutionContext& context, const endpoint_type& endpoint,
                   const socket_options& options = {}, bool reuse_address = true)
      : rebound_acceptor(executor_type(context.get_executor()), endpoint, options, reuse_address) {}
  /// As above, in the shape of `tcp::acceptor(context, endpoint, reuse_address)`.
  template <class ExecutionContext, class Bool,
            std::enable_if_t<detail::context_and_flag<ExecutionContext, Bool>, int> = 0>
  rebound_acceptor(ExecutionContext& context, const endpoint_type& endpoint, Bool reuse_address)
      : rebound_acceptor(executor_type(context.get_executor()), endpoint, socket_options(), reuse_address) {}
  /// As above, on `executor`.
  template <class Bool, std::enable_if_t<std::is_same_v<Bool, bool>, int> = 0>
  rebound_acceptor(const executor_type& executor, const endpoint_type& endpoint, Bool reuse_address)
      : acceptor(executor, endpoint, socket_options(), reuse_address) {}
  /// Opened for `protocol`, as acceptor's.
  rebound_acceptor(const executor_type& executor, const protocol_type& protocol,
                   const socket_options& options = {})
      : acceptor(executor, protocol, options) {}
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  rebound_acceptor(ExecutionContext& context, const protocol_type& protocol,
                   const socket_options& options = {})
      : rebound_acceptor(executor_type(context.get_executor()), protocol, options) {}
  /// Not yet open: set it up with `open`, `set_option`, `bind` and `listen`.
  explicit rebound_acceptor(const executor_type& executor, const socket_options& options = {})
      : acceptor(executor, options) {}
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  explicit rebound_acceptor(ExecutionContext& context, const socket_options& options = {})
      : rebound_acceptor(executor_type(context.get_executor()), options) {}

  /// Takes `other`'s listener, as `as_default_on` does with an acceptor.
  rebound_acceptor(acceptor&& other) noexcept  // NOLINT(google-explicit-constructor): as Asio's
      : acceptor(std::move(other)) {}

  /// The executor on which handlers run by default (the acceptor's own, so a moved-from one
  /// keeps it).
  executor_type get_executor() const noexcept { return executor_type(acceptor::get_executor()); }

  /// As `acceptor::async_accept()`, as a `socket_type`: `void(error_code, socket_type)`.
  template <boost::asio::completion_token_for<void(error_code, socket_type)> Token =
                boost::asio::default_completion_token_t<Executor>>
  auto async_accept(Token&& token = Token()) {
    return accept_rebound(nullptr, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(peer_endpoint)`, as a `socket_type`.
  template <boost::asio::completion_token_for<void(error_code, socket_type)> Token =
                boost::asio::default_completion_token_t<Executor>>
  auto async_accept(endpoint_type& peer_endpoint, Token&& token = Token()) {
    return accept_rebound(&peer_endpoint, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(executor)`: `void(error_code, coverbs::socket)`, the socket's
  /// executor being `executor`.
  template <class OtherExecutor, class Token = boost::asio::default_completion_token_t<Executor>,
            std::enable_if_t<detail::is_io_executor<OtherExecutor>, int> = 0>
  auto async_accept(const OtherExecutor& executor, Token&& token = Token()) {
    return acceptor::async_accept(executor, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(context)`.
  template <class ExecutionContext, class Token = boost::asio::default_completion_token_t<Executor>,
            std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  auto async_accept(ExecutionContext& context, Token&& token = Token()) {
    return acceptor::async_accept(context, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(executor, peer_endpoint)`.
  template <class OtherExecutor, class Token = boost::asio::default_completion_token_t<Executor>,
            std::enable_if_t<detail::is_io_executor<OtherExecutor>, int> = 0>
  auto async_accept(const OtherExecutor& executor, endpoint_type& peer_endpoint, Token&& token = Token()) {
    return acceptor::async_accept(executor, peer_endpoint, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(context, peer_endpoint)`.
  template <class ExecutionContext, class Token = boost::asio::default_completion_token_t<Executor>,
            std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  auto async_accept(ExecutionContext& context, endpoint_type& peer_endpoint, Token&& token = Token()) {
    return acceptor::async_accept(context, peer_endpoint, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(peer)`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_accept(socket& peer, Token&& token = Token()) {
    return acceptor::async_accept(peer, std::forward<Token>(token));
  }
  /// As `acceptor::async_accept(peer, peer_endpoint)`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_accept(socket& peer, endpoint_type& peer_endpoint, Token&& token = Token()) {
    return acceptor::async_accept(peer, peer_endpoint, std::forward<Token>(token));
  }

  // The blocking accepts into a socket, as acceptor's; those below yield a socket_type.
  using acceptor::accept;
  /// As `acceptor::accept()`, as a `socket_type`.
  socket_type accept() { return socket_type(acceptor::accept()); }
  /// As `acceptor::accept(ec)`, as a `socket_type`.
  socket_type accept(error_code& ec) { return socket_type(acceptor::accept(ec)); }
  /// As `acceptor::accept(peer_endpoint)`, as a `socket_type`.
  socket_type accept(endpoint_type& peer_endpoint) { return socket_type(acceptor::accept(peer_endpoint)); }
  /// As `acceptor::accept(peer_endpoint, ec)`, as a `socket_type`.
  socket_type accept(endpoint_type& peer_endpoint, error_code& ec) {
    return socket_type(acceptor::accept(peer_endpoint, ec));
  }

 private:
  // The accepts that yield a socket_type, `peer_endpoint` null where not asked for.
  template <class Token>
  auto accept_rebound(endpoint_type* peer_endpoint, Token&& token) {
    return boost::asio::async_initiate<Token, void(error_code, socket_type)>(
        [](auto handler, rebound_acceptor* self, endpoint_type* peer_endpoint) {
          // The plain accept hands over on the handler's executor, which stays the handler's,
          // and listens to the handler's cancellation slot.
          auto ex = boost::asio::get_associated_executor(handler, self->acceptor::get_executor());
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto done = boost::asio::bind_cancellation_slot(
              slot, boost::asio::bind_executor(ex, [h = std::move(handler)](error_code ec, socket s) mutable {
                std::move(h)(ec, socket_type(std::move(s)));
              }));
          if (peer_endpoint != nullptr) {
            self->acceptor::async_accept(*peer_endpoint, std::move(done));
          } else {
            self->acceptor::async_accept(std::move(done));
          }
        },
        token, this, peer_endpoint);
  }
};

}  // namespace coverbs
