#include "acceptor_impl.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <system_error>

#include <sys/socket.h>
#include <unistd.h>

#include "coverbs/detail/rethrow_later.hpp"
#include "coverbs/detail/tcp_stream.hpp"

namespace coverbs::detail {

namespace asio = boost::asio;

namespace {
// How long a client's handshake may take: well past a round trip and rdma_cm's first resend of
// its reply (about 4 s), well short of its giving up (about a minute), which would hold up an
// accept onto another executor, and hold the connection's resources, until then.
constexpr std::chrono::seconds handshake_limit{10};

// The acceptor's executor, counting as work of its context until the result of building a
// connection elsewhere is back: run() must not return before the accept completes.
asio::any_io_executor tracked(const asio::any_io_executor& ex) {
  return asio::prefer(ex, asio::execution::outstanding_work.tracked);
}

// A connection nobody will take: closed where it runs, its place freed at once.
void drop(const std::shared_ptr<rdma_stream>& stream) {
  asio::post(stream->get_executor(), [stream] {
    stream->close();
    stream->keep_until_closed(nullptr);
  });
}
}  // namespace

acceptor_impl::acceptor_impl(const asio::any_io_executor& ex, const socket_options& options)
    : handler_holder(ex),
      executor_(ex),
      options_(options),
      open_(std::make_shared<std::atomic<std::size_t>>(0)) {}

error_code acceptor_impl::open(const asio::ip::tcp& protocol) {
  // As a connecting socket's (connect_any): what the clients' library would refuse.
  if (!usable_geometry(local_geometry(options_))) return asio::error::invalid_argument;
  family_ = protocol;
  error_code ec;
  if (options_.kind != transport::rdma) {
    tcp_.emplace(executor_);
    tcp_->open(protocol, ec);
  }
  return ec;
}

error_code acceptor_impl::bind(const asio::ip::tcp::endpoint& endpoint) {
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
  bound_ = true;
  return {};
}

error_code acceptor_impl::listen(int backlog) {
  if (!bound_) {  // as listen(2) binds an unbound socket: any address, a port the system picks
    if (error_code ec = bind(asio::ip::tcp::endpoint(family_, 0))) return ec;
  }
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

asio::ip::tcp::endpoint acceptor_impl::local_endpoint(error_code& ec) const {
  ec = {};
  // Not bound yet, RDMA alone reads as an unbound socket does: the family's any address, port 0.
  return tcp_ ? tcp_->local_endpoint(ec) : bound_ ? endpoint_ : asio::ip::tcp::endpoint(family_, 0);
}

std::uint64_t acceptor_impl::accept(accept_handler handler, const asio::any_io_executor& socket_executor) {
  const std::uint64_t id = ++accepts_started_;
  if (closed_) {
    fail(std::move(handler), asio::error::operation_aborted);
  } else if (!listening_) {
    fail(std::move(handler), asio::error::invalid_argument);  // as accept(2)
  } else {
    waiters_.push_back({std::move(handler), socket_executor, id});
    if (arrived_.empty() && ready_.empty()) {
      run_listeners();
    } else {
      asio::post(executor_, [self = shared_from_this()] { self->serve(); });
    }
  }
  return id;
}

void acceptor_impl::cancel() {
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiters) fail(std::move(w.handler), asio::error::operation_aborted);
  for (auto at = handshakes_.begin(); at != handshakes_.end();) {
    const auto next = std::next(at);
    if (at->taker) {
      const std::uint64_t id = at->taker->id;
      if (!abort_taker(at)) remember_cancelled(id);  // its result is on its way
    }
    at = next;
  }
  stop_listeners();  // nobody waits: run() may return, as after tcp::acceptor::cancel
}

// The signal may be raised on another thread (a strand of the handler's): the acceptor's
// state is touched on its own executor only.
void acceptor_impl::cancel_accept(std::uint64_t id, bool reject) {
  asio::dispatch(executor_, [self = weak_from_this(), id, reject] {
    if (const auto acceptor = self.lock()) acceptor->cancel_accept_here(id, reject);
  });
}

void acceptor_impl::cancel_accept_here(std::uint64_t id, bool reject) {
  const auto waiting =
      std::find_if(waiters_.begin(), waiters_.end(), [id](const waiter& w) { return w.id == id; });
  if (waiting != waiters_.end()) {
    fail(std::move(waiting->handler), asio::error::operation_aborted);
    waiters_.erase(waiting);
    if (waiters_.empty()) stop_listeners();
    return;
  }
  const auto shaking = std::find_if(handshakes_.begin(), handshakes_.end(),
                                    [id](const handshake& h) { return h.taker && h.taker->id == id; });
  if (shaking != handshakes_.end() && reject && abort_taker(shaking)) return;
  remember_cancelled(id);  // on its way (or done, or a handshake left to finish)
}

// Should the accept's connection fall through, the accept ends (requeue) instead of waiting
// for the next one.
void acceptor_impl::remember_cancelled(std::uint64_t id) {
  constexpr std::size_t remembered = 16;
  if (cancelled_in_flight_.size() == remembered) cancelled_in_flight_.pop_front();
  cancelled_in_flight_.push_back(id);
}

bool acceptor_impl::abort_taker(handshake_list::iterator at) {
  const std::shared_ptr<handshake_link> link = at->link;
  const detached how = detach(*link);
  if (how == detached::too_late) return false;
  fail(std::move(at->taker->handler), asio::error::operation_aborted);
  handshakes_.erase(at);
  give_up(link, how);
  return true;
}

void acceptor_impl::close() {
  closed_ = true;
  cancel();
  // Handshakes for the next accept here, too: a client stopped half-way would hold this
  // context's run() until rdma_cm gave up on it. One that still has its accept is one whose
  // result is on its way (cancel aborted the others): it stays, so that its accept ends when
  // that result comes (operation_aborted, as closed_ has it), not with its handler destroyed.
  for (auto at = handshakes_.begin(); at != handshakes_.end();) {
    const auto next = std::next(at);
    if (!at->taker) abandon(at);
    at = next;
  }
  // Connections nobody took are refused (or closed), not dropped: their clients would wait.
  for (auto& a : arrived_) {
    error_code ignored;
    if (auto* t = std::get_if<tcp_arrival>(&a)) t->socket.close(ignored);
    if (auto* r = std::get_if<rdma_arrival>(&a)) r->request.reject({}, ignored);
  }
  arrived_.clear();
  for (auto& c : ready_) c.stream->close();  // built here, on executor_
  ready_.clear();
  if (tcp_) {
    error_code ignored;
    tcp_->close(ignored);
  }
  rdma_.reset();
}

// A waiter's coroutine may own the acceptor, and so this: destroyed, the cycle breaks.
void acceptor_impl::destroy_handlers() noexcept {
  const auto self = weak_from_this().lock();
  if (!self) return;
  const auto waiters = std::move(waiters_);
  waiters_.clear();
  const auto handshakes = std::move(handshakes_);
  handshakes_.clear();
  // Those on other contexts go on there, and must not report to a context going away.
  for (const auto& h : handshakes) detach(*h.link);
  const auto arrived = std::move(arrived_);
  arrived_.clear();
  const auto ready = std::move(ready_);
  ready_.clear();
}

// An rdma_cm id to listen on; the error of creating one (no RDMA stack) otherwise.
error_code acceptor_impl::make_listener(std::optional<cm::id>& listener) {
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
// socket closes (on the socket's executor, hence the atomic count); null at the limit.
std::shared_ptr<void> acceptor_impl::admit() {
  struct place {
    explicit place(std::shared_ptr<std::atomic<std::size_t>> count) : open(std::move(count)) { ++*open; }
    place(const place&) = delete;
    place& operator=(const place&) = delete;
    ~place() { --*open; }
    std::shared_ptr<std::atomic<std::size_t>> open;
  };
  if (options_.max_connections != 0 && *open_ >= options_.max_connections) return nullptr;
  return std::make_shared<place>(open_);
}

void acceptor_impl::fail(accept_handler handler, error_code ec) {
  asio::post(executor_, [h = std::move(handler), ec]() mutable { std::move(h)(ec, connection{}); });
}

// An accept whose connection fell through (the client left, or the stream could not be built)
// waits for the next one, first in line, unless the acceptor has closed meanwhile.
void acceptor_impl::requeue(waiter w) {
  const auto cancelled = std::find(cancelled_in_flight_.begin(), cancelled_in_flight_.end(), w.id);
  const bool was_cancelled = cancelled != cancelled_in_flight_.end();
  if (was_cancelled) cancelled_in_flight_.erase(cancelled);
  if (closed_ || was_cancelled) return fail(std::move(w.handler), asio::error::operation_aborted);
  waiters_.push_front(std::move(w));
  serve();
}

// Pairs waiting accepts with connections, each in order; an accept on the acceptor's executor
// takes a ready one first.
void acceptor_impl::serve() {
  // Connections built here go to accepts on this executor, wherever they wait in the queue.
  while (!ready_.empty()) {
    const auto own = std::find_if(waiters_.begin(), waiters_.end(),
                                  [this](const waiter& w) { return on_own_executor(w); });
    if (own == waiters_.end()) break;
    waiter w = std::move(*own);
    waiters_.erase(own);
    connection c = std::move(ready_.front());
    ready_.pop_front();
    complete(std::move(w.handler), error_code(), std::move(c));
  }
  while (!waiters_.empty() && !arrived_.empty()) {
    arrival a = std::move(arrived_.front());
    arrived_.pop_front();
    if (auto* request = std::get_if<rdma_arrival>(&a); request && on_own_executor(waiters_.front())) {
      answer(std::nullopt, std::move(*request));  // the accept keeps waiting, for whichever is first
      continue;
    }
    waiter w = std::move(waiters_.front());
    waiters_.pop_front();
    if (auto* t = std::get_if<tcp_arrival>(&a)) {
      hand_over(std::move(w), std::move(*t));
    } else {
      answer(std::move(w), std::move(std::get<rdma_arrival>(a)));
    }
  }
  if (!waiters_.empty()) {
    run_listeners();
  } else {
    stop_listeners();
  }
}

void acceptor_impl::arrived(arrival a) {
  arrived_.push_back(std::move(a));
  serve();
}

void acceptor_impl::listener_failed(error_code ec) {
  if (waiters_.empty() || closed_) return;
  auto w = std::move(waiters_.front());
  waiters_.pop_front();
  complete(std::move(w.handler), ec, connection{});
}

// An accept's handler run here, inside the acceptor's work (the next accepts, the listeners)
// which an exception from it must not cut short.
void acceptor_impl::complete(accept_handler handler, error_code ec, connection c) {
  invoke_or_rethrow_later(executor_, std::move(handler), ec, std::move(c));
}

void acceptor_impl::run_listeners() {
  if (tcp_ && !tcp_running_) accept_tcp();
  if (rdma_ && !rdma_running_) accept_rdma();
}

// Nobody waits: a listener still armed (for an accept that has been served meanwhile) would
// keep io_context::run from returning. A connection that comes later waits for the next accept
// in the kernel's backlog, or rdma_cm's id.
void acceptor_impl::stop_listeners() {
  error_code ignored;
  if (tcp_running_) tcp_->cancel(ignored);
  if (rdma_running_) stop_rdma_.emit(asio::cancellation_type::terminal);
}

void acceptor_impl::accept_tcp() {
  tcp_running_ = true;
  tcp_->async_accept([self = shared_from_this()](error_code ec, asio::ip::tcp::socket s) {
    self->tcp_running_ = false;
    if (self->closed_) return;
    if (ec == asio::error::operation_aborted) {  // stopped: nobody waited
    } else if (ec) {
      self->listener_failed(ec);
    } else if (auto place = self->admit()) {
      self->arrived(tcp_arrival{std::move(s), std::move(place)});
    } else {
      // Over the limit. The kernel has completed the client's connect already, so reset the
      // connection before any hello: the client's stream reports connection_refused.
      error_code ignored;
      s.set_option(asio::socket_base::linger(true, 0), ignored);
      s.close(ignored);
    }
    // arrived() may have run a waiter that asked for the next connection and so re-armed
    // the listener already; a second accept would stay queued for ever, one more each time:
    // run_listeners arms only those not running.
    if (!self->waiters_.empty()) self->run_listeners();
  });
}

// The socket moves to the waiter's executor (its descriptor registered there instead), where
// its stream is built and started: the stream's first completions may come at once.
void acceptor_impl::hand_over(waiter w, tcp_arrival a) {
  error_code ec;
  const auto local = a.socket.local_endpoint(ec);
  asio::ip::tcp::endpoint remote;
  if (!ec) remote = a.socket.remote_endpoint(ec);
  asio::ip::tcp::socket socket(w.executor);
  if (!ec && a.socket.get_executor() != w.executor) {
    const int fd = a.socket.release(ec);
    if (!ec) socket.assign(local.protocol(), fd, ec);
    if (ec && fd >= 0) ::close(fd);
  } else if (!ec) {
    socket = std::move(a.socket);
  }
  if (ec) return requeue(std::move(w));  // the client left already
  // Back through the acceptor's executor, queued: dispatched from the socket's strand, the
  // accept's handler would run inside it.
  asio::dispatch(w.executor, [self = shared_from_this(), back = tracked(executor_),
                              socket = std::move(socket), place = std::move(a.place), local, remote,
                              h = std::move(w.handler), ex = w.executor, id = w.id]() mutable {
    std::shared_ptr<tcp_stream> stream;
    try {
      stream = std::make_shared<tcp_stream>(std::move(socket), self->options_.buffer_size);
      stream->set_close_timeout(self->options_.close_timeout);
      stream->keep_until_closed(std::move(place));
      stream->start();
    } catch (const std::exception&) {  // the connection is dropped; the accept waits on
      return asio::post(back, [self, h = std::move(h), ex, id]() mutable {
        self->requeue({std::move(h), ex, id});
      });
    }
    asio::post(back, [h = std::move(h), c = connection{stream, local, remote, transport::tcp}]() mutable {
      std::move(h)(error_code(), std::move(c));
    });
  });
}

void acceptor_impl::accept_rdma() {
  rdma_running_ = true;
  rdma_->async_get_request(asio::bind_cancellation_slot(
      stop_rdma_.slot(), [self = shared_from_this()](error_code ec, cm::id request) {
        self->rdma_running_ = false;
        if (self->closed_) return;
        if (ec == asio::error::operation_aborted) {  // stopped: nobody waited
        } else if (ec == asio::error::no_such_device && self->tcp_) {
          // The device is gone (rdma_cm's DEVICE_REMOVAL, for good): TCP serves alone from now
          // on, as where no device was at listen(); the accepts waiting go on waiting for it.
          self->rdma_.reset();
        } else if (ec) {
          self->listener_failed(ec);
        } else {
          self->request_arrived(std::move(request));
        }
        if (!self->waiters_.empty()) self->run_listeners();  // as accept_tcp's
      }));
}

// A request with a malformed handshake, or one over the limit, is refused at once; it never
// fails the application's accept, which waits for the next good connection.
void acceptor_impl::request_arrived(cm::id request) {
  stream_geometry peer{};
  auto place = admit();
  if (!place || parse_handshake(request.peer_private_data(), peer)) {
    error_code ignored;
    request.reject({}, ignored);  // the client's connect fails with connection_refused
    return;
  }
  arrived(rdma_arrival{std::move(request), peer, std::move(place)});
}

// Builds the stream where it will run (the taker's executor, else the acceptor's) and answers
// the request there; the rdma_cm events come there too, where the connection is finished
// before the result comes back here (queued, as for TCP).
void acceptor_impl::answer(std::optional<waiter> taker, rdma_arrival a) {
  const auto where = taker ? taker->executor : executor_;
  // The id moves to the socket's context here, so that there it touches that context's event
  // channel alone, whatever becomes of this one.
  try {
    a.request = cm::id(std::move(a.request), where);
  } catch (const std::exception&) {  // the request is refused; the accept waits on
    if (taker) requeue(std::move(*taker));
    return;
  }
  auto link = std::make_shared<handshake_link>();
  link->owner = shared_from_this();
  link->report_to = tracked(executor_);
  link->where = where;
  // Every handshake has its limit: one for the next accept here holds nobody up, but a client
  // stopped half-way would hold its queue pair and receive pool, and keep this context from
  // running out of work, until rdma_cm gave up on it (about 77 s on rxe). The handshake is made
  // in a list of its own and its limit armed there; then the accept joins it and it moves into
  // the list (splice cannot throw): a throw on the way lists no handshake without a limit, and
  // drops no accept.
  handshake_list made;
  try {
    made.push_back(handshake{std::nullopt, std::nullopt, link});
    auto& deadline = made.back().deadline;
    deadline.emplace(executor_, handshake_limit);
    deadline->async_wait([self = shared_from_this(), which = std::weak_ptr(link)](error_code ec) {
      if (!ec) self->handshake_expired(which);
    });
  } catch (const std::exception&) {  // as above
    if (taker) requeue(std::move(*taker));
    return;
  }
  made.back().taker = std::move(taker);
  handshakes_.splice(handshakes_.end(), made);
  asio::dispatch(link->where, [link, a = std::move(a), options = options_]() mutable {
    build(link, std::move(a), options);
  });
}

// On the socket's executor. Under the link's lock, so that an abort comes after the accept
// was sent or finds the handshake given up on before it began.
void acceptor_impl::build(const std::shared_ptr<handshake_link>& link, rdma_arrival a,
                          const socket_options& options) {
  std::shared_ptr<rdma_stream> stream;
  std::unique_lock lock(link->mutex);
  if (!link->owner) {
    error_code ignored;
    return a.request.reject({}, ignored);
  }
  try {
    stream = make_rdma_stream(std::move(a.request), options);
    stream->keep_until_closed(std::move(a.place));
    auto& res = *std::static_pointer_cast<rdma_resources>(stream->resources());
    res.id.async_accept(
        encode_handshake(local_geometry(options)),
        asio::bind_cancellation_slot(link->abort.slot(), [link, stream, peer = a.peer](error_code ec) {
          connection c{};
          if (!ec) watch_rdma_connection(stream);
          if (!ec) c = finish_rdma_connection(stream, peer, ec);  // else dropped: it disconnects
          report(link, ec, stream, std::move(c));
        }));
    link->accepting = true;
  } catch (const std::exception&) {  // the id is gone with its resources: rejected
    lock.unlock();
    report(link, asio::error::no_memory, stream, {});
  }
}

// On the socket's executor: the result goes back to the acceptor, unless it gave up on it.
void acceptor_impl::report(const std::shared_ptr<handshake_link>& link, error_code ec,
                           std::shared_ptr<rdma_stream> stream, connection c) {
  std::unique_lock lock(link->mutex);
  if (!link->owner) {
    lock.unlock();
    if (stream) drop(stream);
    return;
  }
  link->reported = true;
  // Posted under the lock: the acceptor's context, once it gave up on the handshake, may go.
  auto back = std::move(link->report_to);
  asio::post(back, [owner = std::move(link->owner), link, ec, stream = std::move(stream),
                    c = std::move(c)]() mutable { owner->handshake_done(link, ec, stream, std::move(c)); });
}

// Nothing comes back from a handshake now, unless its result is on its way already.
acceptor_impl::detached acceptor_impl::detach(handshake_link& link) {
  std::shared_ptr<acceptor_impl> owner;  // perhaps this: let go of outside the lock
  asio::any_io_executor back;
  std::lock_guard lock(link.mutex);
  if (link.reported) return detached::too_late;
  owner = std::move(link.owner);
  back = std::move(link.report_to);
  return link.accepting ? detached::while_accepting : detached::before_accepting;
}

// Gives up on a handshake; a result on its way back finds nothing to go to, and is dropped.
void acceptor_impl::abandon(handshake_list::iterator at) {
  const std::shared_ptr<handshake_link> link = at->link;
  handshakes_.erase(at);  // first: detach lets go of the link's owner, perhaps the last of this
  give_up(link, detach(*link));
}

// An accept sent is aborted where it runs, which destroys its id and so rejects the client.
void acceptor_impl::give_up(const std::shared_ptr<handshake_link>& link, detached how) {
  if (how == detached::while_accepting) {
    asio::post(link->where, [link] { link->abort.emit(asio::cancellation_type::terminal); });
  }
}

acceptor_impl::handshake_list::iterator acceptor_impl::find_handshake(
    const std::shared_ptr<handshake_link>& link) {
  return std::find_if(handshakes_.begin(), handshakes_.end(),
                      [&link](const handshake& h) { return h.link == link; });
}

// A client that stopped half-way: it is rejected, and its accept, if it has one, takes the
// next one. A result already on its way is taken instead. (The deadline's handler holds this.)
void acceptor_impl::handshake_expired(const std::weak_ptr<handshake_link>& which) {
  const auto link = which.lock();
  if (!link) return;  // its handshake has ended
  const auto at = find_handshake(link);
  if (at == handshakes_.end()) return;
  const detached how = detach(*link);
  if (how == detached::too_late) return;
  std::optional<waiter> taker = std::move(at->taker);
  handshakes_.erase(at);
  give_up(link, how);
  if (taker) requeue(std::move(*taker));
}

void acceptor_impl::handshake_done(const std::shared_ptr<handshake_link>& link, error_code ec,
                                   const std::shared_ptr<rdma_stream>& stream, connection c) {
  const auto at = find_handshake(link);
  const bool wanted = !ec && at != handshakes_.end() && !closed_;
  if (!wanted && stream) drop(stream);
  if (at == handshakes_.end()) return;  // given up on: its accept has completed already
  std::optional<waiter> taker = std::move(at->taker);
  handshakes_.erase(at);
  if (!taker) {
    if (wanted) ready(std::move(c));
  } else if (!wanted) {
    requeue(std::move(*taker));  // the client left: the accept waits for the next one
  } else {
    std::move(taker->handler)(error_code(), std::move(c));
  }
}

void acceptor_impl::ready(connection c) {
  ready_.push_back(std::move(c));
  serve();
}

std::uint64_t async_accept(const std::shared_ptr<acceptor_impl>& impl, accept_handler handler,
                           const asio::any_io_executor& socket_executor) {
  return impl->accept(std::move(handler), socket_executor);
}

void cancel_accept(const std::weak_ptr<acceptor_impl>& impl, std::uint64_t id, bool reject) {
  if (const auto acceptor = impl.lock()) acceptor->cancel_accept(id, reject);
}

}  // namespace coverbs::detail
