#include "coverbs/acceptor.hpp"

#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>
#include <deque>

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

  void listen(const asio::ip::tcp::endpoint& endpoint, bool reuse_address) {
    asio::ip::tcp::endpoint bound = endpoint;
    if (options_.kind != transport::rdma) {
      tcp_.emplace(executor_);
      tcp_->open(endpoint.protocol());
      tcp_->set_option(asio::socket_base::reuse_address(reuse_address));
      tcp_->bind(endpoint);
      tcp_->listen();
      bound = tcp_->local_endpoint();
    }
    if (options_.kind != transport::tcp) {
      try {
        cm::id listener(executor_);
        listener.bind(bound);  // the same port number as TCP
        listener.listen();
        bound = listener.local_endpoint();
        rdma_.emplace(std::move(listener));
      } catch (const std::exception&) {
        if (options_.kind == transport::rdma) throw;
      }
    }
    endpoint_ = bound;
  }

  void accept(accept_handler handler) {
    if (closed_) return fail(std::move(handler), asio::error::operation_aborted);
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

  asio::ip::tcp::endpoint endpoint_;
  std::optional<asio::ip::tcp::acceptor> tcp_;
  std::optional<cm::id> rdma_;

 private:
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
  bool tcp_running_ = false, rdma_running_ = false, closed_ = false;
};

void async_accept(const std::shared_ptr<acceptor_impl>& impl, accept_handler handler) {
  impl->accept(std::move(handler));
}

}  // namespace coverbs::detail

namespace coverbs {

acceptor::acceptor(const executor_type& executor, const endpoint_type& endpoint, const socket_options& options,
                   bool reuse_address)
    : executor_(executor), options_(options), impl_(std::make_shared<detail::acceptor_impl>(executor, options)) {
  impl_->listen(endpoint, reuse_address);
}

acceptor::~acceptor() { close(); }

acceptor::endpoint_type acceptor::local_endpoint() const {
  if (!impl_) throw boost::system::system_error(boost::asio::error::bad_descriptor, "local_endpoint");
  return impl_->endpoint_;
}

bool acceptor::accepts_rdma() const noexcept { return impl_ && impl_->rdma_.has_value(); }
bool acceptor::accepts_tcp() const noexcept { return impl_ && impl_->tcp_.has_value(); }

void acceptor::close() {
  if (impl_) {
    impl_->close();
    impl_.reset();
  }
}

void acceptor::cancel() {
  if (impl_) impl_->cancel();
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
