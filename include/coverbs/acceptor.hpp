// coverbs::acceptor: accepts RDMA and TCP connections with the shape of
// boost::asio::ip::tcp::acceptor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "coverbs/detail/socket_option.hpp"
#include "coverbs/socket.hpp"

namespace coverbs {

namespace detail {
class acceptor_impl;
using accept_handler = boost::asio::any_completion_handler<void(error_code, connection)>;
/// Takes the next connection, its stream built on `socket_executor` (of `impl`'s context);
/// returns the accept's number for cancel_accept.
std::uint64_t async_accept(const std::shared_ptr<acceptor_impl>& impl, accept_handler handler,
                           const boost::asio::any_io_executor& socket_executor);
/// Ends accept number `id` with operation_aborted where it has not taken a connection yet,
/// on the acceptor's executor; `reject` lets it reject a client whose handshake is under way.
void cancel_accept(const std::weak_ptr<acceptor_impl>& impl, std::uint64_t id, bool reject);
/// An executor a socket can be made with (a legacy one, such as io_context::strand, cannot).
template <class T>
constexpr bool is_io_executor = (boost::asio::execution::is_executor<T>::value ||
                                 boost::asio::is_executor<T>::value) &&
                                std::is_convertible_v<T, boost::asio::any_io_executor>;
// An execution context and a bool: the arguments of tcp::acceptor's reuse_address constructor.
template <class ExecutionContext, class Bool>
constexpr bool context_and_flag =
    std::conjunction_v<std::bool_constant<is_execution_context<ExecutionContext>>, std::is_same<Bool, bool>>;
}  // namespace detail

template <class Executor>
class rebound_acceptor;

/// Listens on an address and port and yields connected sockets, like
/// `boost::asio::ip::tcp::acceptor`. With `transport::automatic` (the default) it listens
/// with rdma_cm and with TCP on the same port number, so RDMA and TCP clients are served by
/// one acceptor; `transport::rdma` or `transport::tcp` listen on one only. Should the RDMA
/// device of the address it is bound to go away (rdma_cm's DEVICE_REMOVAL, seen by the next
/// accept), an automatic acceptor serves TCP alone from then on and an RDMA-only one fails its
/// accepts with `no_such_device`; on the any address rdma_cm goes on through the devices left.
/// With `socket_options::max_connections` it keeps at most that many connections open and turns
/// further clients away at once (they see `connection_refused`) while it goes on serving.
/// (`acceptor::max_connections`, from `socket_base`, is Asio's old name for SOMAXCONN, not
/// this limit.)
class acceptor : public boost::asio::socket_base {
 public:
  using executor_type = boost::asio::any_io_executor;
  using protocol_type = boost::asio::ip::tcp;
  using endpoint_type = boost::asio::ip::tcp::endpoint;
  /// This acceptor with another executor type, as `tcp::acceptor::rebind_executor`: what
  /// `asio::use_awaitable_t<>::as_default_on_t<coverbs::acceptor>` names (rebound_acceptor.hpp).
  template <class OtherExecutor>
  struct rebind_executor {
    using other = std::conditional_t<std::is_same_v<OtherExecutor, executor_type>, acceptor,
                                     rebound_acceptor<OtherExecutor>>;
  };

  /// Opens, binds to `endpoint` (port 0: the system picks one) and listens. Throws
  /// boost::system::system_error; with `transport::automatic` a missing RDMA stack only
  /// means TCP alone.
  acceptor(const executor_type& executor, const endpoint_type& endpoint, const socket_options& options = {},
           bool reuse_address = true);
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  acceptor(ExecutionContext& context, const endpoint_type& endpoint, const socket_options& options = {},
           bool reuse_address = true)
      : acceptor(context.get_executor(), endpoint, options, reuse_address) {}
  /// As above with default socket options, in the shape of `tcp::acceptor(context,
  /// endpoint, reuse_address)`.
  /// (Only a `bool` chooses it: `acceptor(io, endpoint, {})` keeps meaning default options.)
  template <class ExecutionContext, class Bool,
            std::enable_if_t<detail::context_and_flag<ExecutionContext, Bool>, int> = 0>
  acceptor(ExecutionContext& context, const endpoint_type& endpoint, Bool reuse_address)
      : acceptor(context.get_executor(), endpoint, socket_options(), reuse_address) {}
  /// As above, on `executor`.
  template <class Bool, std::enable_if_t<std::is_same_v<Bool, bool>, int> = 0>
  acceptor(const executor_type& executor, const endpoint_type& endpoint, Bool reuse_address)
      : acceptor(executor, endpoint, socket_options(), reuse_address) {}
  /// Opened for `protocol`, as `tcp::acceptor(context, protocol)`: options, `bind` and
  /// `listen` follow.
  acceptor(const executor_type& executor, const protocol_type& protocol, const socket_options& options = {})
      : acceptor(executor, options) {
    open(protocol);
  }
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  acceptor(ExecutionContext& context, const protocol_type& protocol, const socket_options& options = {})
      : acceptor(context.get_executor(), protocol, options) {}
  /// Not yet open: set it up step by step with `open`, `set_option`, `bind` and `listen`, as
  /// a `tcp::acceptor` made from a context alone.
  explicit acceptor(const executor_type& executor, const socket_options& options = {});
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  explicit acceptor(ExecutionContext& context, const socket_options& options = {})
      : acceptor(context.get_executor(), options) {}
  /// Takes `other`'s listener; `other` is left closed, on the same executor.
  acceptor(acceptor&& other) noexcept;
  /// Closes this acceptor, then takes `other`'s listener.
  acceptor& operator=(acceptor&& other) noexcept;
  /// Closes; pending accepts end with operation_aborted.
  ~acceptor();

  /// The executor on which handlers run by default.
  executor_type get_executor() const noexcept { return executor_; }
  /// Opens the acceptor (a TCP socket where it listens on TCP); `already_open` if open.
  void open(const protocol_type& protocol = protocol_type::v4());
  /// As above, with the error in `ec`.
  void open(const protocol_type& protocol, error_code& ec);
  /// Sets an option, as `tcp::acceptor::set_option`. It applies to the TCP listener; an
  /// acceptor for RDMA alone takes `reuse_address` and `tcp::no_delay`, which change nothing
  /// (rdma_cm's ports are free again at once; RDMA never holds a send back), and fails other
  /// options with `operation_not_supported`. `bad_descriptor` when not open.
  template <class SettableSocketOption>
  void set_option(const SettableSocketOption& option) {
    error_code ec;
    set_option(option, ec);
    detail::throw_if(ec, "set_option");
  }
  /// As above, with the error in `ec`.
  template <class SettableSocketOption>
  void set_option(const SettableSocketOption& option, error_code& ec) {
    auto* tcp = tcp_listener(ec);
    if (!ec) detail::set_option_on(tcp, option, ec);
  }
  /// Reads an option, as `tcp::acceptor::get_option`: the TCP listener's value; for RDMA alone
  /// `reuse_address` and `tcp::no_delay` read as on, and other options fail with
  /// `operation_not_supported`. `bad_descriptor` when not open.
  template <class GettableSocketOption>
  void get_option(GettableSocketOption& option) const {
    error_code ec;
    get_option(option, ec);
    detail::throw_if(ec, "get_option");
  }
  /// As above, with the error in `ec`.
  template <class GettableSocketOption>
  void get_option(GettableSocketOption& option, error_code& ec) const {
    const auto* tcp = tcp_listener(ec);
    if (!ec) detail::get_option_from(tcp, option, ec);
  }
  /// Binds to `endpoint` (port 0: the system picks one; with `transport::automatic` rdma_cm
  /// then takes the same port number, or the acceptor serves TCP alone).
  void bind(const endpoint_type& endpoint);
  /// As above, with the error in `ec`.
  void bind(const endpoint_type& endpoint, error_code& ec);
  /// Starts listening; connections wait, up to `backlog` (capped by the system), for
  /// `async_accept`, which fails with `invalid_argument` before this. Not bound yet, it binds
  /// first to the any address of open()'s family and a port the system picks, as listen(2).
  void listen(int backlog = max_listen_connections);
  /// As above, with the error in `ec`.
  void listen(int backlog, error_code& ec);
  /// True from `open` (or a constructor given an endpoint) until closed.
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The bound address and port (the TCP listener's, where there is one); before bind(), the
  /// any address of open()'s family and port 0. Throws `bad_descriptor` when not open.
  endpoint_type local_endpoint() const;
  /// As above, with the error in `ec`.
  endpoint_type local_endpoint(error_code& ec) const;
  /// True when RDMA clients can connect once it listens (an rdma_cm id is bound; false again
  /// once an automatic acceptor's device has gone).
  bool accepts_rdma() const noexcept;
  /// True when TCP clients can connect once it listens.
  bool accepts_tcp() const noexcept;
  /// Stops listening; pending accepts end with operation_aborted.
  void close();
  /// As above, reporting through `ec` (closing never fails today).
  void close(error_code& ec);
  /// Ends pending accepts with operation_aborted; the acceptor stays open and the next accept
  /// takes a client that comes meanwhile (over RDMA if it comes within rdma_cm's minute).
  /// Nothing is accepted while none waits, so the context runs out of work once the
  /// handshakes already under way have ended, as with `tcp::acceptor`. Throws `bad_descriptor`
  /// when closed.
  void cancel();
  /// As above, with `bad_descriptor` in `ec` when closed.
  void cancel(error_code& ec);

  /// The next connection, whichever transport it came by, as a new socket:
  /// `void(error_code, coverbs::socket)`. Call again for each further connection. Per-operation
  /// cancellation (e.g. `async_accept(...) || timer`), cancel() and close() end a waiting
  /// accept with operation_aborted, as for every form below, and an accept whose RDMA
  /// handshake is under way too (that client is rejected); a connection that comes later
  /// goes to the next accept.
  template <boost::asio::completion_token_for<void(error_code, socket)> CompletionToken =
                detail::default_socket_token>
  auto async_accept(CompletionToken&& token = detail::default_socket_token()) {
    return initiate_accept<void(error_code, socket)>(executor_, new_socket{options_},
                                                     std::forward<CompletionToken>(token));
  }
  /// As above, the socket's executor being `executor`: a strand (Beast's servers accept with
  /// `make_strand(io)`), or another `io_context`'s (one context per thread). The handler runs
  /// on the acceptor's, as with `tcp::acceptor`. The connection's own work (its completions,
  /// its TCP reads, its rdma_cm events) runs on `executor` too, so use the socket from there:
  /// dispatch to `socket.get_executor()` first, as Beast's sessions do. The acceptor's
  /// context has work until the accept completes, so its run() returns only after; destroy
  /// neither context while an accept onto the other is in progress (stopped, each may hold
  /// the other's objects in queued handlers, as with Asio's own accept onto another context).
  template <class Executor, class CompletionToken = detail::default_socket_token,
            std::enable_if_t<detail::is_io_executor<Executor>, int> = 0>
  auto async_accept(const Executor& executor, CompletionToken&& token = detail::default_socket_token()) {
    return initiate_accept<void(error_code, socket)>(executor_type(executor), new_socket{options_},
                                                     std::forward<CompletionToken>(token));
  }
  /// As above, on `context`'s executor.
  template <class ExecutionContext, class CompletionToken = detail::default_socket_token,
            std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  auto async_accept(ExecutionContext& context, CompletionToken&& token = detail::default_socket_token()) {
    return async_accept(context.get_executor(), std::forward<CompletionToken>(token));
  }
  /// As the forms above, and stores the client's address and port in `peer_endpoint` (which
  /// must outlive the operation).
  template <boost::asio::completion_token_for<void(error_code, socket)> CompletionToken =
                detail::default_socket_token>
  auto async_accept(endpoint_type& peer_endpoint, CompletionToken&& token = detail::default_socket_token()) {
    return initiate_accept<void(error_code, socket)>(executor_, new_socket{options_, &peer_endpoint},
                                                     std::forward<CompletionToken>(token));
  }
  /// As above, the socket's executor being `executor`.
  template <class Executor,
            boost::asio::completion_token_for<void(error_code, socket)> CompletionToken =
                detail::default_socket_token,
            std::enable_if_t<detail::is_io_executor<Executor>, int> = 0>
  auto async_accept(const Executor& executor, endpoint_type& peer_endpoint,
                    CompletionToken&& token = detail::default_socket_token()) {
    return initiate_accept<void(error_code, socket)>(
        executor_type(executor), new_socket{options_, &peer_endpoint}, std::forward<CompletionToken>(token));
  }
  /// As above, on `context`'s executor.
  template <class ExecutionContext,
            boost::asio::completion_token_for<void(error_code, socket)> CompletionToken =
                detail::default_socket_token,
            std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  auto async_accept(ExecutionContext& context, endpoint_type& peer_endpoint,
                    CompletionToken&& token = detail::default_socket_token()) {
    return async_accept(context.get_executor(), peer_endpoint, std::forward<CompletionToken>(token));
  }
  /// The next connection into `peer`, on `peer`'s executor (as above): `void(error_code)`.
  /// `peer` is closed first.
  template <class CompletionToken = detail::default_socket_token>
  auto async_accept(socket& peer, CompletionToken&& token = detail::default_socket_token()) {
    return initiate_accept<void(error_code)>(peer.get_executor(), into_peer{&peer, nullptr},
                                             std::forward<CompletionToken>(token));
  }
  /// As above, and stores the client's address and port in `peer_endpoint` (which must
  /// outlive the operation): `void(error_code)`.
  template <class CompletionToken = detail::default_socket_token>
  auto async_accept(socket& peer, endpoint_type& peer_endpoint,
                    CompletionToken&& token = detail::default_socket_token()) {
    return initiate_accept<void(error_code)>(peer.get_executor(), into_peer{&peer, &peer_endpoint},
                                             std::forward<CompletionToken>(token));
  }

  /// The next connection, as async_accept takes it, blocking as socket::connect() does: the
  /// acceptor's io_context runs on the calling thread meanwhile (beside any threads that run
  /// it), and inside one of its handlers the call fails with `would_block`. Throws
  /// boost::system::system_error.
  socket accept();
  /// As above, reporting failure through `ec` (the socket returned is then closed).
  socket accept(error_code& ec);
  /// As above, and stores the client's address and port in `peer_endpoint`.
  socket accept(endpoint_type& peer_endpoint);
  /// As above, reporting failure through `ec`.
  socket accept(endpoint_type& peer_endpoint, error_code& ec);
  /// The next connection into `peer` (closed first), blocking as above. Where `peer` belongs
  /// to another context, a thread must run that one, as for async_accept onto it.
  void accept(socket& peer);
  /// As above, reporting failure through `ec`.
  void accept(socket& peer, error_code& ec);
  /// As above, and stores the client's address and port in `peer_endpoint`.
  void accept(socket& peer, endpoint_type& peer_endpoint);
  /// As above, reporting failure through `ec`.
  void accept(socket& peer, endpoint_type& peer_endpoint, error_code& ec);

 private:
  // How an accept hands its connection to its handler: as a new socket ...
  struct new_socket {
    socket_options options;
    endpoint_type* peer_endpoint = nullptr;
    void start() const noexcept {}
    template <class Handler>
    auto operator()(Handler&& handler, const executor_type& socket_executor, error_code ec,
                    detail::connection c) const {
      if (!ec && peer_endpoint != nullptr) *peer_endpoint = c.remote;
      socket s(socket_executor, options);
      if (!ec) s.attach(std::move(c.stream), c.kind, c.local, c.remote);
      return boost::asio::append(std::forward<Handler>(handler), ec, std::move(s));
    }
  };
  // ... or in the caller's socket.
  struct into_peer {
    socket* peer;
    endpoint_type* peer_endpoint;
    void start() const noexcept { peer->close(); }
    template <class Handler>
    auto operator()(Handler&& handler, const executor_type&, error_code ec, detail::connection c) const {
      if (!ec && peer_endpoint != nullptr) *peer_endpoint = c.remote;
      if (!ec) peer->attach(std::move(c.stream), c.kind, c.local, c.remote);
      return boost::asio::append(std::forward<Handler>(handler), ec);
    }
  };
  // Every async_accept form: the connection is built on `socket_executor`, then handed over
  // on the handler's executor (the acceptor's by default).
  template <class Signature, class Deliver, class CompletionToken>
  auto initiate_accept(const executor_type& socket_executor, Deliver deliver, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, Signature>(
        [](auto handler, acceptor* self, const executor_type& socket_executor, Deliver deliver) {
          deliver.start();
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto done = [ex = self->executor_, socket_executor, deliver, h = std::move(handler)](
                          error_code ec, detail::connection c) mutable {
            boost::asio::get_associated_cancellation_slot(h).clear();
            auto hex = boost::asio::get_associated_executor(h, ex);
            boost::asio::dispatch(hex, deliver(std::move(h), socket_executor, ec, std::move(c)));
          };
          const std::uint64_t id =
              self->start_accept(detail::accept_handler(std::move(done)), socket_executor);
          // Per-operation cancellation (e.g. `async_accept(...) || timer`), of every type as
          // tcp::acceptor takes it: an accept still waiting ends; one whose RDMA handshake is
          // under way ends unless only `total` is asked (the client would be rejected); one
          // whose connection is on its way to it completes with it.
          if (slot.is_connected() && id != 0) {
            slot.assign([impl = std::weak_ptr(self->impl_), id](boost::asio::cancellation_type type) {
              using boost::asio::cancellation_type;
              if (type == cancellation_type::none) return;
              detail::cancel_accept(impl, id,
                                    (type & (cancellation_type::terminal | cancellation_type::partial)) !=
                                        cancellation_type::none);
            });
          }
        },
        token, this, socket_executor, std::move(deliver));
  }
  // Starts an accept; its number, or 0 where the acceptor is closed (the handler is posted).
  std::uint64_t start_accept(detail::accept_handler handler, const executor_type& socket_executor);
  // The TCP listener; null without one, and with `bad_descriptor` in `ec` when not open.
  boost::asio::ip::tcp::acceptor* tcp_listener(error_code& ec) const;

  executor_type executor_;
  socket_options options_;
  std::shared_ptr<detail::acceptor_impl> impl_;
};

}  // namespace coverbs

// Completes acceptor::rebind_executor wherever acceptor.hpp is included.
#include "coverbs/rebound_acceptor.hpp"  // IWYU pragma: export
