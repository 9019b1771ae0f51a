// An rdma_cm connection identifier: address resolution, connection set-up and tear-down as
// Asio asynchronous operations.
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "coverbs/cm/event_service.hpp"
#include "coverbs/completion_service.hpp"
#include "coverbs/verbs/protection_domain.hpp"
#include "coverbs/verbs/queue_pair.hpp"

namespace coverbs::cm {

/// Owns an `rdma_cm_id` (RDMA_PS_TCP, reliable connected) whose events arrive through the
/// `event_service` of its executor's context. One id is either a listener, a connection it
/// handed out, or an active side that resolves and connects. Like an Asio socket, one id must
/// not be used from two threads at once; different ids may.
///
/// Cancellation (terminal) of any async operation only stops the wait: rdma_cm cannot recall
/// a resolve, connect or accept already sent, so the id is left half-way and the only thing
/// to do with it is to destroy it (which rejects or disconnects whatever came of it).
class id {
 public:
  using executor_type = boost::asio::any_io_executor;

  /// Private data rdma_cm carries over IB and RoCE (less than the CM messages hold: RDMA_PS_TCP
  /// uses part of the request for its own header). Longer data fails with `message_size`.
  static constexpr std::size_t max_connect_private_data = 56;
  static constexpr std::size_t max_accept_private_data = 196;
  static constexpr std::size_t max_reject_private_data = 148;

  /// Creates an unbound id on `executor`'s context; throws std::system_error.
  explicit id(const executor_type& executor);
  /// Aborts pending waits (their handlers are posted with `operation_aborted`), then destroys
  /// the QP and the rdma_cm_id; a connection still up is torn down by the kernel.
  ~id() = default;
  id(id&&) noexcept = default;
  id& operator=(id&&) noexcept = default;
  /// Takes `other`'s rdma_cm_id, its operations completing on `executor` by default from now
  /// on (no operation may be pending), e.g. a request id handed to the strand or the
  /// execution context that will serve its connection. An id moved to another context gets
  /// its events through that context's event channel (rdma_migrate_id). Throws
  /// std::system_error if that fails; the id is then destroyed (a request so refused).
  id(id&& other, const executor_type& executor);

  /// The executor on which operations complete by default.
  executor_type get_executor() const noexcept { return executor_; }
  /// The rdma_cm handle (null after a move).
  rdma_cm_id* native_handle() const noexcept;
  /// False for a moved-from id or one handed out by a failed `async_get_request`.
  bool is_open() const noexcept { return state_ != nullptr; }
  /// The device the id is bound to: known after `async_resolve`, `bind` to a device's address,
  /// or for a request id. Lives as long as the execution context; throws `errc::no_device`.
  const verbs::device& device() const;

  /// Lets this id and others share a port, as long as none of them listens and each allowed it
  /// (RDMA_OPTION_ID_REUSEADDR, as SO_REUSEADDR): before bind() for this id's bind to take a
  /// port others hold, or after it for later ids to take this one's.
  void reuse_address(error_code& ec) noexcept;
  /// Binds to a local address and port (port 0: the kernel picks).
  void bind(const boost::asio::ip::tcp::endpoint& local);
  void bind(const boost::asio::ip::tcp::endpoint& local, error_code& ec) noexcept;
  /// Starts listening; up to `backlog` requests wait for `async_get_request` (0: the kernel's
  /// maximum), more are refused.
  void listen(int backlog = 0);
  void listen(int backlog, error_code& ec) noexcept;
  /// The bound local address (rdma_get_local_addr).
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  /// The peer's address (rdma_get_peer_addr).
  boost::asio::ip::tcp::endpoint remote_endpoint() const;

  /// Creates the id's RC queue pair in `pd`, with `service.queue()` as both CQs, and returns
  /// it for `async_queue_pair(service, std::move(qp))`. `pd` and `service` must be made from
  /// `device()`. The id owns the QP: `destroy_queue_pair` or the id's destructor frees it, and
  /// since a CQ or PD cannot be freed under a live QP, destroy the async_queue_pair, then the
  /// id, then `service` and `pd` (make them first, e.g. once per device). Throws.
  verbs::queue_pair create_queue_pair(completion_service& service, const verbs::protection_domain& pd,
                                      const verbs::queue_pair_options& options = {});
  /// Destroys the QP now (the async_queue_pair using it must be gone). Idempotent.
  void destroy_queue_pair() noexcept;
  /// Disconnects now, without waiting for the event (the QP moves to ERROR): once per id, the
  /// answer to a peer's disconnect included. For a close that cannot wait.
  void disconnect() noexcept;

  /// What the peer sent: the request's private data on a request id, the accept's after
  /// `async_connect`, the reject's after a refused one. Padded by the CM to its message room
  /// (56, 196 and 148 bytes on RoCE): carry lengths inside the data when they matter. Empty
  /// if the event loop could not copy it (bad_alloc, which then leaves `run()`).
  std::span<const std::byte> peer_private_data() const noexcept;

  /// Refuses a request id's connection (at most 148 bytes of private data); the requester
  /// gets `connection_refused` and this data as its `peer_private_data()`.
  void reject(std::span<const std::byte> private_data = {});
  void reject(std::span<const std::byte> private_data, error_code& ec) noexcept;

  /// Resolves `remote` to a device, then a route (each step bounded by `timeout`).
  /// Completion: `void(error_code)`; failures keep rdma_cm's errno where it gives one (e.g.
  /// `timed_out`, or `no_such_device` for an address no RDMA device reaches, such as 127.0.0.1
  /// on rxe), else `host_unreachable` / `network_unreachable`.
  template <class Token = boost::asio::default_completion_token_t<executor_type>>
  auto async_resolve(const boost::asio::ip::tcp::endpoint& remote, std::chrono::milliseconds timeout,
                     Token&& token = {}) {
    return start<void(error_code)>(resolve_steps{{}, remote, timeout}, std::forward<Token>(token));
  }

  /// Connects a resolved id, sending `private_data` (at most 56 bytes), and completes when
  /// established: `void(error_code)`. A refusal (a reject, or no listener on the port) gives
  /// `connection_refused`, no answer `host_unreachable`, a peer CM that timed out on this side
  /// `timed_out`, and a QP number the peer's CM takes for a connection it still holds
  /// `errc::stale_connection` (it disconnects that one: a new id whose QP has another number
  /// gets through at once, one with the same number once that disconnect is done). Create
  /// the QP first: without one rdma_cm announces QP number 0, and the second such connection
  /// between the same two devices is stale.
  template <class Token = boost::asio::default_completion_token_t<executor_type>>
  auto async_connect(std::span<const std::byte> private_data, Token&& token = {}) {
    return start<void(error_code)>(connect_steps(private_data), std::forward<Token>(token));
  }

  /// The next connection request on a listening id: `void(error_code, id)`. Call again for
  /// each further request; the request's private data is the new id's `peer_private_data()`.
  template <class Token = boost::asio::default_completion_token_t<executor_type>>
  auto async_get_request(Token&& token = {}) {
    return start<void(error_code, id)>(request_steps{executor_}, std::forward<Token>(token));
  }

  /// Accepts a request id's connection, answering with `private_data` (at most 196 bytes),
  /// and completes when established: `void(error_code)`; `timed_out` when the requester gave
  /// up first, `errc::stale_connection` when its CM takes this QP number for one it holds.
  /// Create the QP and post the first receives before: the peer may send as soon as it sees
  /// the accept.
  template <class Token = boost::asio::default_completion_token_t<executor_type>>
  auto async_accept(std::span<const std::byte> private_data, Token&& token = {}) {
    return start<void(error_code)>(accept_steps(private_data), std::forward<Token>(token));
  }

  /// Disconnects (the QP moves to ERROR, so its posted operations flush) and completes when
  /// the peer has answered or the CM gave up on it: `void(error_code)`.
  template <class Token = boost::asio::default_completion_token_t<executor_type>>
  auto async_disconnect(Token&& token = {}) {
    return start<void(error_code)>(disconnect_steps{}, std::forward<Token>(token));
  }

  /// Completes when the connection goes, whoever ends it: `void(error_code)`. A peer's
  /// disconnect is answered as soon as its event is read (events are read while any id of the
  /// context waits for one), which also moves the QP to ERROR: posted receives flush.
  template <class Token = boost::asio::default_completion_token_t<executor_type>>
  auto async_wait_disconnected(Token&& token = {}) {
    return start<void(error_code)>(wait_disconnected_steps{}, std::forward<Token>(token));
  }

 private:
  id(detail::state_ptr state, const executor_type& executor) noexcept
      : state_(std::move(state)), executor_(executor) {}

  // Each operation is a short sequence: `start` issues the first rdma_cm call, `next` judges
  // each awaited event. Either says what to wait for next, or (wait == 0) the result.
  struct step {
    error_code ec;
    std::uint32_t wait = 0;
  };
  struct void_result {
    template <class Self>
    void finish(Self& self, error_code ec) {
      self.complete(ec);
    }
  };
  struct resolve_steps : void_result {
    boost::asio::ip::tcp::endpoint remote;
    std::chrono::milliseconds timeout;
    bool route = false;
    step start(detail::id_state& s);
    step next(detail::id_state& s, detail::event_record& e);
  };
  // Copied at initiation: a deferred operation may start after the caller's buffer is gone.
  template <std::size_t N>
  struct data_copy {
    std::array<std::byte, N> bytes{};
    std::size_t size = 0;
    bool too_long = false;
    explicit data_copy(std::span<const std::byte> data) noexcept
        : size(data.size()), too_long(data.size() > N) {
      if (!too_long) std::copy(data.begin(), data.end(), bytes.begin());
    }
  };
  struct connect_steps : void_result, data_copy<max_connect_private_data> {
    using data_copy::data_copy;
    step start(detail::id_state& s);
    step next(detail::id_state& s, detail::event_record& e);
  };
  struct accept_steps : void_result, data_copy<max_accept_private_data> {
    using data_copy::data_copy;
    step start(detail::id_state& s);
    step next(detail::id_state& s, detail::event_record& e);
  };
  struct request_steps {
    executor_type executor;
    detail::state_ptr request{};
    step start(detail::id_state& s);
    step next(detail::id_state& s, detail::event_record& e);
    template <class Self>
    void finish(Self& self, error_code ec) {
      self.complete(ec, id(std::move(request), executor));
    }
  };
  struct disconnect_steps : void_result {
    step start(detail::id_state& s);
    step next(detail::id_state& s, detail::event_record& e);
  };
  struct wait_disconnected_steps : void_result {
    step start(detail::id_state& s);
    step next(detail::id_state& s, detail::event_record& e);
  };

  template <class Steps>
  struct operation {
    detail::id_state* state;
    std::weak_ptr<void> alive;  ///< the state's (see id_state::alive)
    Steps steps;
    int phase = 0;  // 0: not started, 1: waiting for events, 2: finishing a posted result
    error_code result{};

    template <class Self>
    void operator()(Self& self, error_code ec = {}, detail::event_record event = {}) {
      step s;
      if (phase == 0) {
        s = state != nullptr ? steps.start(*state) : step{boost::asio::error::bad_descriptor};
        if (s.wait == 0) {
          // Never complete inside the initiating function.
          result = s.ec;
          phase = 2;
          boost::asio::post(std::move(self));
          return;
        }
        phase = 1;
      } else if (phase == 2) {
        steps.finish(self, result);
        return;
      } else if (!ec && alive.expired()) {  // the id went after the event was handed over
        s = step{boost::asio::error::operation_aborted};
      } else {
        s = ec ? step{ec} : steps.next(*state, event);
      }
      if (s.wait != 0 && self.cancelled() != boost::asio::cancellation_type::none) {
        s = step{boost::asio::error::operation_aborted};
      }
      if (s.wait != 0) {
        detail::async_wait_event(*state, s.wait, std::move(self));
        return;
      }
      steps.finish(self, s.ec);
    }
  };

  template <class Signature, class Steps, class Token>
  auto start(Steps steps, Token&& token) {
    std::weak_ptr<void> alive;
    if (state_) alive = state_->alive;
    return boost::asio::async_compose<Token, Signature>(
        operation<Steps>{state_.get(), std::move(alive), std::move(steps)}, token, executor_);
  }

  detail::state_ptr state_;
  executor_type executor_;
};

}  // namespace coverbs::cm
