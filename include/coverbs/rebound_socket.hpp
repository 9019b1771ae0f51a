// coverbs::rebound_socket: a socket whose executor type carries a default completion token,
// what `asio::use_awaitable_t<>::as_default_on_t<coverbs::socket>` names (through
// `socket::rebind_executor`), as for tcp::socket.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <type_traits>
#include <utility>

#include "coverbs/socket.hpp"

namespace coverbs {

/// A `coverbs::socket` whose `executor_type` is `Executor` (e.g. Asio's
/// `executor_with_default`), so that every `async_*` member, and Asio's free functions such
/// as `asio::async_read`, take that executor's default completion token when given none.
/// The connection and its behaviour are the socket's own; a `coverbs::socket` converts to it
/// (and it is one), as Asio's sockets convert between executor types.
template <class Executor>
class rebound_socket : public socket {
  static_assert(std::is_convertible_v<Executor, boost::asio::any_io_executor> &&
                    std::is_convertible_v<boost::asio::any_io_executor, Executor>,
                "a coverbs socket's executor is an any_io_executor: Executor must convert both ways "
                "(as executor_with_default does)");

 public:
  using executor_type = Executor;
  /// The same socket with yet another executor type.
  template <class OtherExecutor>
  struct rebind_executor {
    using other = typename socket::template rebind_executor<OtherExecutor>::other;
  };

  /// The type of `lowest_layer()`: this one, so that stream layers over it (e.g.
  /// `asio::ssl::stream`) take its executor type and default token.
  using lowest_layer_type = rebound_socket;

  /// A closed socket whose operations run on `executor`.
  explicit rebound_socket(const executor_type& executor, const socket_options& options = {})
      : socket(executor, options) {}
  /// A closed socket whose operations run on `context`'s executor.
  template <class ExecutionContext>
    requires detail::is_execution_context<ExecutionContext>
  explicit rebound_socket(ExecutionContext& context, const socket_options& options = {})
      : rebound_socket(executor_type(context.get_executor()), options) {}
  /// Opened for `protocol`, as socket's.
  rebound_socket(const executor_type& executor, const protocol_type& protocol,
                 const socket_options& options = {})
      : socket(executor, protocol, options) {}
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  rebound_socket(ExecutionContext& context, const protocol_type& protocol, const socket_options& options = {})
      : rebound_socket(executor_type(context.get_executor()), protocol, options) {}
  /// Opened and bound to `local`, as socket's (a template for the same reason).
  template <class Endpoint, std::enable_if_t<std::is_same_v<Endpoint, endpoint_type>, int> = 0>
  rebound_socket(const executor_type& executor, const Endpoint& local, const socket_options& options = {})
      : socket(executor, local, options) {}
  /// As above, on `context`'s executor.
  template <
      class ExecutionContext, class Endpoint,
      std::enable_if_t<
          detail::is_execution_context<ExecutionContext> && std::is_same_v<Endpoint, endpoint_type>, int> = 0>
  rebound_socket(ExecutionContext& context, const Endpoint& local, const socket_options& options = {})
      : rebound_socket(executor_type(context.get_executor()), local, options) {}
  /// Takes `other`'s connection (any coverbs socket, whatever its executor type), as a
  /// `tcp::socket` is moved into one of another executor type.
  rebound_socket(socket&& other) noexcept  // NOLINT(google-explicit-constructor): as Asio's
      : socket(std::move(other)) {}

  /// The executor on which handlers run by default (the socket's own, so a moved-from socket
  /// keeps it).
  executor_type get_executor() const noexcept { return executor_type(socket::get_executor()); }
  /// This socket, as the lowest layer under stream wrappers.
  rebound_socket& lowest_layer() noexcept { return *this; }
  /// As above.
  const rebound_socket& lowest_layer() const noexcept { return *this; }

  // The members below are socket's, with this executor's default completion token.

  /// As `socket::async_connect`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_connect(const endpoint_type& peer, Token&& token = Token()) {
    return socket::async_connect(peer, std::forward<Token>(token));
  }
  /// As `socket::async_read_some`.
  template <class MutableBufferSequence, class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token = Token()) {
    return socket::async_read_some(buffers, std::forward<Token>(token));
  }
  /// As `socket::async_write_some`.
  template <class ConstBufferSequence, class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token = Token()) {
    return socket::async_write_some(buffers, std::forward<Token>(token));
  }
  /// As `socket::async_send` (one message).
  template <class ConstBufferSequence, class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_send(const ConstBufferSequence& buffers, Token&& token = Token()) {
    return socket::async_send(buffers, std::forward<Token>(token));
  }
  /// As `socket::async_receive` (one message).
  template <class MutableBufferSequence, class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_receive(const MutableBufferSequence& buffers, Token&& token = Token()) {
    return socket::async_receive(buffers, std::forward<Token>(token));
  }
  /// As `socket::async_send` with message flags.
  template <class ConstBufferSequence, class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_send(const ConstBufferSequence& buffers, message_flags flags, Token&& token = Token()) {
    return socket::async_send(buffers, flags, std::forward<Token>(token));
  }
  /// As `socket::async_receive` with message flags.
  template <class MutableBufferSequence, class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_receive(const MutableBufferSequence& buffers, message_flags flags, Token&& token = Token()) {
    return socket::async_receive(buffers, flags, std::forward<Token>(token));
  }
  /// As `socket::async_wait`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_wait(wait_type what, Token&& token = Token()) {
    return socket::async_wait(what, std::forward<Token>(token));
  }
  /// As `socket::async_read` (RDMA READ).
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_read(const verbs::local_buffer& local, const remote_buffer& remote, Token&& token = Token()) {
    return socket::async_read(local, remote, std::forward<Token>(token));
  }
  /// As `socket::async_write` (RDMA WRITE).
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_write(const verbs::local_buffer& local, const remote_buffer& remote, Token&& token = Token()) {
    return socket::async_write(local, remote, std::forward<Token>(token));
  }
  /// As `socket::async_write_with_immediate`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_write_with_immediate(const verbs::local_buffer& local, const remote_buffer& remote,
                                  std::uint32_t immediate, Token&& token = Token()) {
    return socket::async_write_with_immediate(local, remote, immediate, std::forward<Token>(token));
  }
  /// As `socket::async_receive_immediate`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_receive_immediate(Token&& token = Token()) {
    return socket::async_receive_immediate(std::forward<Token>(token));
  }
  /// As `socket::async_fetch_add`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_fetch_add(const verbs::local_buffer& local, const remote_buffer& remote, std::uint64_t add,
                       Token&& token = Token()) {
    return socket::async_fetch_add(local, remote, add, std::forward<Token>(token));
  }
  /// As `socket::async_compare_swap`.
  template <class Token = boost::asio::default_completion_token_t<Executor>>
  auto async_compare_swap(const verbs::local_buffer& local, const remote_buffer& remote,
                          std::uint64_t compare, std::uint64_t swap, Token&& token = Token()) {
    return socket::async_compare_swap(local, remote, compare, swap, std::forward<Token>(token));
  }
};

}  // namespace coverbs
