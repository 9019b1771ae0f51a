#include "coverbs/cm/event_service.hpp"

#include <fcntl.h>

#include <algorithm>
#include <boost/asio/error.hpp>
#include <exception>

#include "coverbs/detail/throw_error.hpp"

namespace coverbs::cm {
namespace detail {

void wait_list::push(wait_op* op) noexcept {
  op->next = nullptr;
  (tail != nullptr ? tail->next : head) = op;
  tail = op;
}

wait_op* wait_list::pop() noexcept {
  wait_op* op = head;
  if (op != nullptr) {
    head = op->next;
    if (head == nullptr) tail = nullptr;
    op->next = nullptr;
  }
  return op;
}

wait_op* wait_list::take(rdma_cm_event_type type) noexcept {
  for (wait_op* op = head; op != nullptr; op = op->next) {
    if ((op->mask & bit(type)) != 0) {
      erase(op);
      return op;
    }
  }
  return nullptr;
}

bool wait_list::erase(wait_op* op) noexcept {
  wait_op* prev = nullptr;
  for (wait_op* cur = head; cur != nullptr; prev = cur, cur = cur->next) {
    if (cur != op) continue;
    (prev != nullptr ? prev->next : head) = cur->next;
    if (tail == cur) tail = prev;
    cur->next = nullptr;
    return true;
  }
  return false;
}

void state_deleter::operator()(id_state* state) const noexcept {
  state->service->destroy(state);
}

void start_wait(id_state& state, wait_op* op) {
  std::exception_ptr failure;
  {
    std::lock_guard lock(state.service->mutex_);
    if (state.removed) {
      op->event.type = RDMA_CM_EVENT_DEVICE_REMOVAL;
    } else if ((op->mask & bit(RDMA_CM_EVENT_DISCONNECTED)) != 0 && state.disconnected) {
      op->event.type = RDMA_CM_EVENT_DISCONNECTED;
    } else {
      auto it = std::find_if(state.events.begin(), state.events.end(),
                             [&](const event_record& e) { return (op->mask & bit(e.type)) != 0; });
      if (it == state.events.end()) {
        state.waiters.push(op);
        ++state.service->waiting_;
        try {
          state.service->arm();
          return;
        } catch (...) {  // bad_alloc: the wait is withdrawn, and freed below, as it never began
          state.waiters.erase(op);
          --state.service->waiting_;
          failure = std::current_exception();
        }
      } else {
        op->event = std::move(*it);
        state.events.erase(it);
      }
    }
  }
  if (failure) {
    op->complete(op, false);
    std::rethrow_exception(failure);
  }
  op->complete(op, true);
}

std::unique_lock<std::mutex> lock_calls(id_state& state) {
  return std::unique_lock<std::mutex>(state.service->mutex_);
}

void cancel_wait(id_state& state, wait_op* op) noexcept {
  {
    std::lock_guard lock(state.service->mutex_);
    if (!state.waiters.erase(op)) return;  // already completing
    --state.service->waiting_;
    state.service->stop_if_idle();
  }
  op->ec = boost::asio::error::operation_aborted;
  op->complete(op, true);
}

}  // namespace detail

using detail::bit;

event_service::event_service(boost::asio::execution_context& context)
    : boost::asio::execution_context::service(context), channel_(rdma_create_event_channel()) {
  if (channel_ == nullptr) coverbs::detail::throw_errno("rdma_create_event_channel");
  // Draining reads until EAGAIN, so the reactor never blocks in rdma_get_cm_event.
  const int flags = fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    const int err = errno;
    rdma_destroy_event_channel(channel_);
    coverbs::detail::throw_errno("fcntl(O_NONBLOCK) on the rdma_cm channel", err);
  }
}

event_service::~event_service() {
  rdma_destroy_event_channel(channel_);
}

void event_service::shutdown() {
  detail::wait_list dropped;
  {
    std::lock_guard lock(mutex_);
    shut_down_ = true;
    for (detail::id_state* state : states_) {
      while (detail::wait_op* op = state->waiters.pop()) dropped.push(op);
    }
    waiting_ = 0;
    if (descriptor_) {
      // Now, while the reactor service still exists; the fd itself belongs to the channel.
      descriptor_->release();
      descriptor_.reset();
    }
  }
  // Asio's rule at shutdown: handlers are destroyed, never invoked.
  while (detail::wait_op* op = dropped.pop()) op->complete(op, false);
}

detail::state_ptr event_service::create(const boost::asio::any_io_executor& executor) {
  std::unique_ptr<detail::id_state> state(new detail::id_state(*this, executor));
  std::lock_guard lock(mutex_);
  watch_with(executor);
  if (rdma_create_id(channel_, &state->cm, state.get(), RDMA_PS_TCP) != 0) {
    coverbs::detail::throw_errno("rdma_create_id");
  }
  states_.insert(state.get());
  return detail::state_ptr(state.release());
}

void event_service::watch_with(const boost::asio::any_io_executor& executor) {
  if (!descriptor_ && !shut_down_) descriptor_.emplace(executor, channel_->fd);
}

void event_service::adopt(detail::id_state& state, const boost::asio::any_io_executor& executor) {
  event_service& from = *state.service;
  if (&from == this) return;
  // Both locks: neither event loop holds an unacknowledged event of the id (rdma_migrate_id
  // waits for those), and the kernel moves the ones not yet read to this channel.
  std::scoped_lock lock(from.mutex_, mutex_);
  watch_with(executor);
  states_.insert(&state);  // before the move, which cannot be undone, so nothing throws after it
  if (rdma_migrate_id(state.cm, channel_) != 0) {
    const int err = errno;
    states_.erase(&state);
    coverbs::detail::throw_errno("rdma_migrate_id", err);
  }
  from.states_.erase(&state);
  state.service = this;
}

const verbs::device& event_service::device_of(ibv_context* context) {
  std::lock_guard lock(mutex_);
  auto it = devices_.find(context);
  if (it == devices_.end()) it = devices_.emplace(context, verbs::device::adopt(context)).first;
  return it->second;
}

void event_service::destroy(detail::id_state* state) noexcept {
  detail::wait_list aborted;
  std::deque<detail::event_record> dropped;
  bool invoke = false;
  {
    std::lock_guard lock(mutex_);
    invoke = !shut_down_;
    while (detail::wait_op* op = state->waiters.pop()) {
      aborted.push(op);
      --waiting_;
    }
    stop_if_idle();
    dropped.swap(state->events);
    states_.erase(state);
    // Under the lock: the event loop never holds an unacknowledged event of this id then,
    // and rdma_destroy_id waits for exactly those.
    if (state->has_qp) rdma_destroy_qp(state->cm);
    if (state->cm != nullptr) rdma_destroy_id(state->cm);
  }
  while (detail::wait_op* op = aborted.pop()) {
    op->ec = boost::asio::error::operation_aborted;
    op->complete(op, invoke);
  }
  dropped.clear();  // requests nobody took: destroying them rejects them
  delete state;
}

void event_service::release(detail::id_state* state) noexcept {
  // Mutex held. Only for a request id that nobody has seen: no waits, no QP.
  states_.erase(state);
  rdma_destroy_id(state->cm);
  delete state;
}

void event_service::arm() {
  if (armed_ || shut_down_ || !descriptor_ || waiting_ == 0) return;
  // Armed once the wait stands: one that could not be registered must leave the next call to
  // try again. (The mutex is held: on_readable cannot run before the flag is set.)
  descriptor_->async_wait(boost::asio::posix::descriptor_base::wait_read,
                          [this](const boost::system::error_code& ec) { on_readable(ec); });
  armed_ = true;
}

void event_service::stop_if_idle() noexcept {
  // A read wait with nobody to serve would keep io_context::run from returning.
  if (waiting_ == 0 && armed_ && descriptor_) {
    boost::system::error_code ignored;
    descriptor_->cancel(ignored);
  }
}

// A drain that throws (bad_alloc) still re-arms, and the waits it completed still complete,
// before the exception leaves run(): the events read so far are acknowledged and delivered.
void event_service::on_readable(const boost::system::error_code& ec) {
  detail::wait_list done;
  std::exception_ptr failure;
  {
    std::lock_guard lock(mutex_);
    armed_ = false;
    if (shut_down_) return;
    try {
      if (!ec) drain(done);
    } catch (...) {
      failure = std::current_exception();
    }
    try {
      if (!ec || ec == boost::asio::error::operation_aborted) arm();
    } catch (...) {  // not armed: the next wait to start arms
      if (!failure) failure = std::current_exception();
    }
  }
  while (detail::wait_op* op = done.pop()) {
    try {
      op->complete(op, true);
    } catch (...) {  // its handler could not be posted (and is gone); the others still are
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// Every event is acknowledged, also one whose record could not be made: rdma_destroy_id waits
// for the acknowledgement of each event of its id, so one left over blocks it for good. A
// request whose record failed is refused by destroying its new id, as one past the backlog is;
// any other event is delivered without its private data rather than lost (its wait would
// never end), unless keeping it for a later wait fails too.
void event_service::drain(detail::wait_list& done) {
  rdma_cm_event* event = nullptr;
  while (rdma_get_cm_event(channel_, &event) == 0) {
    const bool request = event->event == RDMA_CM_EVENT_CONNECT_REQUEST;
    // librdmacm gives a request's new id the listener's context; it must route to its own state.
    auto* target = static_cast<detail::id_state*>((request ? event->listen_id : event->id)->context);
    detail::event_record record;
    record.type = event->event;
    record.status = event->status;
    try {
      const auto* data = static_cast<const std::byte*>(event->param.conn.private_data);
      if (data != nullptr) record.private_data.assign(data, data + event->param.conn.private_data_len);
      // Last: once the record owns the request, nothing here may throw.
      if (request) record.request = adopt_request(*target, event->id, record.private_data);
    } catch (...) {
      rdma_cm_id* const id = event->id;
      rdma_ack_cm_event(event);
      if (request) {
        rdma_destroy_id(id);
      } else if (target != nullptr) {
        deliver(*target, std::move(record), done);
      }
      throw;
    }
    rdma_ack_cm_event(event);
    if (target != nullptr) deliver(*target, std::move(record), done);
  }
}

detail::state_ptr event_service::adopt_request(detail::id_state& listener, rdma_cm_id* cm,
                                               const std::vector<std::byte>& private_data) {
  // A plain owner until it is listed: state_ptr's deleter takes the mutex, which is held here.
  std::unique_ptr<detail::id_state> state(new detail::id_state(*this, listener.executor));
  state->peer_data = private_data;
  states_.insert(state.get());
  state->cm = cm;
  cm->context = state.get();
  return detail::state_ptr(state.release());
}

void event_service::deliver(detail::id_state& state, detail::event_record&& event, detail::wait_list& done) {
  const auto type = event.type;
  if (type == RDMA_CM_EVENT_TIMEWAIT_EXIT || type == RDMA_CM_EVENT_ADDR_CHANGE) return;
  if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
    // Sticky: everyone waiting now or later learns of it, so it is never queued.
    (type == RDMA_CM_EVENT_DISCONNECTED ? state.disconnected : state.removed) = true;
    // Answer a peer's disconnect at once: its async_disconnect completes without waiting for
    // the CM's timeout, and our QP goes to ERROR, so receives still posted flush.
    if (type == RDMA_CM_EVENT_DISCONNECTED && !state.disconnect_sent.exchange(true)) {
      rdma_disconnect(state.cm);
    }
    detail::wait_list keep;
    while (detail::wait_op* op = state.waiters.pop()) {
      if (type == RDMA_CM_EVENT_DEVICE_REMOVAL || (op->mask & bit(type)) != 0) {
        op->event.type = type;  // no private data: a copy could throw, and no step reads it
        op->event.status = event.status;
        done.push(op);
        --waiting_;
      } else {
        keep.push(op);
      }
    }
    state.waiters = keep;
    return;
  }
  if (detail::wait_op* op = state.waiters.take(type)) {
    op->event = std::move(event);
    done.push(op);
    --waiting_;
    return;
  }
  if (state.events.size() >= state.capacity) {
    // A listener past its backlog refuses the request, as the kernel does at its own.
    if (event.request) {
      release(event.request.release());
      return;
    }
    // Other ids get a handful of events per connection; this bound is never reached there.
    if (state.events.front().request) release(state.events.front().request.release());
    state.events.pop_front();
  }
  try {
    state.events.push_back(std::move(event));  // strong guarantee: the event is intact if it throws
  } catch (...) {
    if (event.request) release(event.request.release());  // its deleter would take the mutex
    throw;
  }
}

}  // namespace coverbs::cm
