// The rdma_cm event channel of one Asio execution context, and how its events reach the ids.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "coverbs/error.hpp"
#include "coverbs/verbs/device.hpp"

namespace coverbs::cm {

class event_service;

namespace detail {

struct id_state;
/// Aborts the state's waits, then destroys its QP and rdma_cm_id (the kernel rejects or
/// disconnects whatever connection it had).
struct state_deleter {
  void operator()(id_state* state) const noexcept;
};
using state_ptr = std::unique_ptr<id_state, state_deleter>;

/// What is kept of one rdma_cm event; the event itself is acknowledged as soon as it is read.
struct event_record {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_RESOLVED;
  int status = 0;
  std::vector<std::byte> private_data;  ///< as the kernel gave it: padded to the CM message's room
  state_ptr request;                    ///< CONNECT_REQUEST: the new connection's id
};

/// The bit of `type` in a wait mask.
constexpr std::uint32_t bit(rdma_cm_event_type type) noexcept {
  return 1u << type;
}

/// A pending wait of one id for one of the event types in `mask`.
struct wait_op {
  /// Hands `ec` and `event` to the handler (always posted); with `invoke` false, only frees.
  using complete_fn = void (*)(wait_op*, bool invoke);
  wait_op(complete_fn fn, std::uint32_t m) noexcept : complete(fn), mask(m) {}
  complete_fn complete;
  std::uint32_t mask;
  wait_op* next = nullptr;
  error_code ec;
  event_record event;
};

/// Intrusive FIFO of waits: detaching them never allocates (it happens in destructors).
struct wait_list {
  wait_op* head = nullptr;
  wait_op* tail = nullptr;
  void push(wait_op* op) noexcept;
  wait_op* pop() noexcept;
  /// Removes and returns the first wait whose mask has `type`, or null.
  wait_op* take(rdma_cm_event_type type) noexcept;
  bool erase(wait_op* op) noexcept;
};

/// One rdma_cm_id and what its waits share with the event loop.
struct id_state {
  id_state(event_service& svc, const boost::asio::any_io_executor& ex) : service(&svc), executor(ex) {}
  event_service* service;  ///< changes only when its owner moves it (no waits pending)
  boost::asio::any_io_executor executor;
  rdma_cm_id* cm = nullptr;
  // Guarded by the service's mutex: the event loop writes these.
  std::deque<event_record> events;  ///< arrived while nobody waited for them
  wait_list waiters;
  std::size_t capacity = 8;   ///< bound of `events`; a listener's is its backlog
  bool disconnected = false;  ///< DISCONNECTED arrived (sticky: every later wait sees it)
  bool removed = false;       ///< DEVICE_REMOVAL arrived (sticky)
  /// Set by whoever calls rdma_disconnect first: the owner, or the event loop answering a
  /// peer's disconnect.
  std::atomic<bool> disconnect_sent{false};
  // Touched only by the id's owner.
  bool has_qp = false;
  std::vector<std::byte> peer_data;
  /// Held by the state alone: an operation whose event is on its way when the id goes (the
  /// wait complete, its handler not yet run) finds it expired and touches nothing.
  std::shared_ptr<void> alive = std::make_shared<char>();
};

/// Completes `op` with the first matching event of `state`, queued or yet to come. Owns `op`:
/// if it throws (bad_alloc), `op` is freed without its handler running.
void start_wait(id_state& state, wait_op* op);
/// Held while the id's owner calls into rdma_cm (resolve, connect, accept): librdmacm writes
/// the rdma_cm_id's fields there and in rdma_get_cm_event on the event loop's thread, in an
/// order that only the kernel keeps, which ThreadSanitizer cannot see; and while it disconnects
/// or destroys the QP, which the event loop's answer to a peer's disconnect moves to ERROR.
std::unique_lock<std::mutex> lock_calls(id_state& state);
/// Withdraws `op` if it still waits, completing it with `operation_aborted`.
void cancel_wait(id_state& state, wait_op* op) noexcept;

template <class Handler>
class wait_handler final : public wait_op {
 public:
  using allocator_type = typename std::allocator_traits<boost::asio::associated_allocator_t<
      Handler, boost::asio::recycling_allocator<void>>>::template rebind_alloc<wait_handler>;

  static wait_handler* create(Handler&& handler, const boost::asio::any_io_executor& io_executor,
                              std::uint32_t mask) {
    allocator_type alloc(
        boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    wait_handler* op = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    return ::new (static_cast<void*>(op)) wait_handler(std::move(handler), io_executor, mask);
  }

  void watch_cancellation(id_state& state) {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) slot.template emplace<canceller>(this, &state);
  }

 private:
  struct canceller {
    wait_op* op;
    id_state* state;
    void operator()(boost::asio::cancellation_type type) const {
      if (type != boost::asio::cancellation_type::none) cancel_wait(*state, op);
    }
  };

  wait_handler(Handler&& handler, const boost::asio::any_io_executor& io_executor, std::uint32_t mask)
      : wait_op(&do_complete, mask),
        handler_(std::move(handler)),
        work_(boost::asio::get_associated_executor(handler_, io_executor)) {}

  static void do_complete(wait_op* base, bool invoke) {
    auto* self = static_cast<wait_handler*>(base);
    auto slot = boost::asio::get_associated_cancellation_slot(self->handler_);
    if (slot.is_connected()) slot.clear();
    Handler handler(std::move(self->handler_));
    auto work(std::move(self->work_));
    const error_code ec = self->ec;
    event_record event(std::move(self->event));
    allocator_type alloc(
        boost::asio::get_associated_allocator(handler, boost::asio::recycling_allocator<void>()));
    self->~wait_handler();
    std::allocator_traits<allocator_type>::deallocate(alloc, self, 1);
    if (invoke) {
      boost::asio::post(work.get_executor(), boost::asio::append(std::move(handler), ec, std::move(event)));
    }
  }

  Handler handler_;
  boost::asio::executor_work_guard<boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>>
      work_;
};

/// Waits for the next event of `state` whose type is in `mask`.
/// Completion: `void(error_code, event_record)`; cancellation only stops the wait.
template <class Token>
auto async_wait_event(id_state& state, std::uint32_t mask, Token&& token) {
  return boost::asio::async_initiate<Token, void(error_code, event_record)>(
      [](auto handler, id_state* state, std::uint32_t mask) {
        using op_type = wait_handler<std::decay_t<decltype(handler)>>;
        op_type* op = op_type::create(std::move(handler), state->executor, mask);
        try {
          op->watch_cancellation(*state);  // may allocate in the slot
        } catch (...) {
          op->complete(op, false);
          throw;
        }
        start_wait(*state, op);
      },
      token, &state, mask);
}

}  // namespace detail

/// Owns the context's `rdma_event_channel` (non-blocking, in the reactor). It reads events
/// only while some id waits for one, so an idle `io_context::run` returns; each wake-up takes
/// every pending event, acknowledges it at once and hands it to its id, which keeps what
/// nobody waits for yet. Every `cm::id` of the context uses it; they must be destroyed before
/// the context. Thread-safe: ids of one context may be used from different threads. Should
/// memory run out while it reads events, the bad_alloc leaves `run()` with every event read
/// acknowledged and every wait it ended completed; running the context again goes on.
class event_service : public boost::asio::execution_context::service {
 public:
  /// Asio's service key.
  static inline boost::asio::execution_context::id id;

  /// Creates the event channel; throws std::system_error when rdma_cm is unavailable.
  explicit event_service(boost::asio::execution_context& context);
  ~event_service() override;

  /// Internal: a new rdma_cm_id (RDMA_PS_TCP) on this channel, whose waits complete on
  /// `executor` by default. Throws std::system_error.
  detail::state_ptr create(const boost::asio::any_io_executor& executor);
  /// Internal: moves an id with no waits pending from its service to this one (rdma_migrate_id
  /// to this channel), for an id handed to another execution context. Throws std::system_error.
  void adopt(detail::id_state& state, const boost::asio::any_io_executor& executor);
  /// The device object for rdma_cm's `context`. It lives as long as this service, so a
  /// completion service or protection domain made from it may outlive every id.
  const verbs::device& device_of(ibv_context* context);

 private:
  friend struct detail::state_deleter;
  friend void detail::start_wait(detail::id_state&, detail::wait_op*);
  friend std::unique_lock<std::mutex> detail::lock_calls(detail::id_state&);
  friend void detail::cancel_wait(detail::id_state&, detail::wait_op*) noexcept;

  void shutdown() override;
  void destroy(detail::id_state* state) noexcept;
  void release(detail::id_state* state) noexcept;
  void arm();
  void watch_with(const boost::asio::any_io_executor& executor);  // mutex held
  void stop_if_idle() noexcept;
  void on_readable(const boost::system::error_code& ec);
  void drain(detail::wait_list& done);
  detail::state_ptr adopt_request(detail::id_state& listener, rdma_cm_id* cm,
                                  const std::vector<std::byte>& private_data);
  void deliver(detail::id_state& state, detail::event_record&& event, detail::wait_list& done);

  std::mutex mutex_;
  rdma_event_channel* channel_ = nullptr;
  std::optional<boost::asio::posix::stream_descriptor> descriptor_;
  std::set<detail::id_state*> states_;
  std::map<ibv_context*, verbs::device> devices_;
  std::size_t waiting_ = 0;
  bool armed_ = false;
  bool shut_down_ = false;
};

}  // namespace coverbs::cm
