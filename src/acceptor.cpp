#include "coverbs/acceptor.hpp"

#include <boost/asio/post.hpp>
#include <deque>
#include <system_error>

#include <sys/socket.h>

#include "coverbs/detail/handshake.hpp"
#include "coverbs/detail/shutdown_service.hpp"
#include "coverbs/detail/tcp_stream.hpp"

namespace coverbs::detail {

namespace asio = boost::asio;

/// Listeners run only while someone waits for a connection, so an idle acceptor does not keep
/// io_context::run from returning; a connection that arrives with nobody waiting is kept.
class acceptor_impl : public handler_holder, public std::enable_shared_from_this<acceptor_impl> {
 public:
  acceptor_impl(const asio::any_io_executor& ex, const socket_options& options)
      : handler_holder(ex), executor_(ex), options_(options) {}

  // The set-up steps of tcp::acceptor, each reporting as its counterpart on a TCP acceptor;
  // the constructor with an endpoint takes them all.
  error_code open(const asio::ip::tcp& protocol) {
    error_code ec;
    if (options_.kind != transport::rdma) {
      tcp_.emplace(executor_);
      tcp_->open(protocol, ec);
    }
    return ec;
  }

  error_code bind(const asio::ip::tcp::endpoint& endpoint) {
    if (rdma_) return asio::error::invalid_argument;  // bound already, as a second bind(2)
    error_code ec;
    asio::ip::tcp::endpoint bound = endpoint;
    if (tcp_) {
      tcp_->bind(endpoint, ec);
      if (!ec) bound = tcp_->local_endpoint(ec);
      if (ec) return ec;
    }
    if (options_.kind != transport::tcp) {
      std::optional<cm::id> listener;
      ec = make_listener(listener);
      if (!ec) listener->bind(bound, ec);  // the same port number as TCP
      if (!ec) {
        bound = listener->local_endpoint();
        rdma_.emplace(std::move(*listener));
      } else if (options_.kind == transport::rdma) {
        return ec;
      }
    }
    endpoint_ = bound;
    return {};
  }

  error_code listen(int backlog) {
    if (!tcp_ && !rdma_) return asio::error::invalid_argument;  // RDMA alone, not bound yet
    error_code ec;
    if (tcp_) tcp_->listen(backlog, ec);
    if (ec) return ec;
    if (rdma_ && !listening_) {
      // rdma_cm caps the backlog itself, and takes 0 for its maximum.
      rdma_->listen(backlog >= asio::socket_base::max_listen_connections ? 0 : backlog, ec);
      if (ec && options_.kind == transport::rdma) return ec;
      if (ec) rdma_.reset();  // TCP alone, as when no RDMA device is there
    }
    listening_ = true;
    return {};
  }

  asio::ip::tcp::endpoint local_endpoint(error_code& ec) const {
    ec = {};
    return tcp_ ? tcp_->local_endpoint(ec) : endpoint_;
  }

  void accept(accept_handler handler) {
    if (closed_) return fail(std::move(handler), asio::error::operation_aborted);
    if (!listening_) return fail(std::move(handler), asio::error::invalid_argument);  // as accept(2)
    if (!ready_.empty()) {
      connection c = std::move(ready_.front());
      ready_.pop_front();
      asio::post(executor_, [h = std::move(handler), c = std::move(c)]() mutable { std::move(h)(error_code(), std::move(c)); });
      return;
    }
    waiters_.push_back(std::move(handler));
    run_listeners();
  }

  void cancel() {
    auto waiters = std::move(waiters_);
    waiters_.clear();
    for (auto& h : waiters) fail(std::move(h), asio::error::operation_aborted);
  }

  // A waiter's coroutine may own the acceptor, and so this: destroyed, the cycle breaks.
  void destroy_handlers() noexcept override {
    const auto self = weak_from_this().lock();
    if (!self) return;
    const std::deque<accept_handler> waiters = std::move(waiters_);
    waiters_.clear();
    const std::deque<connection> ready = std::move(ready_);
    ready_.clear();
  }

  void close() {
    closed_ = true;
    cancel();
    // Connections nobody took yet are closed, not just dropped: their pending receives keep
    // them alive, and their clients would wait for ever.
    for (auto& c : ready_) c.stream->close();
    ready_.clear();
    if (tcp_) {
      error_code ignored;
      tcp_->close(ignored);
    }
    rdma_.reset();
  }

  std::optional<asio::ip::tcp::acceptor> tcp_;
  std::optional<cm::id> rdma_;

 private:
  // An rdma_cm id to listen on; the error of creating one (no RDMA stack) otherwise.
  error_code make_listener(std::optional<cm::id>& listener) {
    try {
      listener.emplace(executor_);
    } catch (const std::system_error& e) {
      const std::error_code& code = e.code();
      const bool errno_value =
          code.category() == std::generic_category() || code.category() == std::system_category();
      return errno_value ? error_code(code.value(), boost::system::system_category()) : error_code(code);
    }
    return {};
  }

  // A place among the connections the acceptor keeps open, held by the connection until its
  // socket closes; null when the limit is reached.
  std::shared_ptr<void> admit() {
    struct place {
      explicit place(std::shared_ptr<std::size_t> count) : open(std::move(count)) { ++*open; }
      place(const place&) = delete;
      place& operator=(const place&) = delete;
      ~place() { --*open; }
      std::shared_ptr<std::size_t> open;
    };
    if (options_.max_connections != 0 && *open_ >= options_.max_connections) return nullptr;
    return std::make_shared<place>(open_);
  }

  void fail(accept_handler handler, error_code ec) {
    asio::post(executor_, [h = std::move(handler), ec]() mutable { std::move(h)(ec, connection{}); });
  }

  void deliver(connection c) {
    if (waiters_.empty()) {
      ready_.push_back(std::move(c));
      return;
    }
    auto h = std::move(waiters_.front());
    waiters_.pop_front();
    std::move(h)(error_code(), std::move(c));
  }

  void listener_failed(error_code ec) {
    if (waiters_.empty() || closed_) return;
    auto h = std::move(waiters_.front());
    waiters_.pop_front();
    std::move(h)(ec, connection{});
  }

  void run_listeners() {
    if (tcp_ && !tcp_running_) accept_tcp();
    if (rdma_ && !rdma_running_) accept_rdma();
  }

  void accept_tcp() {
    tcp_running_ = true;
    tcp_->async_accept([self = shared_from_this()](error_code ec, asio::ip::tcp::socket s) {
      self->tcp_running_ = false;
      if (self->closed_) return;
      if (ec) {
        self->listener_failed(ec);
      } else if (auto token = self->admit()) {
        error_code ignored;
        const auto local = s.local_endpoint(ignored), remote = s.remote_endpoint(ignored);
        auto stream = std::make_shared<tcp_stream>(std::move(s), self->options_.buffer_size);
        stream->keep_until_closed(std::move(token));
        stream->start();
        self->deliver({stream, local, remote, transport::tcp});
      } else {
        // Over the limit. The kernel has completed the client's connect already, so reset the
        // connection before any hello: the client's stream reports connection_refused.
        error_code ignored;
        s.set_option(asio::socket_base::linger(true, 0), ignored);
        s.close(ignored);
      }
      // deliver() may have run a waiter that asked for the next connection and so re-armed
      // the listener already; a second accept would stay queued for ever, one more each time.
      if (!self->waiters_.empty() && !self->tcp_running_) self->accept_tcp();
    });
  }

  void accept_rdma() {
    rdma_running_ = true;
    rdma_->async_get_request([self = shared_from_this()](error_code ec, cm::id request) {
      self->rdma_running_ = false;
      if (self->closed_) return;
      if (ec) {
        self->listener_failed(ec);
      } else {
        self->accept_request(std::move(request));
      }
      if (!self->waiters_.empty() && !self->rdma_running_) self->accept_rdma();
    });
  }

  // A request with a malformed handshake, or one we cannot serve, is refused; it never fails
  // the application's accept, which waits for the next good connection.
  void accept_request(cm::id request) {
    stream_geometry peer{};
    auto token = admit();
    if (!token || parse_handshake(request.peer_private_data(), peer)) {
      error_code ignored;
      request.reject({}, ignored);  // the client's connect fails with connection_refused
      return;
    }
    std::shared_ptr<rdma_stream> stream;
    try {
      stream = make_rdma_stream(std::move(request), options_);
    } catch (const std::exception&) {
      return;  // the id is gone with its resources, which rejects the request
    }
    stream->keep_until_closed(std::move(token));
    auto& res = *std::static_pointer_cast<rdma_resources>(stream->resources());
    const auto hello = encode_handshake(local_geometry(options_));
    res.id.async_accept(hello, [self = shared_from_this(), stream, peer](error_code ec) {
      if (ec || self->closed_) {
        stream->close();
        stream->keep_until_closed(nullptr);
        return;
      }
      self->deliver(finish_rdma_connection(stream, peer));
    });
  }

  asio::any_io_executor executor_;
  socket_options options_;
  std::deque<accept_handler> waiters_;
  std::deque<connection> ready_;
  std::shared_ptr<std::size_t> open_ = std::make_shared<std::size_t>(0);  ///< connections holding a place
  asio::ip::tcp::endpoint endpoint_;  ///< bound to (TCP's own where it listens)
  bool tcp_running_ = false, rdma_running_ = false, closed_ = false, listening_ = false;
};

void async_accept(const std::shared_ptr<acceptor_impl>& impl, accept_handler handler) {
  impl->accept(std::move(handler));
}

}  // namespace coverbs::detail

namespace coverbs {

acceptor::acceptor(const executor_type& executor, const endpoint_type& endpoint,
                   const socket_options& options, bool reuse_address)
    : acceptor(executor, options) {
  open(endpoint.protocol());
  if (reuse_address) set_option(boost::asio::socket_base::reuse_address(true));
  bind(endpoint);
  listen();
}

acceptor::acceptor(const executor_type& executor, const socket_options& options)
    : executor_(executor), options_(options) {}

// The executor is copied, not moved: a moved-from acceptor can be opened again, as Asio's.
acceptor::acceptor(acceptor&& other) noexcept
    : executor_(other.executor_), options_(other.options_), impl_(std::move(other.impl_)) {}

acceptor& acceptor::operator=(acceptor&& other) noexcept {
  if (this != &other) {
    close();
    executor_ = other.executor_;
    options_ = other.options_;
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void acceptor::open(const protocol_type& protocol, error_code& ec) {
  if (impl_) {
    ec = boost::asio::error::already_open;
    return;
  }
  auto impl = std::make_shared<detail::acceptor_impl>(executor_, options_);
  ec = impl->open(protocol);
  if (!ec) impl_ = std::move(impl);
}

void acceptor::open(const protocol_type& protocol) {
  error_code ec;
  open(protocol, ec);
  detail::throw_if(ec, "open");
}

void acceptor::bind(const endpoint_type& endpoint, error_code& ec) {
  if (!impl_) {
    ec = boost::asio::error::bad_descriptor;
    return;
  }
  ec = impl_->bind(endpoint);
}

void acceptor::bind(const endpoint_type& endpoint) {
  error_code ec;
  bind(endpoint, ec);
  detail::throw_if(ec, "bind");
}

void acceptor::listen(int backlog, error_code& ec) {
  if (!impl_) {
    ec = boost::asio::error::bad_descriptor;
    return;
  }
  ec = impl_->listen(backlog);
}

void acceptor::listen(int backlog) {
  error_code ec;
  listen(backlog, ec);
  detail::throw_if(ec, "listen");
}

boost::asio::ip::tcp::acceptor* acceptor::tcp_listener(error_code& ec) const {
  ec = impl_ ? error_code() : error_code(boost::asio::error::bad_descriptor);
  return impl_ && impl_->tcp_ ? &*impl_->tcp_ : nullptr;
}

error_code acceptor::rdma_option(int level, int name) {
  if (level == SOL_SOCKET && name == SO_REUSEADDR) return {};
  return boost::asio::error::operation_not_supported;
}

acceptor::~acceptor() { close(); }

acceptor::endpoint_type acceptor::local_endpoint(error_code& ec) const {
  if (!impl_) {
    ec = boost::asio::error::bad_descriptor;
    return {};
  }
  return impl_->local_endpoint(ec);
}

acceptor::endpoint_type acceptor::local_endpoint() const {
  error_code ec;
  const endpoint_type endpoint = local_endpoint(ec);
  detail::throw_if(ec, "local_endpoint");
  return endpoint;
}

bool acceptor::accepts_rdma() const noexcept { return impl_ && impl_->rdma_.has_value(); }
bool acceptor::accepts_tcp() const noexcept { return impl_ && impl_->tcp_.has_value(); }

void acceptor::close() {
  if (impl_) {
    impl_->close();
    impl_.reset();
  }
}

void acceptor::close(error_code& ec) {
  close();
  ec = {};
}

void acceptor::cancel() {
  if (impl_) impl_->cancel();
}

void acceptor::cancel(error_code& ec) {
  ec = impl_ ? error_code() : error_code(boost::asio::error::bad_descriptor);
  cancel();
}

void acceptor::start_accept(detail::accept_handler handler) {
  if (!impl_) {
    boost::asio::post(executor_, [h = std::move(handler)]() mutable {
      std::move(h)(error_code(boost::asio::error::bad_descriptor), detail::connection{});
    });
    return;
  }
  detail::async_accept(impl_, std::move(handler));
}

}  // namespace coverbs
