#include "coverbs/socket.hpp"

#include <algorithm>
#include <limits>
#include <system_error>
#include <utility>

#include "coverbs/detail/tcp_stream.hpp"

namespace coverbs {
namespace {

// An option by level and name, as a GettableSocketOption: read through Asio, which halves the
// buffer sizes Linux reports doubled, as tcp::socket::get_option does.
struct raw_gettable_option {
  int level_, name_;
  void* value_;
  std::size_t size_;
  int level(const boost::asio::ip::tcp&) const { return level_; }
  int name(const boost::asio::ip::tcp&) const { return name_; }
  void* data(const boost::asio::ip::tcp&) const { return value_; }
  std::size_t size(const boost::asio::ip::tcp&) const { return size_; }
  void resize(const boost::asio::ip::tcp&, std::size_t size) { size_ = size; }
};

}  // namespace

boost::asio::ip::tcp::socket* socket::tcp_socket(error_code& ec) const {
  ec = impl_ ? error_code() : error_code(boost::asio::error::bad_descriptor);
  auto* tcp = dynamic_cast<detail::tcp_stream*>(impl_.get());
  return tcp != nullptr ? &tcp->socket() : nullptr;
}

// The executor is copied, not moved: a moved-from socket can connect again, as Asio's.
socket::socket(socket&& other) noexcept
    : executor_(other.executor_),
      options_(other.options_),
      impl_(std::move(other.impl_)),
      connecting_(std::move(other.connecting_)),
      opened_(std::exchange(other.opened_, std::nullopt)),
      bound_(std::exchange(other.bound_, std::nullopt)),
      set_before_connect_(std::exchange(other.set_before_connect_, {})),
      in_use_(std::exchange(other.in_use_, transport::automatic)),
      non_blocking_(std::exchange(other.non_blocking_, false)),
      local_(other.local_),
      remote_(other.remote_) {
  if (connecting_) connecting_->owner = this;  // the connect goes on for this socket
}

socket& socket::operator=(socket&& other) noexcept {
  if (this != &other) {
    close();
    executor_ = other.executor_;
    options_ = other.options_;
    impl_ = std::move(other.impl_);
    connecting_ = std::move(other.connecting_);
    if (connecting_) connecting_->owner = this;
    opened_ = std::exchange(other.opened_, std::nullopt);
    bound_ = std::exchange(other.bound_, std::nullopt);
    set_before_connect_ = std::exchange(other.set_before_connect_, {});
    in_use_ = std::exchange(other.in_use_, transport::automatic);
    non_blocking_ = std::exchange(other.non_blocking_, false);
    local_ = other.local_;
    remote_ = other.remote_;
  }
  return *this;
}

socket::~socket() { close(); }

void socket::attach(std::shared_ptr<detail::stream_core> impl, transport kind, endpoint_type local,
                    endpoint_type remote) {
  const bool non_blocking = non_blocking_;  // set after open() or bind(), it holds for the connection
  close();  // a binding is used up by the connect that attaches
  non_blocking_ = non_blocking;
  impl_ = std::move(impl);
  impl_->set_limits(options_.max_outstanding_operations, options_.max_registered_bytes);
  in_use_ = kind;
  local_ = local;
  remote_ = remote;
}

registered_memory socket::register_memory(std::span<std::byte> memory, verbs::access rights, error_code& ec) {
  registered_memory r;
  if (!impl_) {
    ec = unconnected();
    return r;
  }
  // A remote_buffer's length is 32 bits: a larger region could not be described to the peer.
  if (memory.size() > std::numeric_limits<std::uint32_t>::max()) {
    ec = make_error_code(boost::system::errc::value_too_large);
    return r;
  }
  try {
    r.handle_ = impl_->register_counted(memory, rights | verbs::access::local_write, r.lkey_, r.remote_, ec);
  } catch (const std::system_error& e) {  // the device's refusal, e.g. ENOMEM past RLIMIT_MEMLOCK
    ec = e.code();
  }
  if (ec) return registered_memory();
  r.owner_ = impl_;
  r.memory_ = memory;
  return r;
}

registered_memory socket::register_memory(std::span<std::byte> memory, verbs::access rights) {
  error_code ec;
  registered_memory r = register_memory(memory, rights, ec);
  detail::throw_if(ec, "register_memory");
  return r;
}

void socket::connect(const endpoint_type& peer, error_code& ec) {
  detail::run_blocking(executor_, ec, [&](auto handler) { async_connect(peer, std::move(handler)); });
}

void socket::connect(const endpoint_type& peer) {
  error_code ec;
  connect(peer, ec);
  detail::throw_if(ec, "connect");
}

void socket::close() {
  close_connection();
  opened_.reset();
  bound_.reset();
  set_before_connect_.clear();
  non_blocking_ = false;
}

void socket::close_connection() {
  if (auto attempt = std::move(connecting_)) {
    attempt->owner = nullptr;  // given up: its completion, even one queued already, is dropped
    attempt->cancel(boost::asio::cancellation_type::terminal);
  }
  if (impl_) {
    impl_->close();
    impl_->keep_until_closed(nullptr);
    impl_.reset();
  }
  in_use_ = transport::automatic;
}

// The attempt's last step may be done, its completion queued, when close() gives up on it
// (cancelling then stops nothing): the connection it made is dropped, as close() promises,
// rather than attached to a socket the caller closed (or that a newer connect now uses).
void socket::connect_done(detail::connect_attempt& attempt, error_code& ec, detail::connection c) {
  socket* const owner = std::exchange(attempt.owner, nullptr);
  if (owner != nullptr) owner->connecting_.reset();
  if (ec) return;
  if (owner == nullptr) {
    c.stream->close();
    ec = boost::asio::error::operation_aborted;
    return;
  }
  owner->attach(std::move(c.stream), c.kind, c.local, c.remote);
}

void detail::connect_attempt::cancel(boost::asio::cancellation_type type) {
  if (detail::running_here(executor)) return signal.emit(type);
  boost::asio::post(executor, [self = shared_from_this(), type] { self->signal.emit(type); });
}

void socket::close(error_code& ec) {
  close();
  ec = {};
}

void socket::open(const protocol_type& protocol, error_code& ec) {
  ec = impl_ || connecting_ || opened_ ? error_code(boost::asio::error::already_open) : error_code();
  if (!ec) opened_ = protocol;
}

void socket::keep_option(int level, int name, const void* value, std::size_t size, error_code& ec) {
  ec = {};
  if (options_.kind != transport::rdma) {  // TCP's answer: a socket's like the connection's
    auto probe = tcp_probe(ec);
    if (!ec) ec = detail::set_raw_option(probe.native_handle(), level, name, value, size);
  }
  if (!ec && options_.kind != transport::tcp) ec = detail::rdma_option(level, name, nullptr, nullptr);
  if (ec) return;
  const auto* bytes = static_cast<const unsigned char*>(value);
  auto same =
      std::find_if(set_before_connect_.begin(), set_before_connect_.end(),
                   [&](const detail::raw_socket_option& o) { return o.level == level && o.name == name; });
  if (same == set_before_connect_.end()) same = set_before_connect_.insert(same, {level, name, {}});
  same->value.assign(bytes, bytes + size);
}

error_code socket::kept_option(int level, int name, void* value, std::size_t& size) const {
  if (options_.kind == transport::rdma) return detail::rdma_option(level, name, value, &size);
  if (options_.kind == transport::automatic) {
    if (error_code ec = detail::rdma_option(level, name, nullptr, nullptr)) return ec;
  }
  error_code ec;
  const auto probe = tcp_probe(ec);  // TCP's answer
  if (ec) return ec;
  raw_gettable_option read{level, name, value, size};
  probe.get_option(read, ec);
  size = read.size_;
  return ec;
}

boost::asio::ip::tcp::socket socket::tcp_probe(error_code& ec) const {
  boost::asio::ip::tcp::socket probe(executor_);
  probe.open(*chosen_family(), ec);
  // Every TCP connection of ours has no_delay on (connect_tcp), then what set_option() kept.
  if (!ec) probe.set_option(boost::asio::ip::tcp::no_delay(true), ec);
  for (const detail::raw_socket_option& o : set_before_connect_) {
    if (!ec)
      ec = detail::set_raw_option(probe.native_handle(), o.level, o.name, o.value.data(), o.value.size());
  }
  return probe;
}

detail::connect_setup socket::setup() const {
  return {bound_, set_before_connect_, chosen_family()};
}

void socket::non_blocking(bool mode, error_code& ec) {
  ec = closed_error();
  if (!ec) non_blocking_ = mode;
}

void socket::non_blocking(bool mode) {
  error_code ec;
  non_blocking(mode, ec);
  detail::throw_if(ec, "non_blocking");
}

void socket::wait(wait_type what, error_code& ec) {
  detail::run_blocking(executor_, ec, [&](auto handler) { async_wait(what, std::move(handler)); });
}

void socket::wait(wait_type what) {
  error_code ec;
  wait(what, ec);
  detail::throw_if(ec, "wait");
}

void socket::open(const protocol_type& protocol) {
  error_code ec;
  open(protocol, ec);
  detail::throw_if(ec, "open");
}

void socket::bind(const endpoint_type& local, error_code& ec) {
  ec = {};
  // As bind(2) on a connected or bound socket, or with an address of another family than
  // open()'s.
  if (impl_ || connecting_ || bound_ || (opened_ && *opened_ != local.protocol())) {
    ec = boost::asio::error::invalid_argument;
    return;
  }
  // Whether the address is this machine's, as bind(2) would tell: a socket bound to it for a
  // moment (port 0, so that the port stays free for the connect).
  boost::asio::ip::tcp::socket probe(executor_);
  probe.open(local.protocol(), ec);
  if (!ec) probe.bind(endpoint_type(local.address(), 0), ec);
  if (!ec) bound_ = local;
}

void socket::bind(const endpoint_type& local) {
  error_code ec;
  bind(local, ec);
  detail::throw_if(ec, "bind");
}

void socket::shutdown(boost::asio::socket_base::shutdown_type what, error_code& ec) {
  ec = {};
  if (!impl_) {
    ec = unconnected();
    return;
  }
  // The peer learns of a send shutdown. Receiving cannot be refused to a peer that holds
  // credits: a receive shutdown, as SHUT_RD on Linux, ends this side's reads with eof.
  if (what != boost::asio::socket_base::shutdown_receive) impl_->shutdown_sending();
  if (what != boost::asio::socket_base::shutdown_send) impl_->shutdown_receiving();
}

void socket::shutdown(boost::asio::socket_base::shutdown_type what) {
  error_code ec;
  shutdown(what, ec);
  detail::throw_if(ec, "shutdown");
}

void socket::cancel(error_code& ec) {
  ec = closed_error();
  // A connect holds no connection yet (it closed the last one first). The signal is copied:
  // should the connect end inside emit(), its handler drops the socket's.
  if (auto attempt = connecting_) {
    attempt->cancel(boost::asio::cancellation_type::terminal);
  } else if (impl_) {
    impl_->cancel();
  }
}

void socket::cancel() {
  error_code ec;
  cancel(ec);
  detail::throw_if(ec, "cancel");
}

socket::endpoint_type socket::local_endpoint(error_code& ec) const {
  ec = {};
  if (impl_) return local_;
  if (bound_) return *bound_;
  if (const auto family = chosen_family()) return endpoint_type(*family, 0);
  ec = boost::asio::error::bad_descriptor;
  return endpoint_type();
}

socket::endpoint_type socket::local_endpoint() const {
  error_code ec;
  auto ep = local_endpoint(ec);
  detail::throw_if(ec, "local_endpoint");
  return ep;
}

std::size_t socket::available(error_code& ec) const {
  ec = closed_error();
  if (!impl_) return 0;
  impl_->want_input();  // so that a later call sees what has arrived meanwhile
  return impl_->available();
}

std::size_t socket::available() const {
  error_code ec;
  const std::size_t n = available(ec);
  detail::throw_if(ec, "available");
  return n;
}

socket::endpoint_type socket::remote_endpoint(error_code& ec) const {
  ec = impl_ ? error_code() : unconnected();
  return impl_ ? remote_ : endpoint_type();
}

socket::endpoint_type socket::remote_endpoint() const {
  error_code ec;
  auto ep = remote_endpoint(ec);
  detail::throw_if(ec, "remote_endpoint");
  return ep;
}

}  // namespace coverbs
