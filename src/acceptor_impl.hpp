// The state behind coverbs::acceptor: its listeners, the accepts waiting, and the connections
// that arrived, are being set up, or are ready.
#pragma once

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>

#include "coverbs/acceptor.hpp"
#include "coverbs/cm/id.hpp"
#include "coverbs/detail/handshake.hpp"
#include "coverbs/detail/shutdown_service.hpp"

namespace coverbs::detail {

/// Listeners run only while someone waits for a connection, so an idle acceptor does not keep
/// io_context::run from returning; a connection that arrives with nobody waiting is kept.
///
/// A connection is built on the executor of the socket it goes to, so that its completions
/// and reads never run beside that socket's operations on another thread (a strand of a
/// context that several threads run). A TCP socket the kernel accepted waits unbuilt, and
/// moves to that executor when an accept takes it. An RDMA request is answered, which takes
/// a round trip, in one of two ways:
/// - for an accept on the acceptor's own executor (the usual loop), at once and on that
///   executor, so that several handshakes overlap and a client that never completes one
///   holds up nobody; the connection goes to the first such accept;
/// - for an accept onto another executor, for that accept alone, built on its executor;
///   while the handshake lasts, the accept waits for it.
/// A handshake lasts `handshake_limit` at most: a client that stops half-way is then rejected
/// (and an accept waiting for it takes the next one).
/// Everything here runs on the acceptor's executor, except the building, which runs on the
/// socket's and reports back, keeping the acceptor's context from running out of work
/// meanwhile. A handshake given up on (its accept cancelled or out of time, the acceptor
/// closed or its context shut down) never reports back: it is aborted where it runs.
class acceptor_impl : public handler_holder, public std::enable_shared_from_this<acceptor_impl> {
 public:
  acceptor_impl(const boost::asio::any_io_executor& ex, const socket_options& options);

  // The set-up steps of tcp::acceptor, each reporting as its counterpart on a TCP acceptor;
  // the constructor with an endpoint takes them all.
  error_code open(const boost::asio::ip::tcp& protocol);
  error_code bind(const boost::asio::ip::tcp::endpoint& endpoint);
  error_code listen(int backlog);
  boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const;

  /// Takes the next connection for a socket on `socket_executor`; the handler is never
  /// called from inside this call. Returns the accept's number (never 0).
  std::uint64_t accept(accept_handler handler, const boost::asio::any_io_executor& socket_executor);
  /// Ends accept `id` with operation_aborted if it still waits, or (where `reject`) waits for
  /// its handshake, that client being rejected. One whose connection is on its way to it
  /// completes with it, unless that falls through: then it ends instead of waiting again.
  void cancel_accept(std::uint64_t id, bool reject);
  /// Ends the accepts waiting, and those whose handshake is under way (that client is
  /// rejected), with operation_aborted, and stops listening until the next accept.
  void cancel();
  /// As cancel, then aborts the handshakes under way for later accepts, refuses the
  /// connections nobody took, and stops listening.
  void close();
  void destroy_handlers() noexcept override;

  std::optional<boost::asio::ip::tcp::acceptor> tcp_;
  std::optional<cm::id> rdma_;

 private:
  struct waiter {
    accept_handler handler;
    boost::asio::any_io_executor executor;  ///< the socket's: where the connection is built
    std::uint64_t id = 0;                   ///< for cancel_accept
  };
  struct tcp_arrival {
    boost::asio::ip::tcp::socket socket;
    std::shared_ptr<void> place;
  };
  struct rdma_arrival {  ///< a request not yet answered: rdma_cm keeps its client waiting
    cm::id request;
    stream_geometry peer;
    std::shared_ptr<void> place;
  };
  using arrival = std::variant<tcp_arrival, rdma_arrival>;
  /// What a handshake running on the socket's executor shares with the acceptor, which may
  /// give up on it meanwhile (from its own executor, hence the lock).
  struct handshake_link {
    std::mutex mutex;
    std::shared_ptr<acceptor_impl> owner;    ///< null once given up on: nothing reports back then
    boost::asio::any_io_executor report_to;  ///< the acceptor's, keeping its context's work
    boost::asio::any_io_executor where;      ///< the socket's, where the handshake runs
    bool accepting = false;                  ///< the accept was sent: `abort` reaches it
    bool reported = false;                   ///< its result is on its way back
    boost::asio::cancellation_signal abort;  ///< emitted on `where` only
  };
  /// An RDMA handshake under way: for `taker` alone, or (none) for the next accept on the
  /// acceptor's executor.
  struct handshake {
    std::optional<waiter> taker;
    std::optional<boost::asio::steady_timer> deadline;  ///< handshake_limit from its answer
    std::shared_ptr<handshake_link> link;
  };
  using handshake_list = std::list<handshake>;

  error_code make_listener(std::optional<cm::id>& listener);
  std::shared_ptr<void> admit();
  void fail(accept_handler handler, error_code ec);
  void complete(accept_handler handler, error_code ec, connection c);
  void requeue(waiter w);
  void remember_cancelled(std::uint64_t id);
  bool on_own_executor(const waiter& w) const { return w.executor == executor_; }

  void serve();
  void arrived(arrival a);
  void listener_failed(error_code ec);
  void run_listeners();
  void stop_listeners();
  void accept_tcp();
  void hand_over(waiter w, tcp_arrival a);
  void accept_rdma();
  void request_arrived(cm::id request);
  void answer(std::optional<waiter> taker, rdma_arrival a);
  static void build(const std::shared_ptr<handshake_link>& link, rdma_arrival a,
                    const socket_options& options);
  static void report(const std::shared_ptr<handshake_link>& link, error_code ec,
                     std::shared_ptr<rdma_stream> stream, connection c);
  void handshake_done(const std::shared_ptr<handshake_link>& link, error_code ec,
                      const std::shared_ptr<rdma_stream>& stream, connection c);
  void ready(connection c);
  /// What giving up on a handshake found: its result on its way back, or the handshake still
  /// running there, with the accept sent (so `abort` reaches it) or not yet.
  enum class detached { too_late, before_accepting, while_accepting };
  void handshake_expired(const std::weak_ptr<handshake_link>& which);
  /// The handshake `link` serves, or end() where it has ended.
  handshake_list::iterator find_handshake(const std::shared_ptr<handshake_link>& link);
  static detached detach(handshake_link& link);
  void abandon(handshake_list::iterator at);
  void cancel_accept_here(std::uint64_t id, bool reject);
  /// Gives up on the handshake at `at` for its taker, which ends aborted; false where the
  /// result is on its way already (the accept then completes with it).
  bool abort_taker(handshake_list::iterator at);
  static void give_up(const std::shared_ptr<handshake_link>& link, detached how);

  boost::asio::any_io_executor executor_;
  socket_options options_;
  std::deque<waiter> waiters_;
  std::deque<arrival> arrived_;
  handshake_list handshakes_;
  std::deque<connection> ready_;                    ///< RDMA, built on executor_ for the next accept there
  boost::asio::cancellation_signal stop_rdma_;      ///< ends the RDMA listener's wait
  std::shared_ptr<std::atomic<std::size_t>> open_;  ///< connections holding a place
  boost::asio::ip::tcp::endpoint endpoint_;         ///< bound to (TCP's own where it listens)
  boost::asio::ip::tcp family_ = boost::asio::ip::tcp::v4();  ///< open()'s
  bool tcp_running_ = false, rdma_running_ = false, closed_ = false, listening_ = false, bound_ = false;
  std::uint64_t accepts_started_ = 0;
  /// Accepts cancelled while their connection was on its way: should it fall through, they end
  /// rather than wait again. The latest few only (ids are never reused).
  std::deque<std::uint64_t> cancelled_in_flight_;
};

}  // namespace coverbs::detail
