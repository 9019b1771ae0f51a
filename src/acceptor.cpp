#include "coverbs/acceptor.hpp"

#include <boost/asio/post.hpp>
#include <optional>
#include <utility>

#include "acceptor_impl.hpp"

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
  error_code ec;
  cancel(ec);
  detail::throw_if(ec, "cancel");
}

void acceptor::cancel(error_code& ec) {
  ec = impl_ ? error_code() : error_code(boost::asio::error::bad_descriptor);
  if (impl_) impl_->cancel();
}

socket acceptor::accept(endpoint_type& peer_endpoint, error_code& ec) {
  std::optional<socket> taken;
  detail::run_blocking_to(
      executor_, ec, [&](auto handler) { async_accept(peer_endpoint, std::move(handler)); },
      [&taken](socket s) { taken.emplace(std::move(s)); });
  return taken ? std::move(*taken) : socket(executor_, options_);
}

socket acceptor::accept(endpoint_type& peer_endpoint) {
  error_code ec;
  socket s = accept(peer_endpoint, ec);
  detail::throw_if(ec, "accept");
  return s;
}

socket acceptor::accept(error_code& ec) {
  endpoint_type ignored;
  return accept(ignored, ec);
}

socket acceptor::accept() {
  endpoint_type ignored;
  return accept(ignored);
}

void acceptor::accept(socket& peer, endpoint_type& peer_endpoint, error_code& ec) {
  detail::run_blocking(executor_, ec,
                       [&](auto handler) { async_accept(peer, peer_endpoint, std::move(handler)); });
}

void acceptor::accept(socket& peer, endpoint_type& peer_endpoint) {
  error_code ec;
  accept(peer, peer_endpoint, ec);
  detail::throw_if(ec, "accept");
}

void acceptor::accept(socket& peer, error_code& ec) {
  endpoint_type ignored;
  accept(peer, ignored, ec);
}

void acceptor::accept(socket& peer) {
  endpoint_type ignored;
  accept(peer, ignored);
}

std::uint64_t acceptor::start_accept(detail::accept_handler handler, const executor_type& socket_executor) {
  if (!impl_) {
    boost::asio::post(executor_, [h = std::move(handler)]() mutable {
      std::move(h)(error_code(boost::asio::error::bad_descriptor), detail::connection{});
    });
    return 0;
  }
  return detail::async_accept(impl_, std::move(handler), socket_executor);
}

}  // namespace coverbs
