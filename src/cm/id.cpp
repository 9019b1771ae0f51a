#include "coverbs/cm/id.hpp"

#include <algorithm>
#include <boost/asio/query.hpp>
#include <climits>
#include <cstring>

#include "coverbs/detail/throw_error.hpp"
#include "coverbs/error.hpp"
#include "coverbs/verbs/shared_receive_queue.hpp"

namespace coverbs::cm {
namespace {

using detail::bit;
namespace error = boost::asio::error;

error_code errno_code(int value = errno) {
  return {value != 0 ? value : EIO, boost::system::system_category()};
}

void throw_if(const error_code& ec, const char* what) {
  if (ec) throw std::system_error(std::error_code(ec), what);
}

/// rdma_cm reports failures of its asynchronous steps as a negative errno in the status.
error_code status_code(int status, error_code fallback) {
  return status < 0 ? errno_code(-status) : fallback;
}

error_code unexpected(const detail::event_record& e) {
  if (e.type == RDMA_CM_EVENT_DEVICE_REMOVAL) return error::no_such_device;
  return make_error_code(boost::system::errc::protocol_error);
}

constexpr std::uint32_t connect_events = bit(RDMA_CM_EVENT_ESTABLISHED) |
                                         bit(RDMA_CM_EVENT_CONNECT_RESPONSE) | bit(RDMA_CM_EVENT_REJECTED) |
                                         bit(RDMA_CM_EVENT_UNREACHABLE) | bit(RDMA_CM_EVENT_CONNECT_ERROR) |
                                         bit(RDMA_CM_EVENT_DISCONNECTED) | bit(RDMA_CM_EVENT_DEVICE_REMOVAL);
constexpr std::uint32_t disconnect_events =
    bit(RDMA_CM_EVENT_DISCONNECTED) | bit(RDMA_CM_EVENT_DEVICE_REMOVAL);

// Reject reasons of the IB CM (IBTA, table "REJ reason"), as the kernel puts them in the
// REJECTED event's status; iWARP reports -ECONNREFUSED or -ECONNRESET.
constexpr int rej_timeout = 4, rej_stale_connection = 10;

/// What a REJ means to a connect (or an accept): a refusal (no listener, the consumer's reject,
/// and the reasons no retry mends), or one of the two that are not the peer saying no.
error_code rejection(int reason) {
  switch (reason) {
    // The peer gave up waiting (Linux sends it from a requester that abandons its connect: an
    // accept sees it).
    case rej_timeout: return error::timed_out;
    // The peer's CM holds a connection it takes for live from this QP number (this side's old
    // QP vanished without a DREQ, say): it rejects the request unseen by the listener and
    // disconnects that old connection, so a new id whose QP has another number gets through.
    case rej_stale_connection: return make_error_code(errc::stale_connection);
    default: return error::connection_refused;
  }
}

/// Sends the DREQ unless it went already (an earlier call, or the event loop's answer to the
/// peer's), under the lock of the calls on the id. Returns rdma_disconnect's errno, 0 if it
/// succeeded or was not needed; a failed one sent nothing, so a later call must try again.
int send_disconnect(detail::id_state& s) {
  const auto lock = detail::lock_calls(s);
  if (s.disconnect_sent.exchange(true) || rdma_disconnect(s.cm) == 0) return 0;
  const int failure = errno != 0 ? errno : EIO;
  s.disconnect_sent = false;
  return failure;
}

/// How a connect or accept that did not reach ESTABLISHED failed.
error_code connection_failure(detail::id_state& s, detail::event_record& e) {
  if (e.type == RDMA_CM_EVENT_REJECTED) {
    s.peer_data = std::move(e.private_data);  // the reject's reason, for peer_private_data()
    return rejection(e.status);
  }
  switch (e.type) {
    case RDMA_CM_EVENT_UNREACHABLE: return error::host_unreachable;
    case RDMA_CM_EVENT_CONNECT_ERROR: return status_code(e.status, error::connection_aborted);
    case RDMA_CM_EVENT_DISCONNECTED: return error::connection_reset;
    default: return unexpected(e);
  }
}

rdma_conn_param conn_param(const void* data, std::size_t size) {
  rdma_conn_param param{};
  param.private_data = size != 0 ? data : nullptr;
  param.private_data_len = static_cast<std::uint8_t>(size);
  param.flow_control = 1;
  // The same retry policy as a QP connected without rdma_cm (see verbs::connect_options).
  const verbs::connect_options retries;
  param.retry_count = retries.retry_count;
  param.rnr_retry_count = retries.rnr_retry;
  return param;
}

boost::asio::ip::tcp::endpoint to_endpoint(const sockaddr* address) {
  boost::asio::ip::tcp::endpoint endpoint;
  std::size_t size = 0;
  if (address->sa_family == AF_INET) size = sizeof(sockaddr_in);
  if (address->sa_family == AF_INET6) size = sizeof(sockaddr_in6);
  if (size == 0) return endpoint;
  std::memcpy(endpoint.data(), address, size);
  endpoint.resize(size);
  return endpoint;
}

}  // namespace

id::id(const executor_type& executor)
    : state_(boost::asio::use_service<event_service>(
                 boost::asio::query(executor, boost::asio::execution::context))
                 .create(executor)),
      executor_(executor) {}

id::id(id&& other, const executor_type& executor) : state_(std::move(other.state_)), executor_(executor) {
  if (!state_) return;
  state_->executor = executor;  // what its waits default to
  // Another context's: its events go through that context's channel from now on.
  auto& target =
      boost::asio::use_service<event_service>(boost::asio::query(executor, boost::asio::execution::context));
  target.adopt(*state_, executor);
}

rdma_cm_id* id::native_handle() const noexcept {
  return state_ ? state_->cm : nullptr;
}

const verbs::device& id::device() const {
  if (!state_ || state_->cm->verbs == nullptr) {
    throw std::system_error(make_error_code(errc::no_device),
                            "cm::id has no device yet: resolve an address or bind to one first");
  }
  return state_->service->device_of(state_->cm->verbs);
}

void id::bind(const boost::asio::ip::tcp::endpoint& local) {
  error_code ec;
  bind(local, ec);
  throw_if(ec, "rdma_bind_addr");
}

void id::reuse_address(error_code& ec) noexcept {
  if (!state_) {
    ec = error::bad_descriptor;
    return;
  }
  int on = 1;
  ec = rdma_set_option(state_->cm, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on) != 0
           ? errno_code()
           : error_code();
}

void id::bind(const boost::asio::ip::tcp::endpoint& local, error_code& ec) noexcept {
  if (!state_) {
    ec = error::bad_descriptor;
    return;
  }
  auto address = local;
  ec = rdma_bind_addr(state_->cm, address.data()) != 0 ? errno_code() : error_code();
}

void id::listen(int backlog) {
  error_code ec;
  listen(backlog, ec);
  throw_if(ec, "rdma_listen");
}

void id::listen(int backlog, error_code& ec) noexcept {
  if (!state_) {
    ec = error::bad_descriptor;
    return;
  }
  // The kernel's own rule for the backlog (net.rdma_ucm.max_backlog defaults to 1024).
  state_->capacity = backlog > 0 ? static_cast<std::size_t>(backlog) : 1024;
  ec = rdma_listen(state_->cm, backlog) != 0 ? errno_code() : error_code();
}

boost::asio::ip::tcp::endpoint id::local_endpoint() const {
  if (!state_) throw_if(error::bad_descriptor, "cm::id::local_endpoint");
  return to_endpoint(rdma_get_local_addr(state_->cm));
}

boost::asio::ip::tcp::endpoint id::remote_endpoint() const {
  if (!state_) throw_if(error::bad_descriptor, "cm::id::remote_endpoint");
  return to_endpoint(rdma_get_peer_addr(state_->cm));
}

verbs::queue_pair id::create_queue_pair(completion_service& service, const verbs::protection_domain& pd,
                                        const verbs::queue_pair_options& options) {
  ibv_context* context = device().native_handle();
  if (pd.native_handle()->context != context || service.queue().native_handle()->context != context) {
    throw std::system_error(EINVAL, std::generic_category(),
                            "cm::id::create_queue_pair: make the PD and the completion service "
                            "from id.device(), rdma_cm's own context");
  }
  ibv_qp_init_attr attr = verbs::init_attributes(service.queue(), service.queue(), options);
  if (rdma_create_qp(state_->cm, pd.native_handle(), &attr) != 0) {
    coverbs::detail::throw_errno("rdma_create_qp");
  }
  state_->has_qp = true;
  return verbs::queue_pair::adopt(state_->cm->qp, verbs::granted(options, attr));
}

// Under the lock of the calls on the id: the event loop, on another thread of the context,
// may be answering the peer's disconnect, which moves this QP to ERROR.
void id::destroy_queue_pair() noexcept {
  if (!state_ || !state_->has_qp) return;
  const auto lock = detail::lock_calls(*state_);
  rdma_destroy_qp(state_->cm);
  state_->has_qp = false;
}

void id::disconnect() noexcept {
  if (state_) send_disconnect(*state_);
}

std::span<const std::byte> id::peer_private_data() const noexcept {
  if (!state_) return {};
  return state_->peer_data;
}

void id::reject(std::span<const std::byte> private_data) {
  error_code ec;
  reject(private_data, ec);
  throw_if(ec, "rdma_reject");
}

void id::reject(std::span<const std::byte> private_data, error_code& ec) noexcept {
  if (!state_) {
    ec = error::bad_descriptor;
  } else if (private_data.size() > max_reject_private_data) {
    ec = error::message_size;
  } else {
    ec = rdma_reject(state_->cm, private_data.empty() ? nullptr : private_data.data(),
                     static_cast<std::uint8_t>(private_data.size())) != 0
             ? errno_code()
             : error_code();
  }
}

// Operation steps ----------------------------------------------------------------------------

id::step id::resolve_steps::start(detail::id_state& s) {
  auto destination = remote;
  const int ms = static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 1, INT_MAX));
  const auto lock = detail::lock_calls(s);
  if (rdma_resolve_addr(s.cm, nullptr, destination.data(), ms) != 0) return {errno_code()};
  return {
      {},
      bit(RDMA_CM_EVENT_ADDR_RESOLVED) | bit(RDMA_CM_EVENT_ADDR_ERROR) | bit(RDMA_CM_EVENT_DEVICE_REMOVAL)};
}

id::step id::resolve_steps::next(detail::id_state& s, detail::event_record& e) {
  if (!route && e.type == RDMA_CM_EVENT_ADDR_RESOLVED) {
    route = true;
    const int ms = static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 1, INT_MAX));
    const auto lock = detail::lock_calls(s);
    if (rdma_resolve_route(s.cm, ms) != 0) return {errno_code()};
    return {{},
            bit(RDMA_CM_EVENT_ROUTE_RESOLVED) | bit(RDMA_CM_EVENT_ROUTE_ERROR) |
                bit(RDMA_CM_EVENT_DEVICE_REMOVAL)};
  }
  if (e.type == RDMA_CM_EVENT_ROUTE_RESOLVED) return {};
  if (e.type == RDMA_CM_EVENT_ADDR_ERROR) return {status_code(e.status, error::host_unreachable)};
  if (e.type == RDMA_CM_EVENT_ROUTE_ERROR) {
    return {status_code(e.status, error::network_unreachable)};
  }
  return {unexpected(e)};
}

id::step id::connect_steps::start(detail::id_state& s) {
  if (too_long) return {error::message_size};
  auto param = conn_param(bytes.data(), size);
  if (s.cm->verbs != nullptr) {
    // Offer what the device can do; the acceptor settles on the smaller of both sides.
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(s.cm->verbs, &attr); rc != 0) return {errno_code(rc)};
    param.responder_resources = static_cast<std::uint8_t>(std::min(attr.max_qp_rd_atom, 255));
    param.initiator_depth = static_cast<std::uint8_t>(std::min(attr.max_qp_init_rd_atom, 255));
  }
  const auto lock = detail::lock_calls(s);
  if (rdma_connect(s.cm, &param) != 0) return {errno_code()};
  return {{}, connect_events};
}

id::step id::connect_steps::next(detail::id_state& s, detail::event_record& e) {
  if (e.type == RDMA_CM_EVENT_ESTABLISHED) {
    s.peer_data = std::move(e.private_data);
    return {};
  }
  if (e.type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
    // Only without a QP: librdmacm leaves the RTU to us then.
    s.peer_data = std::move(e.private_data);
    const auto lock = detail::lock_calls(s);
    return {rdma_establish(s.cm) != 0 ? errno_code() : error_code()};
  }
  return {connection_failure(s, e)};
}

id::step id::accept_steps::start(detail::id_state& s) {
  if (too_long) return {error::message_size};
  // The RDMA_MAX_* values let librdmacm take the smaller of what the requester offered and
  // what this device allows.
  auto param = conn_param(bytes.data(), size);
  param.responder_resources = RDMA_MAX_RESP_RES;
  param.initiator_depth = RDMA_MAX_INIT_DEPTH;
  const auto lock = detail::lock_calls(s);
  if (rdma_accept(s.cm, &param) != 0) return {errno_code()};
  return {{}, connect_events};
}

id::step id::accept_steps::next(detail::id_state& s, detail::event_record& e) {
  if (e.type == RDMA_CM_EVENT_ESTABLISHED) return {};
  return {connection_failure(s, e)};
}

id::step id::request_steps::start(detail::id_state&) {
  return {{}, bit(RDMA_CM_EVENT_CONNECT_REQUEST) | bit(RDMA_CM_EVENT_DEVICE_REMOVAL)};
}

id::step id::request_steps::next(detail::id_state&, detail::event_record& e) {
  if (e.type != RDMA_CM_EVENT_CONNECT_REQUEST) return {unexpected(e)};
  request = std::move(e.request);
  return {};
}

id::step id::disconnect_steps::start(detail::id_state& s) {
  // Already sent, or the event loop answered the peer's disconnect: just wait for the event.
  if (const int failure = send_disconnect(s); failure != 0)
    return {failure == EINVAL ? error_code(error::not_connected) : errno_code(failure)};
  return {{}, disconnect_events};
}

id::step id::disconnect_steps::next(detail::id_state&, detail::event_record& e) {
  return {e.type == RDMA_CM_EVENT_DISCONNECTED ? error_code() : unexpected(e)};
}

id::step id::wait_disconnected_steps::start(detail::id_state&) {
  return {{}, disconnect_events};
}

id::step id::wait_disconnected_steps::next(detail::id_state&, detail::event_record& e) {
  return {e.type == RDMA_CM_EVENT_DISCONNECTED ? error_code() : unexpected(e)};
}

}  // namespace coverbs::cm
