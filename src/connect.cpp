#include "coverbs/detail/connect.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>

#include "coverbs/cm/event_service.hpp"
#include "coverbs/detail/handshake.hpp"
#include "coverbs/detail/tcp_stream.hpp"
#include "coverbs/socket.hpp"

namespace coverbs::detail {
namespace asio = boost::asio;

namespace {

// What an exception thrown while connecting says, as the connect's completion reports it.
error_code to_error_code(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& x) {
    return x.code();
  } catch (const std::system_error& x) {
    return x.code();
  } catch (const std::bad_alloc&) {
    return make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    return make_error_code(std::errc::io_error);
  }
}

}  // namespace

stream_geometry local_geometry(const socket_options& options) {
  return {options.receive_buffers, options.buffer_size};
}

std::shared_ptr<rdma_stream> make_rdma_stream(cm::id id, const socket_options& options) {
  auto res = std::make_shared<rdma_resources>(std::move(id));
  const verbs::device& dev = res->id.device();
  res->pd.emplace(dev);
  // Room for the whole pool plus control slots on the receive side, and as many sends.
  const std::uint32_t depth = options.receive_buffers + rdma_stream::control_slots;
  verbs::queue_pair_options qp_options{.max_send_wr = depth + 64, .max_recv_wr = depth};
  // The CQ holds a completion for every request the QP can have posted (and the send queue's
  // error marker, posted beyond its depth): when the QP goes to the error state all of them
  // complete at once, and an overrun CQ would lose some.
  const int entries = std::max(completion_options{}.entries,
                               static_cast<int>(qp_options.max_send_wr + qp_options.max_recv_wr + 1));
  res->service.emplace(
      res->id.get_executor(), dev,
      completion_options{
          .mode = options.mode, .spin = options.spin, .max_spin = options.max_spin, .entries = entries});
  auto qp = std::make_unique<async_queue_pair>(*res->service,
                                               res->id.create_queue_pair(*res->service, *res->pd, qp_options));
  auto stream = std::make_shared<rdma_stream>(res, std::move(qp), *res->pd, local_geometry(options));
  stream->set_zero_copy_messages(options.zero_copy_messages);
  stream->set_close_timeout(options.close_timeout);
  stream->start();
  return stream;
}

void watch_rdma_connection(const std::shared_ptr<rdma_stream>& stream) {
  auto& res = *std::static_pointer_cast<rdma_resources>(stream->resources());
  std::weak_ptr<rdma_stream> weak = stream;
  res.id.async_wait_disconnected([weak](error_code) {
    if (auto s = weak.lock()) s->peer_disconnected();
  });
  // Immediate on an id with an event channel; the peer sees DISCONNECTED. The id lives as long
  // as the stream's resources.
  stream->on_close([id = &res.id] { id->disconnect(); });
}

connection finish_rdma_connection(const std::shared_ptr<rdma_stream>& stream, stream_geometry peer,
                                  error_code& ec) {
  // The peer's pool, within the handshake's limit, may still be more than this process may
  // allocate or pin (RLIMIT_MEMLOCK): the connection fails, not the caller's io_context::run.
  try {
    stream->set_peer(peer);
  } catch (...) {
    ec = to_error_code(std::current_exception());
    return {};
  }
  auto& res = *std::static_pointer_cast<rdma_resources>(stream->resources());
  return {stream, res.id.local_endpoint(), res.id.remote_endpoint(), transport::rdma};
}

namespace {

// A stale reject: the peer's CM took the QP's number for a connection it still holds and is
// dropping that one; a new QP, with another number, gets through. Where a vanished process
// held several connections to the peer, a cyclic allocator may hand out their numbers again in
// turn: each reject still drops one of them, so a few more tries are allowed.
constexpr int connect_attempts_when_stale = 8;

using local_endpoint = std::optional<asio::ip::tcp::endpoint>;

// Sets `o` on `s`; the kernel's refusal is thrown.
void set_option(asio::ip::tcp::socket& s, const raw_socket_option& o) {
  if (error_code ec = set_raw_option(s.native_handle(), o.level, o.name, o.value.data(), o.value.size())) {
    throw boost::system::system_error(ec, "set_option");
  }
}

// Binds a connect's id to `local`: resolving a bound id keeps its address, so the address
// chooses the device. A chosen port is taken alone, as bind(2) without SO_REUSEADDR would; but
// the id of this socket's previous attempt (coverbs::async_connect's endpoint before) holds
// it until its queue pair has been flushed, a few milliseconds, so the bind is tried again for
// up to a second before the port counts as in use. rdma_cm reports such a conflict as
// EADDRINUSE, or as EADDRNOTAVAIL where either address is a wildcard; socket::bind has made
// sure the address is this machine's, so both mean the port is taken. Once bound, an id lets
// the next one share the port: a stale retry binds while the rejected one is kept (`shared`).
asio::awaitable<void> bind_local(cm::id& id, const asio::ip::tcp::endpoint& local, bool shared) {
  if (local.port() == 0) {
    id.bind(local);
    co_return;
  }
  error_code ec;
  if (shared) id.reuse_address(ec);
  for (int tries = 1; !ec; ++tries) {
    id.bind(local, ec);
    if (ec == std::errc::address_not_available) ec = asio::error::address_in_use;
    if (ec != asio::error::address_in_use || tries == 50) break;
    asio::steady_timer pause(id.get_executor(), std::chrono::milliseconds(20));
    co_await pause.async_wait(asio::use_awaitable);
    ec = {};
  }
  if (!ec && !shared) id.reuse_address(ec);
  if (ec) throw boost::system::system_error(ec, "rdma_bind_addr");
}

asio::awaitable<connection> connect_rdma(asio::ip::tcp::endpoint peer, local_endpoint local,
                                         socket_options options) {
  const auto hello = encode_handshake(local_geometry(options));
  std::shared_ptr<rdma_stream> stream, rejected;
  for (int attempt = 1;; ++attempt) {
    cm::id id(co_await asio::this_coro::executor);
    if (local) co_await bind_local(id, *local, attempt > 1);
    co_await id.async_resolve(peer, options.resolve_timeout, asio::use_awaitable);
    stream = make_rdma_stream(std::move(id), options);
    rejected.reset();  // kept until now, so that the new QP could not be given its number
    auto& res = *std::static_pointer_cast<rdma_resources>(stream->resources());
    auto [ec] = co_await res.id.async_connect(hello, asio::as_tuple(asio::use_awaitable));
    if (!ec) break;
    stream->close();
    if (ec != make_error_code(errc::stale_connection) || attempt == connect_attempts_when_stale) {
      throw boost::system::system_error(ec, "rdma connect");
    }
    rejected = std::move(stream);
  }
  auto& res = *std::static_pointer_cast<rdma_resources>(stream->resources());
  watch_rdma_connection(stream);  // so that a close() below disconnects: the server learns
  stream_geometry their{};
  error_code ec(parse_handshake(res.id.peer_private_data(), their));
  connection c{};
  if (!ec) c = finish_rdma_connection(stream, their, ec);
  if (ec) {
    stream->close();
    throw boost::system::system_error(ec, "rdma handshake");
  }
  co_return c;
}

asio::awaitable<connection> connect_tcp(asio::ip::tcp::endpoint peer, const connect_setup& setup,
                                        socket_options options) {
  asio::ip::tcp::socket s(co_await asio::this_coro::executor);
  if (!setup.options.empty() && setup.family && *setup.family != peer.protocol()) {
    throw boost::system::system_error(asio::error::address_family_not_supported, "set_option");
  }
  if (setup.local || !setup.options.empty()) {
    s.open(peer.protocol());
    // Before the bind: reuse_address; before the connect: buffer sizes.
    for (const raw_socket_option& o : setup.options) set_option(s, o);
  }
  if (setup.local) s.bind(*setup.local);
  co_await s.async_connect(peer, asio::use_awaitable);
  const auto from = s.local_endpoint(), to = s.remote_endpoint();
  auto stream = std::make_shared<tcp_stream>(std::move(s), options.buffer_size, true);
  stream->set_close_timeout(options.close_timeout);
  // The stream turns no_delay on; the user's word stands. Only that one is set again: some
  // options (IPV6_V6ONLY) are refused once a socket is bound or connected.
  for (const raw_socket_option& o : setup.options) {
    if (o.level == IPPROTO_TCP && o.name == TCP_NODELAY) set_option(stream->socket(), o);
  }
  stream->start();
  co_return connection{stream, from, to, transport::tcp};
}

// RDMA unless there is no device, or nothing on the peer answers RDMA: then TCP.
bool falls_back(const error_code& ec) {
  return ec == asio::error::connection_refused || ec == asio::error::host_unreachable ||
         ec == asio::error::network_unreachable || ec == asio::error::timed_out ||
         ec == std::errc::no_such_device || ec == std::errc::address_not_available ||
         ec == make_error_code(errc::no_device);
}

// A machine may show devices whose rdma_cm cannot be used (its device node missing or not
// allowed, as in a container given only the verbs device): there the automatic transport is
// TCP. Another failure (out of descriptors, say) is the connect's. (An automatic acceptor
// serves TCP on any failure to make its rdma_cm listener: it tries one on every machine, and
// must serve where there is no RDMA at all, whatever rdma_cm says there.) The context's event
// service is made once; a failure leaves none.
bool rdma_cm_usable(const asio::any_io_executor& executor) {
  try {
    (void)asio::use_service<cm::event_service>(asio::query(executor, asio::execution::context));
    return true;
  } catch (const std::system_error& e) {
    const std::error_code& ec = e.code();
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::permission_denied ||
        ec == std::errc::operation_not_permitted || ec == std::errc::no_such_device ||
        ec == std::errc::no_such_device_or_address)
      return false;
    throw;
  }
}

asio::awaitable<connection> connect_any(asio::ip::tcp::endpoint peer, connect_setup setup,
                                        socket_options options) {
  // Over TCP too: the same options mean the same on either transport.
  if (!usable_geometry(local_geometry(options))) {
    throw boost::system::system_error(asio::error::invalid_argument, "socket_options");
  }
  switch (options.kind) {
    case transport::rdma: co_return co_await connect_rdma(peer, setup.local, options);
    case transport::tcp: co_return co_await connect_tcp(peer, setup, options);
    case transport::automatic: break;
  }
  error_code rdma_error;
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  if (!verbs::device::names().empty() && rdma_cm_usable(executor)) {
    try {
      co_return co_await connect_rdma(peer, setup.local, options);
    } catch (const boost::system::system_error& e) {
      rdma_error = e.code();
    } catch (const std::system_error& e) {
      rdma_error = e.code();
    }
    if (!falls_back(rdma_error)) throw boost::system::system_error(rdma_error, "rdma connect");
  }
  co_return co_await connect_tcp(peer, setup, options);
}

}  // namespace

void async_connect(const asio::any_io_executor& executor, const asio::ip::tcp::endpoint& peer,
                   const connect_setup& setup, const socket_options& options, connect_handler handler) {
  // co_spawn hands the handler's cancellation slot to the coroutine, which passes it to each
  // resolve and connect step it awaits: a cancel ends whichever is pending.
  auto slot = asio::get_associated_cancellation_slot(handler);
  asio::co_spawn(executor, connect_any(peer, setup, options),
                 asio::bind_cancellation_slot(
                     slot, [handler = std::move(handler)](std::exception_ptr e, connection c) mutable {
                       std::move(handler)(e ? to_error_code(e) : error_code(), std::move(c));
                     }));
}

}  // namespace coverbs::detail
