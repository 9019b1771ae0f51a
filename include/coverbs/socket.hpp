// coverbs::socket: a connected RDMA (or TCP fallback) stream with the shape of
// boost::asio::ip::tcp::socket, plus boundary-keeping messages.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "coverbs/completion_service.hpp"
#include "coverbs/detail/blocking_wait.hpp"
#include "coverbs/detail/connect.hpp"
#include "coverbs/detail/socket_option.hpp"
#include "coverbs/detail/stream_core.hpp"
#include "coverbs/detail/throw_error.hpp"
#include "coverbs/error.hpp"
#include "coverbs/registered_memory.hpp"

namespace coverbs {

/// Which network carries a socket.
enum class transport {
  automatic,  ///< RDMA where a device serves the address, else TCP
  rdma,
  tcp,
};

/// Settings of a socket (and of the sockets an acceptor produces).
struct socket_options {
  transport kind = transport::automatic;
  polling_mode mode = polling_mode::event;         ///< RDMA completion polling
  /// Adaptive mode's shortest and longest spin (see completion_options, whose defaults these are).
  std::chrono::microseconds spin = completion_options{}.spin;
  std::chrono::microseconds max_spin = completion_options{}.max_spin;
  std::uint16_t receive_buffers = 32;               ///< RDMA receive pool: buffers ...
  std::uint32_t buffer_size = 64 * 1024;            ///< ... of this size (also the message limit)
  // (At least one buffer of 256 B to 16 MiB, 1 GiB in all, which is what a peer accepts:
  // beyond that a connect or an acceptor's open fails with invalid_argument, on TCP too.)
  std::chrono::milliseconds resolve_timeout{2000};  ///< rdma_cm address and route resolution
  /// RDMA: an `async_send` of 16 KiB or more from one buffer registered on the connection goes
  /// out from that buffer, not a copy, and completes when the peer has acknowledged it: less
  /// latency for large requests and replies, but back-to-back sends then move one per round
  /// trip, where copied ones keep up to `receive_buffers` in flight. (TCP sends such messages
  /// from the caller's memory either way.) Like the other options, an accepted connection
  /// takes the acceptor's.
  bool zero_copy_messages = false;
  /// How long `close()` lets the bytes already written, and then the end of the stream, reach
  /// the peer before it drops the connection (as a lingering TCP close resets it). A peer that
  /// is gone or stopped could otherwise hold the connection (its QP and memory over RDMA) and
  /// keep `io_context::run` from returning, for ever. Zero drops it at once, as a close with
  /// SO_LINGER 0 does (it is not "no limit"). Over TCP this covers the frames the library
  /// still queues (while the kernel's buffer is full), which go out as the io_context runs;
  /// the kernel then sends what it holds.
  std::chrono::milliseconds close_timeout{10000};

  // Limits; 0 means none. Reaching one is an error the caller sees at once, never a wait.
  /// One-sided operations (reads, writes, atomics) a connection holds at once, queued or on the
  /// wire. Below it, operations beyond the queue depth wait for a slot; at it, a new one
  /// completes with `errc::too_many_operations` and starts nothing.
  std::size_t max_outstanding_operations = 0;
  /// Bytes `register_memory` may hold registered on a connection at once (local buffers
  /// included); past it `register_memory` fails with `errc::registration_limit`.
  std::size_t max_registered_bytes = 0;
  /// Acceptor only: connections it has accepted and the application has not closed yet. One
  /// more is turned away at once: an RDMA client's connect fails with `connection_refused`;
  /// over TCP the kernel has completed the client's connect already, so the connection is
  /// reset and the client's reads and writes end with `connection_refused`. The acceptor goes
  /// on serving, and a place frees when a socket it produced is closed.
  std::size_t max_connections = 0;
};

template <class Executor>
class rebound_socket;

class socket;

namespace detail {
/// Whether `T` is an execution context (an io_context, a thread_pool), as the constructors
/// that take one require.
template <class T>
constexpr bool is_execution_context = std::is_convertible_v<T&, boost::asio::execution_context&>;

/// A socket's pending connect: what cancels it, and the socket it connects, which a move of
/// that socket updates; null once the socket gave up on it (closed, destroyed, or connecting
/// anew), so that its completion never touches a socket that may be gone.
struct connect_attempt : std::enable_shared_from_this<connect_attempt> {
  explicit connect_attempt(socket* owner, boost::asio::any_io_executor executor)
      : owner(owner), executor(std::move(executor)) {}
  /// Raises `signal`: at once on a thread running `executor`'s io_context, else from a handler
  /// posted there, which keeps the attempt alive. (co_spawn's cancellation handler, raised
  /// elsewhere, posts its own emit holding a pointer into this signal, which the connect's end
  /// could free first: a socket closed between two run_one() calls crashed so.)
  void cancel(boost::asio::cancellation_type type);

  boost::asio::cancellation_signal signal;
  socket* owner;
  const boost::asio::any_io_executor executor;  ///< the socket's, where the connect runs
};
}  // namespace detail

/// A stream socket over RDMA or TCP. Mirrors `boost::asio::ip::tcp::socket` for the common
/// subset (same constructors, member names, completion signatures, and Asio's error codes with
/// the differences docs/porting-from-asio.md lists), so it is an AsyncReadStream and
/// AsyncWriteStream: `asio::async_read`, `async_write` and `async_read_until` work on it
/// unchanged, with any completion token. One read, one write, one async_send, one
/// async_receive and one async_receive_immediate may be outstanding at a time; another of the
/// same kind completes at once with `in_progress` (Asio's socket queues it). As with Asio, a
/// socket may be closed, destroyed or moved with operations outstanding (closed or destroyed,
/// they end as close() ends them), but must exist when one starts (a lazy one, e.g.
/// `asio::deferred`, acts on the socket as it is then), and is not thread-safe: use it from
/// its executor (or strand), or while nothing runs that.
class socket : public boost::asio::socket_base {
 public:
  using executor_type = boost::asio::any_io_executor;
  using protocol_type = boost::asio::ip::tcp;
  using endpoint_type = boost::asio::ip::tcp::endpoint;
  /// This socket with another executor type, as `tcp::socket::rebind_executor`: what
  /// `asio::use_awaitable_t<>::as_default_on_t<coverbs::socket>` names (rebound_socket.hpp).
  template <class OtherExecutor>
  struct rebind_executor {
    using other = std::conditional_t<std::is_same_v<OtherExecutor, executor_type>, socket,
                                     rebound_socket<OtherExecutor>>;
  };

  /// A closed socket whose operations run on `executor`.
  explicit socket(const executor_type& executor, const socket_options& options = {})
      : executor_(executor), options_(options) {}
  /// A closed socket whose operations run on `context`'s executor.
  template <class ExecutionContext>
    requires detail::is_execution_context<ExecutionContext>
  explicit socket(ExecutionContext& context, const socket_options& options = {})
      : socket(context.get_executor(), options) {}
  /// Opened for `protocol`, as `tcp::socket(context, protocol)`: options and `bind` may follow.
  socket(const executor_type& executor, const protocol_type& protocol, const socket_options& options = {})
      : socket(executor, options) {
    open(protocol);
  }
  /// As above, on `context`'s executor.
  template <class ExecutionContext, std::enable_if_t<detail::is_execution_context<ExecutionContext>, int> = 0>
  socket(ExecutionContext& context, const protocol_type& protocol, const socket_options& options = {})
      : socket(context.get_executor(), protocol, options) {}
  /// Opened and bound to `local`, as `tcp::socket(context, endpoint)`: connects leave from it.
  /// (A template, so that `socket(context, {})` keeps meaning default options.)
  template <class Endpoint, std::enable_if_t<std::is_same_v<Endpoint, endpoint_type>, int> = 0>
  socket(const executor_type& executor, const Endpoint& local, const socket_options& options = {})
      : socket(executor, local.protocol(), options) {
    bind(local);
  }
  /// As above, on `context`'s executor.
  template <
      class ExecutionContext, class Endpoint,
      std::enable_if_t<
          detail::is_execution_context<ExecutionContext> && std::is_same_v<Endpoint, endpoint_type>, int> = 0>
  socket(ExecutionContext& context, const Endpoint& local, const socket_options& options = {})
      : socket(context.get_executor(), local, options) {}
  /// Takes `other`'s connection; `other` is left closed, on the same executor and options.
  socket(socket&& other) noexcept;
  /// Closes this socket, then takes `other`'s connection.
  socket& operator=(socket&& other) noexcept;
  /// Closes the socket, as close() does.
  ~socket();

  /// The executor on which handlers run by default.
  executor_type get_executor() const noexcept { return executor_; }
  /// The type of `lowest_layer()`: this socket's own, as for `tcp::socket`.
  using lowest_layer_type = socket;
  /// This socket, as the lowest layer under stream wrappers (e.g.
  /// `asio::ssl::stream<coverbs::socket>`), as with `tcp::socket`.
  socket& lowest_layer() noexcept { return *this; }
  /// As above.
  const socket& lowest_layer() const noexcept { return *this; }
  /// True once connected (or accepted) and until closed.
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The transport in use (`automatic` while closed).
  transport transport_in_use() const noexcept { return in_use_; }
  /// The options this socket was made with.
  const socket_options& options() const noexcept { return options_; }

  /// Closes the connection; pending operations end with operation_aborted, a pending connect
  /// too (as when a timer closes an Asio socket whose connect takes too long), one-sided ones
  /// with `wc_errc::flushed` (mostly: one the device had finished reports its result).
  /// Forgets bind().
  void close();
  /// As above, reporting through `ec` (closing never fails today).
  void close(error_code& ec);
  /// Opens the socket for `protocol` before a bind(), as `tcp::socket::open` (`already_open`
  /// if it is open, or connected). The connection itself is made by connect, so is_open()
  /// stays false until then; bind() without open() is taken too.
  void open(const protocol_type& protocol = protocol_type::v4());
  /// As above, reporting through `ec`.
  void open(const protocol_type& protocol, error_code& ec);
  /// Connects from `local` (port 0: the system picks one), as `tcp::socket::bind` before a
  /// connect: over RDMA the address chooses the device the connection leaves from, over TCP it
  /// is the source address. An address this machine lacks fails at once
  /// (`address_not_available`), a port in use at connect (`address_in_use`, over RDMA after
  /// a second of retries); a connected or bound socket, or an address of another family than
  /// open()'s, gives `invalid_argument`. The binding holds for every connect until one
  /// succeeds or close() is called, so each endpoint coverbs::async_connect tries leaves from
  /// it. Over RDMA a connection from a chosen port lets other rdma_cm ids that ask for reuse
  /// (RDMA_OPTION_ID_REUSEADDR) share the port.
  void bind(const endpoint_type& local);
  /// As above, reporting through `ec`.
  void bind(const endpoint_type& local, error_code& ec);
  /// Shuts down sending (the peer reads eof), receiving (reads here end with eof once what has
  /// arrived is taken, as after SHUT_RD on Linux; the peer is not told), or both.
  void shutdown(boost::asio::socket_base::shutdown_type what);
  /// As above, with `not_connected` in `ec` before connecting, `bad_descriptor` when closed.
  void shutdown(boost::asio::socket_base::shutdown_type what, error_code& ec);
  /// Ends pending operations with operation_aborted, a pending connect too (as on
  /// `tcp::socket`); the connection stays usable, and a cancelled connect keeps open() and
  /// bind() for the next. Two kinds go on: a write or send whose bytes go from the caller's
  /// memory (over TCP 16 KiB or more; over RDMA from registered memory, or a zero-copy
  /// message), which ends once they are out, and one-sided operations: a posted work request
  /// can only be recalled by failing the connection (cancel one through its own slot).
  void cancel();
  /// As above, with `bad_descriptor` in `ec` unless open()ed, bound, connecting or connected.
  void cancel(error_code& ec);
  /// The local address and port. Between open() (or bind()) and connect: what bind() was
  /// given, else the family's any address and port 0 (the peer's family during a connect
  /// without either); unlike `tcp::socket`, a bind to port 0 reads port 0 until the connect
  /// picks one. Throws `bad_descriptor` unless open()ed, bound, connecting or connected.
  endpoint_type local_endpoint() const;
  /// As above, with the error in `ec`.
  endpoint_type local_endpoint(error_code& ec) const;
  /// The peer's address and port; throws `not_connected` before connecting, `bad_descriptor`
  /// when closed.
  endpoint_type remote_endpoint() const;
  /// As above, with the error in `ec`.
  endpoint_type remote_endpoint(error_code& ec) const;

  /// Bytes received and not yet read, which the next `async_read_some` takes at once, as
  /// `tcp::socket::available`. Over TCP more may wait in the kernel, not counted yet: where
  /// nothing is reading, the call starts a read, so that a later one counts them. Messages
  /// (`async_receive`) are not counted. Before connecting (open()ed or bound) 0; throws
  /// `bad_descriptor` when closed.
  std::size_t available() const;
  /// As above, with the error in `ec`.
  std::size_t available(error_code& ec) const;

  /// Whether read_some, write_some, send and receive end with `would_block` instead of
  /// waiting, as `tcp::socket::non_blocking`; asynchronous operations (and connect and wait)
  /// are not affected. Made from a handler of the socket's context other than the socket's
  /// own executor's (another strand's), they always give `would_block`. Throws
  /// `bad_descriptor` unless connected, open()ed or bound; close() turns it off.
  void non_blocking(bool mode);
  /// As above, reporting through `ec`.
  void non_blocking(bool mode, error_code& ec);
  /// Whether the calls above are non-blocking.
  bool non_blocking() const noexcept { return non_blocking_; }

  /// Waits until the socket is ready to read, to write, or has an error, as
  /// `tcp::socket::async_wait`: readable once bytes, end of stream or a failure is there (the
  /// next read_some does not wait) or a message is (the next receive does not), writable once
  /// a write takes bytes at once or fails at once, in error once the connection has failed.
  /// Completion: `void(error_code)`, `operation_aborted` when cancelled or closed; one wait of
  /// each type at a time (`in_progress`); `not_connected` before connecting (where
  /// `tcp::socket`'s completes at once), `bad_descriptor` when closed.
  template <class CompletionToken = detail::default_socket_token>
  auto async_wait(wait_type what, CompletionToken&& token = detail::default_socket_token()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [](auto handler, socket* self, wait_type what) {
          if (!self->impl_) return self->refuse(std::move(handler));
          self->impl_->wait(
              what, detail::wait_handler(std::move(handler), self->executor_, self->impl_->allocator()));
        },
        token, this, what);
  }
  /// As above, blocking as connect() does. Throws boost::system::system_error.
  void wait(wait_type what);
  /// As above, reporting through `ec`.
  void wait(wait_type what, error_code& ec);

  /// Sets a socket option, as `tcp::socket::set_option` (e.g. `tcp::no_delay`,
  /// `socket_base::keep_alive`). Over TCP it applies to the connection's socket. Over RDMA
  /// `tcp::no_delay` and `socket_base::reuse_address` are taken and change nothing (RDMA never
  /// holds a send back to coalesce it, and rdma_cm has no TIME_WAIT: a port is free once its
  /// connection's id is gone); any other option throws `operation_not_supported`. Between
  /// open() (or bind()) and connect the option is kept and set on the connection (over TCP
  /// before its bind and connect), and refused at once where a transport the socket may use
  /// refuses it. Throws `bad_descriptor` when neither open nor connected, or while a connect
  /// is under way (what else a connection needs is in `socket_options`).
  template <class SettableSocketOption>
  void set_option(const SettableSocketOption& option) {
    error_code ec;
    set_option(option, ec);
    detail::throw_if(ec, "set_option");
  }
  /// As above, reporting through `ec`.
  template <class SettableSocketOption>
  void set_option(const SettableSocketOption& option, error_code& ec) {
    if (const auto family = chosen_family(); family && !impl_ && !connecting_) {
      return keep_option(option.level(*family), option.name(*family), option.data(*family),
                         option.size(*family), ec);
    }
    auto* tcp = tcp_socket(ec);
    if (!ec) detail::set_option_on(tcp, option, ec);
  }
  /// Reads a socket option, as `tcp::socket::get_option`: over TCP the connection's socket's
  /// value; over RDMA `tcp::no_delay` and `reuse_address` are always true and other options
  /// throw `operation_not_supported`. Between open() (or bind()) and connect: RDMA's answers,
  /// or over TCP (and under `automatic`, for the options RDMA takes) what `tcp::socket` would
  /// read before connecting: what set_option kept, else the kernel's default, with `no_delay`
  /// on as the library sets it; the same during a connect (of the peer's family where neither
  /// open() nor bind() chose one). Throws `bad_descriptor` unless open()ed, bound, connecting or
  /// connected.
  template <class GettableSocketOption>
  void get_option(GettableSocketOption& option) const {
    error_code ec;
    get_option(option, ec);
    detail::throw_if(ec, "get_option");
  }
  /// As above, reporting through `ec`.
  template <class GettableSocketOption>
  void get_option(GettableSocketOption& option, error_code& ec) const {
    if (const auto family = chosen_family(); family && !impl_) {
      ec = detail::read_option(option, *family, [this](int level, int name, void* value, std::size_t& size) {
        return kept_option(level, name, value, size);
      });
      return;
    }
    const auto* tcp = tcp_socket(ec);
    if (!ec) detail::get_option_from(tcp, option, ec);
  }

  /// Connects to `peer` (closing any current connection first) over the transport the options
  /// choose: RDMA through rdma_cm where a device serves the route and the peer accepts RDMA,
  /// else TCP. Completion: `void(error_code)`, with Asio's codes (connection_refused, ...);
  /// over RDMA also `errc::stale_connection` when the peer's CM rejects the request as stale
  /// (it holds a connection from the QP's number) eight times running: after each such
  /// reject it tries again at once with a new QP, as the CM drops the old connection.
  /// Terminal cancellation (e.g. racing a timer with `||`), `cancel()` or `close()` abandons
  /// the attempt: whatever was half set up is torn down, and the completion is
  /// `operation_aborted` (after a cancel, unless the connect had completed already). As with
  /// Asio, the socket may be destroyed meanwhile (the attempt is abandoned so) or moved (the
  /// socket moved to is connected).
  template <class CompletionToken = detail::default_socket_token>
  auto async_connect(const endpoint_type& peer, CompletionToken&& token = detail::default_socket_token()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [](auto handler, socket* self, const endpoint_type& peer) {
          self->close_connection();
          self->remote_ = peer;  // the family a socket neither open()ed nor bound has meanwhile
          // The attempt listens to a signal of its own, which close() and the handler's own
          // slot (where it has one) both raise.
          auto attempt = std::make_shared<detail::connect_attempt>(self, self->executor_);
          self->connecting_ = attempt;
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          if (slot.is_connected()) {
            slot.assign([attempt](boost::asio::cancellation_type type) { attempt->cancel(type); });
          }
          auto done = [attempt, io = self->executor_, h = std::move(handler)](error_code ec,
                                                                              detail::connection c) mutable {
            boost::asio::get_associated_cancellation_slot(h).clear();
            connect_done(*attempt, ec, std::move(c));
            auto ex = boost::asio::get_associated_executor(h, io);
            boost::asio::dispatch(ex, boost::asio::append(std::move(h), ec));
          };
          detail::async_connect(self->executor_, peer, self->setup(), self->options_,
                                detail::connect_handler(boost::asio::bind_cancellation_slot(
                                    attempt->signal.slot(), std::move(done))));
        },
        token, this, peer);
  }

  /// Connects to `peer` as async_connect does, blocking until done. A connection completes
  /// through its execution context, so the socket's io_context runs on the calling thread
  /// meanwhile (beside any threads that run it; a thread_pool is left to its own threads, and
  /// on one that has stopped a call whose operation had not started ends with
  /// operation_aborted);
  /// inside that context (from a handler) the call fails with `would_block` instead. Throws
  /// boost::system::system_error. An exception another handler throws meanwhile comes out of
  /// the call as out of run(): at once where the call's operation had not started, else once
  /// the operation, cancelled, has ended (unless it succeeded all the same: then the call
  /// returns and the exception comes out of the context's next run; see
  /// docs/porting-from-asio.md).
  void connect(const endpoint_type& peer);
  /// As above, reporting failure through `ec`.
  void connect(const endpoint_type& peer, error_code& ec);
  /// Reads at least one byte, blocking as connect() does: for boost::asio::read and
  /// read_until, and code written against tcp::socket's blocking calls. Throws
  /// boost::system::system_error (`eof` at the end of the stream).
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers) {
    return throwing("read_some", [&](error_code& ec) { return read_some(buffers, ec); });
  }
  /// As above, reporting failure through `ec`.
  template <class MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    if (non_blocking_) {
      return at_once(ec, [&](auto& impl, error_code& e) {
        return impl.read_now(detail::mutable_buffer_list(buffers), e);
      });
    }
    return blocking(ec, [&](auto handler) { async_read_some(buffers, std::move(handler)); });
  }
  /// Writes at least one byte, blocking as connect() does (boost::asio::write). Throws
  /// boost::system::system_error.
  template <class ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers) {
    return throwing("write_some", [&](error_code& ec) { return write_some(buffers, ec); });
  }
  /// As above, reporting failure through `ec`.
  template <class ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    if (non_blocking_) {
      return at_once(ec, [&](auto& impl, error_code& e) {
        return impl.write_now(detail::const_buffer_list(buffers), false, e);
      });
    }
    return blocking(ec, [&](auto handler) { async_write_some(buffers, std::move(handler)); });
  }
  /// Sends one message, blocking as connect() does (see async_send). Throws
  /// boost::system::system_error.
  template <class ConstBufferSequence>
  std::size_t send(const ConstBufferSequence& buffers) {
    return throwing("send", [&](error_code& ec) { return send(buffers, ec); });
  }
  /// As above, reporting failure through `ec`.
  template <class ConstBufferSequence>
  std::size_t send(const ConstBufferSequence& buffers, error_code& ec) {
    if (non_blocking_) {
      return at_once(ec, [&](auto& impl, error_code& e) {
        return impl.write_now(detail::const_buffer_list(buffers), true, e);
      });
    }
    return blocking(ec, [&](auto handler) { async_send(buffers, std::move(handler)); });
  }
  /// As send(buffers); `flags` other than 0 give `operation_not_supported` (no out-of-band
  /// data, peeking or routing choices: a message is all or nothing on either transport).
  template <class ConstBufferSequence>
  std::size_t send(const ConstBufferSequence& buffers, message_flags flags) {
    return throwing("send", [&](error_code& ec) { return send(buffers, flags, ec); });
  }
  /// As above, reporting failure through `ec`.
  template <class ConstBufferSequence>
  std::size_t send(const ConstBufferSequence& buffers, message_flags flags, error_code& ec) {
    ec = flags != 0 && impl_ ? error_code(boost::asio::error::operation_not_supported) : error_code();
    return ec ? 0 : send(buffers, ec);
  }
  /// Receives the next whole message, blocking as connect() does (see async_receive). Throws
  /// boost::system::system_error.
  template <class MutableBufferSequence>
  std::size_t receive(const MutableBufferSequence& buffers) {
    return throwing("receive", [&](error_code& ec) { return receive(buffers, ec); });
  }
  /// As above, reporting failure through `ec`.
  template <class MutableBufferSequence>
  std::size_t receive(const MutableBufferSequence& buffers, error_code& ec) {
    if (non_blocking_) {
      return at_once(ec, [&](auto& impl, error_code& e) {
        return impl.receive_now(detail::mutable_buffer_list(buffers), e);
      });
    }
    return blocking(ec, [&](auto handler) { async_receive(buffers, std::move(handler)); });
  }
  /// As receive(buffers); `flags` other than 0 give `operation_not_supported`.
  template <class MutableBufferSequence>
  std::size_t receive(const MutableBufferSequence& buffers, message_flags flags) {
    return throwing("receive", [&](error_code& ec) { return receive(buffers, flags, ec); });
  }
  /// As above, reporting failure through `ec`.
  template <class MutableBufferSequence>
  std::size_t receive(const MutableBufferSequence& buffers, message_flags flags, error_code& ec) {
    ec = flags != 0 && impl_ ? error_code(boost::asio::error::operation_not_supported) : error_code();
    return ec ? 0 : receive(buffers, ec);
  }

  /// Reads at least one byte into `buffers`. Completion: `void(error_code, std::size_t)`;
  /// `asio::error::eof` once the peer has shut down and everything was read.
  template <class MutableBufferSequence, class CompletionToken = detail::default_socket_token>
  auto async_read_some(const MutableBufferSequence& buffers,
                       CompletionToken&& token = detail::default_socket_token()) {
    return initiate<detail::mutable_buffer_list>(&detail::stream_core::read_some, buffers,
                    std::forward<CompletionToken>(token));
  }
  /// Writes at least one byte of `buffers`. Completion: `void(error_code, std::size_t)`.
  template <class ConstBufferSequence, class CompletionToken = detail::default_socket_token>
  auto async_write_some(const ConstBufferSequence& buffers,
                        CompletionToken&& token = detail::default_socket_token()) {
    return initiate_write<false>(buffers, std::forward<CompletionToken>(token));
  }
  /// Sends `buffers` as one message, which the peer's `async_receive` gets whole (unlike
  /// tcp::socket's alias of write_some). At most the peer's `buffer_size` over RDMA, this
  /// socket's own over TCP (1 MiB at most); longer ones fail with `message_size`, and one
  /// gathered from more than 16 non-empty buffers with `invalid_argument`. See
  /// `socket_options::zero_copy_messages` for large messages from registered memory.
  template <class ConstBufferSequence, class CompletionToken = detail::default_socket_token>
  auto async_send(const ConstBufferSequence& buffers,
                  CompletionToken&& token = detail::default_socket_token()) {
    return initiate_write<true>(buffers, std::forward<CompletionToken>(token));
  }
  /// As async_send(buffers, token); `flags` other than 0 give `operation_not_supported`.
  template <class ConstBufferSequence, class CompletionToken = detail::default_socket_token>
  auto async_send(const ConstBufferSequence& buffers, message_flags flags,
                  CompletionToken&& token = detail::default_socket_token()) {
    return with_flags(
        flags, [this, buffers](auto handler) { async_send(buffers, std::move(handler)); },
        std::forward<CompletionToken>(token));
  }
  /// Receives the next whole message. A buffer too small for it gives `message_size` and the
  /// message stays queued for a larger one; more than 16 non-empty buffers, `invalid_argument`.
  template <class MutableBufferSequence, class CompletionToken = detail::default_socket_token>
  auto async_receive(const MutableBufferSequence& buffers,
                     CompletionToken&& token = detail::default_socket_token()) {
    return initiate<detail::mutable_buffer_list>(&detail::stream_core::receive_message, buffers,
                    std::forward<CompletionToken>(token));
  }
  /// As async_receive(buffers, token); `flags` other than 0 give `operation_not_supported`.
  template <class MutableBufferSequence, class CompletionToken = detail::default_socket_token>
  auto async_receive(const MutableBufferSequence& buffers, message_flags flags,
                     CompletionToken&& token = detail::default_socket_token()) {
    return with_flags(
        flags, [this, buffers](auto handler) { async_receive(buffers, std::move(handler)); },
        std::forward<CompletionToken>(token));
  }

  /// Registers `memory` so the peer can reach it through this connection with `rights`
  /// (remote_read, remote_write, remote_atomic; local_write is implied). Throws
  /// `not_connected` before connecting, `bad_descriptor` when closed,
  /// `errc::registration_limit` past `options().max_registered_bytes`, `value_too_large` for
  /// 4 GiB or more (a remote_buffer's length is 32 bits); the device's refusal over RDMA, the
  /// kernel's random source's (getrandom's errno) over TCP.
  registered_memory register_memory(std::span<std::byte> memory, verbs::access rights);
  /// As above, reporting through `ec`; on failure the result registers nothing.
  registered_memory register_memory(std::span<std::byte> memory, verbs::access rights, error_code& ec);

  /// RDMA READ of `local.size` bytes from the start of `remote` into `local` (a slice of this
  /// socket's registered memory). Completion: `void(error_code, std::size_t)`. A `local`
  /// longer than `remote` is refused here with `errc::buffer_too_small`. A wrong key,
  /// bounds or rights give `wc_errc::remote_access` on both transports; a `local` that is not
  /// (or no longer) this socket's registered memory, `wc_errc::local_protection`. Either
  /// leaves the connection in error, as it leaves an RC queue pair. More operations than
  /// the queue holds wait for a slot; past `options().max_outstanding_operations` one-sided
  /// operations complete with `errc::too_many_operations`. A cancel withdraws one that waits
  /// (`operation_aborted`); one under way only ends by a terminal cancel, which fails the
  /// connection (a posted work request cannot be recalled otherwise), on both transports.
  /// Over TCP the peer's library answers, so only while the peer's io_context runs and its
  /// application takes what it receives (an RDMA device answers on its own): bound a wait on
  /// a peer that may stall with a timer through `||`, the operation awaited `as_tuple` (`||`
  /// cancels the other side only when one succeeds), whose terminal cancel ends it.
  template <class CompletionToken = detail::default_socket_token>
  auto async_read(const verbs::local_buffer& local, const remote_buffer& remote,
                  CompletionToken&& token = detail::default_socket_token()) {
    return transfer({.op = detail::one_sided_request::kind::read, .local = local, .remote = remote},
                    std::forward<CompletionToken>(token));
  }
  /// RDMA WRITE of `local` to the start of `remote`. Completion: `void(error_code, std::size_t)`,
  /// with `local.size` once the peer has the data (its device's acknowledgement over RDMA, its
  /// library's over TCP). Errors as async_read's.
  template <class CompletionToken = detail::default_socket_token>
  auto async_write(const verbs::local_buffer& local, const remote_buffer& remote,
                   CompletionToken&& token = detail::default_socket_token()) {
    return transfer({.op = detail::one_sided_request::kind::write, .local = local, .remote = remote},
                    std::forward<CompletionToken>(token));
  }
  /// RDMA WRITE, then the peer's `async_receive_immediate` completes with `immediate`, by
  /// which time the data is visible there. A peer holding 65,536 immediates nobody took takes
  /// no more until its application takes some: this one (and, as they share receive credits
  /// or the connection, this side's sends) waits meanwhile.
  template <class CompletionToken = detail::default_socket_token>
  auto async_write_with_immediate(const verbs::local_buffer& local, const remote_buffer& remote,
                                  std::uint32_t immediate,
                                  CompletionToken&& token = detail::default_socket_token()) {
    return transfer({.op = detail::one_sided_request::kind::write_with_immediate, .local = local,
                     .remote = remote, .immediate = immediate},
                    std::forward<CompletionToken>(token));
  }
  /// The next immediate from the peer's `async_write_with_immediate`:
  /// `void(error_code, std::uint32_t)`.
  template <class CompletionToken = detail::default_socket_token>
  auto async_receive_immediate(CompletionToken&& token = detail::default_socket_token()) {
    return start_operation<std::uint32_t>(
        [](detail::stream_core& impl, detail::immediate_handler handler) {
          impl.receive_immediate(std::move(handler));
        },
        std::forward<CompletionToken>(token));
  }
  /// Adds `add` to the 8-byte word at `remote` (8-aligned); `local` (8 bytes of registered
  /// memory) receives the previous value, also passed on: `void(error_code, std::uint64_t)`.
  /// The word is in the peer's native byte order, as over TCP and on rxe (a device that
  /// answers big-endian, as some older HCAs do, is not supported). Refused here, the
  /// connection unharmed: `errc::buffer_too_small` for fewer than 8 bytes either side,
  /// `errc::misaligned_atomic` for an address not 8-aligned either side. Refused by the peer,
  /// failing the connection: `wc_errc::remote_access` (key, bounds, no remote_atomic right).
  /// Other errors as async_read's (`local_protection`, `too_many_operations`, cancellation,
  /// `flushed` behind a failure). The value is 0 on failure. Over TCP the peer's library
  /// updates the word with a CPU atomic; over RDMA its device does, atomic at least against
  /// other RDMA atomics on that device.
  template <class CompletionToken = detail::default_socket_token>
  auto async_fetch_add(const verbs::local_buffer& local, const remote_buffer& remote, std::uint64_t add,
                       CompletionToken&& token = detail::default_socket_token()) {
    return atomic({.op = detail::one_sided_request::kind::fetch_add, .local = local, .remote = remote,
                   .compare_add = add},
                  std::forward<CompletionToken>(token));
  }
  /// Stores `swap` at `remote` if the word there equals `compare`; completes with the previous
  /// value (so it succeeded iff previous == compare). Errors as async_fetch_add's.
  template <class CompletionToken = detail::default_socket_token>
  auto async_compare_swap(const verbs::local_buffer& local, const remote_buffer& remote,
                          std::uint64_t compare, std::uint64_t swap,
                          CompletionToken&& token = detail::default_socket_token()) {
    return atomic({.op = detail::one_sided_request::kind::compare_swap, .local = local, .remote = remote,
                   .compare_add = compare, .swap = swap},
                  std::forward<CompletionToken>(token));
  }

  /// Internal: makes this socket the owner of an established connection.
  void attach(std::shared_ptr<detail::stream_core> impl, transport kind, endpoint_type local,
              endpoint_type remote);
  /// Internal: the connection, for transport-specific operations.
  const std::shared_ptr<detail::stream_core>& impl() const noexcept { return impl_; }

 private:
  /// close() but for open() and bind(), which a connect keeps.
  void close_connection();
  /// A connect's result: attaches the connection to the attempt's socket, or drops it where
  /// that socket gave up on the attempt (`ec` is then operation_aborted).
  static void connect_done(detail::connect_attempt& attempt, error_code& ec, detail::connection c);
  // The blocking transfers: an asynchronous one run to its end here, and its throwing form.
  template <class Start>
  std::size_t blocking(error_code& ec, Start start) {
    return detail::run_blocking<std::size_t>(executor_, ec, std::move(start));
  }
  // The non-blocking transfers: what the connection does at once (see detail::run_now).
  template <class Act>
  std::size_t at_once(error_code& ec, Act act) {
    if (!impl_) {
      ec = unconnected();
      return 0;
    }
    return detail::run_now<std::size_t>(executor_, ec,
                                        [&act, impl = impl_](error_code& e) { return act(*impl, e); });
  }
  // async_send and async_receive with message flags: only 0 is taken (an unconnected socket
  // gives its error first, as Asio's).
  template <class Start, class CompletionToken>
  auto with_flags(message_flags flags, Start start, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [](auto handler, socket* self, message_flags flags, Start start) {
          if (flags == 0 || !self->impl_) return start(std::move(handler));
          boost::asio::post(
              self->executor_,
              boost::asio::append(std::move(handler), error_code(boost::asio::error::operation_not_supported),
                                  std::size_t{0}));
        },
        token, this, flags, std::move(start));
  }
  template <class Call>
  static std::size_t throwing(const char* what, Call call) {
    error_code ec;
    const std::size_t n = call(ec);
    detail::throw_if(ec, what);
    return n;
  }

  // Every operation starts here. The initiation carries the socket itself, as Asio's sockets
  // do (which is why a socket must exist when an operation starts), not copies of its
  // connection and executor: with use_awaitable each argument is copied into a coroutine frame
  // per operation.
  template <class Value, class Start, class CompletionToken, class... Args>
  auto start_operation(Start start, CompletionToken&& token, const Args&... args) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, Value)>(
        [start](auto handler, socket* self, const Args&... args) {
          if (!self->impl_) return self->refuse(std::move(handler), Value{});
          detail::stream_core& impl = *self->impl_;
          start(impl,
                detail::erased_handler<void(error_code, Value)>(std::move(handler), self->executor_,
                                                                impl.allocator()),
                args...);
        },
        token, this, args...);
  }
  // The user's buffer sequence, not its buffer_list copy (272 bytes), travels with the
  // initiation: a smaller coroutine frame per operation stays within Asio's recycling cache.
  template <class Buffers, class BufferSequence, class CompletionToken>
  auto initiate(void (detail::stream_core::*member)(const Buffers&, detail::size_handler),
                const BufferSequence& buffers, CompletionToken&& token) {
    return start_operation<std::size_t>(
        [member](detail::stream_core& impl, detail::size_handler handler, const BufferSequence& buffers) {
          (impl.*member)(Buffers(buffers), std::move(handler));
        },
        std::forward<CompletionToken>(token), buffers);
  }

  // Writes and sends: the transport may take them at once, before the handler is erased.
  template <bool Message, class ConstBufferSequence, class CompletionToken>
  auto initiate_write(const ConstBufferSequence& buffers, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        [](auto handler, socket* self, const ConstBufferSequence& buffers) {
          if (!self->impl_) return self->refuse(std::move(handler), std::size_t{0});
          self->impl_->write_unerased<Message>(detail::const_buffer_list(buffers), std::move(handler),
                                               self->executor_);
        },
        token, this, buffers);
  }

  // The TCP transport's socket; null over RDMA, and with `bad_descriptor` in `ec` when closed.
  boost::asio::ip::tcp::socket* tcp_socket(error_code& ec) const;
  // set_option after open() or bind(): kept for the connect where each transport this socket
  // may use takes it, else refused now with that transport's error.
  void keep_option(int level, int name, const void* value, std::size_t size, error_code& ec);
  // get_option after open() or bind(): what the connection would start with.
  error_code kept_option(int level, int name, void* value, std::size_t& size) const;
  // A TCP socket of the chosen family set up as the connection's will be before its connect:
  // where options are checked and read before there is a connection.
  boost::asio::ip::tcp::socket tcp_probe(error_code& ec) const;
  // The family open() or bind() chose; none before either (or after close()).
  std::optional<protocol_type> chosen_family() const {
    if (opened_) return opened_;
    if (bound_) return bound_->protocol();
    if (connecting_) return remote_.protocol();  // as tcp::socket's async_connect opens it
    return std::nullopt;
  }
  // What open(), bind() and set_option() said, for the connect.
  detail::connect_setup setup() const;

  // Whether tcp::socket would hold a descriptor: connected, connecting, open()ed or bound.
  bool has_descriptor() const noexcept { return impl_ || connecting_ || opened_ || bound_; }
  // What calls that need only a descriptor say: none when closed, as `tcp::socket`'s.
  error_code closed_error() const noexcept {
    return has_descriptor() ? error_code() : error_code(boost::asio::error::bad_descriptor);
  }
  // Why an operation that needs a connection cannot start: `not_connected` once open()ed,
  // bound or connecting (POSIX's ENOTCONN), `bad_descriptor` when closed.
  error_code unconnected() const noexcept {
    return has_descriptor() ? boost::asio::error::not_connected : boost::asio::error::bad_descriptor;
  }
  // Completes an operation that could not start, as Asio does: posted, never inside the call.
  template <class Handler, class... Value>
  void refuse(Handler&& handler, Value... value) const {
    boost::asio::post(executor_,
                      boost::asio::append(std::forward<Handler>(handler), unconnected(), value...));
  }
  template <class CompletionToken>
  auto transfer(const detail::one_sided_request& request, CompletionToken&& token) {
    return start_operation<std::size_t>(
        [](detail::stream_core& impl, detail::size_handler handler,
           const detail::one_sided_request& request) { impl.start_transfer(request, std::move(handler)); },
        std::forward<CompletionToken>(token), request);
  }
  template <class CompletionToken>
  auto atomic(const detail::one_sided_request& request, CompletionToken&& token) {
    return start_operation<std::uint64_t>(
        [](detail::stream_core& impl, detail::value_handler handler,
           const detail::one_sided_request& request) { impl.start_atomic(request, std::move(handler)); },
        std::forward<CompletionToken>(token), request);
  }

  executor_type executor_;
  socket_options options_;
  std::shared_ptr<detail::stream_core> impl_;
  std::shared_ptr<detail::connect_attempt> connecting_;           ///< a pending connect
  std::optional<protocol_type> opened_;                           ///< open()'s, until close()
  std::optional<endpoint_type> bound_;                            ///< where bind() said to connect from
  std::vector<detail::raw_socket_option> set_before_connect_;     ///< set_option()'s, until close()
  transport in_use_ = transport::automatic;
  bool non_blocking_ = false;  ///< non_blocking()'s, until close()
  endpoint_type local_, remote_;
};

}  // namespace coverbs

// Completes socket::rebind_executor wherever socket.hpp is included.
#include "coverbs/rebound_socket.hpp"  // IWYU pragma: export
