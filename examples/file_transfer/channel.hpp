// One connection's control messages, and how its failures read to a user.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <coverbs/socket.hpp>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "protocol.hpp"

namespace ft {

namespace asio = boost::asio;

/// Ends a request or a transfer; `what()` is the one line a user reads.
class transfer_error : public std::runtime_error {
 public:
  enum class origin {
    local,       ///< this side failed: the peer must be told (channel::give_up)
    peer,        ///< the peer refused or gave up, and said why
    connection,  ///< the connection ended or broke
  };
  transfer_error(origin o, const std::string& what) : std::runtime_error(what), origin_(o) {}
  origin from() const noexcept { return origin_; }

 private:
  origin origin_;
};

/// The local failure of hashing `name`: OpenSSL or xxHash could not compute its checksum.
[[noreturn]] inline void throw_hash_failure(const std::string& name, checksum_kind kind) {
  throw transfer_error(transfer_error::origin::local,
                       "cannot hash " + name + ": " + std::string(ft::name(kind)) + " failed");
}

class channel {
 public:
  /// `peer` names the other side in messages: "server" or "client".
  channel(coverbs::socket& socket, std::string peer, std::chrono::seconds timeout)
      : socket_(socket),
        peer_(std::move(peer)),
        in_(64 * 1024),
        watch_(std::make_shared<watch>(socket, timeout)) {
    watch::arm(watch_, this);
  }
  ~channel() {
    watch_->cancelled = true;
    watch_->timer.cancel();
  }
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;

  coverbs::socket& socket() noexcept { return socket_; }
  const std::string& peer() const noexcept { return peer_; }
  /// Something happened: the peer is alive (see the timeout).
  void activity() noexcept { watch_->last = std::chrono::steady_clock::now(); }
  /// Closes the connection; operations under way fail with `reason` (the first one given).
  void abort(const std::string& reason) {
    if (reason_.empty()) reason_ = reason;
    socket_.close();
  }

  asio::awaitable<void> send(const message& m) {
    out_ = encode(m);
    auto [ec, n] = co_await socket_.async_send(asio::buffer(out_), asio::as_tuple(asio::use_awaitable));
    if (ec) co_await failed(ec);
  }

  asio::awaitable<message> receive() {
    auto m = co_await next();
    if (!m)
      throw transfer_error(transfer_error::origin::connection, "the " + peer_ + " closed the connection");
    co_return *m;
  }

  /// The next message, or nothing when the peer ended the connection in order instead.
  asio::awaitable<std::optional<message>> next() {
    auto [ec, n] = co_await socket_.async_receive(asio::buffer(in_), asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::eof && reason_.empty()) co_return std::nullopt;
    if (ec) co_await failed(ec);
    activity();
    auto m = decode(std::span(in_.data(), n));
    if (!m)
      throw transfer_error(transfer_error::origin::connection, "the " + peer_ + " sent a malformed message");
    co_return m;
  }

  /// The next message, which must be of type `want`; an error message throws its reason.
  asio::awaitable<message> expect(type want) {
    message m = co_await receive();
    if (m.kind == type::error) throw transfer_error(transfer_error::origin::peer, peer_ + ": " + m.text);
    if (m.kind != want) {
      throw transfer_error(transfer_error::origin::connection, "the " + peer_ + " broke the protocol");
    }
    co_return m;
  }

  /// Throws the error a user should read for a failed operation on this connection. When the
  /// connection has ended, the peer may have said why just before: its error message wins.
  asio::awaitable<void> failed(coverbs::error_code ec) {
    using origin = transfer_error::origin;
    if (!reason_.empty()) throw transfer_error(origin::local, reason_);
    if (auto why = co_await last_words()) throw transfer_error(origin::peer, peer_ + ": " + *why);
    if (ec == asio::error::eof || ec == asio::error::broken_pipe || ec == asio::error::connection_reset ||
        ec == coverbs::wc_errc::flushed || ec == coverbs::wc_errc::retry_exceeded) {
      throw transfer_error(origin::connection, "the " + peer_ + " closed the connection");
    }
    // A one-sided failure, for one: the peer may have died with its window (remote access).
    throw transfer_error(origin::connection, "lost the connection to the " + peer_ + ": " + ec.message());
  }

  /// Awaits `work`, a long wait of this side's own (flushing a received file to the disk),
  /// telling the peer four times a second that this side is still there (busy): the peer,
  /// waiting for the verdict, would take the silence for a dead connection (its timeout may be
  /// shorter than this side's), and so would this side's own watch. Returns, or rethrows what
  /// `work` throws, only once `work` has ended, even when the caller is cancelled.
  asio::awaitable<void> keep_peer_waiting(asio::awaitable<void> work) {
    // A cancelled caller must not leave before `work`, which refers to its frame.
    const bool throw_if_cancelled = co_await asio::this_coro::throw_if_cancelled();
    co_await asio::this_coro::throw_if_cancelled(false);
    struct state {
      explicit state(const coverbs::socket::executor_type& ex) : tick(ex) {}
      asio::steady_timer tick;
      bool done = false;
      std::exception_ptr failure;
    };
    const auto s = std::make_shared<state>(socket_.get_executor());
    asio::co_spawn(socket_.get_executor(), std::move(work), [s](std::exception_ptr e) {
      s->done = true;
      s->failure = e;
      s->tick.cancel();
    });
    constexpr auto period = std::chrono::milliseconds(250);  // well inside a timeout of 1 s
    while (!s->done) {
      s->tick.expires_after(period);
      co_await s->tick.async_wait(asio::as_tuple(asio::use_awaitable));
      if (s->done) break;
      activity();
      // Unchecked: `work` must end before this returns, and a broken connection shows in the
      // verdict's send after it.
      out_ = encode(msg::busy());
      co_await socket_.async_send(asio::buffer(out_), asio::as_tuple(asio::use_awaitable));
    }
    co_await asio::this_coro::throw_if_cancelled(throw_if_cancelled);
    if (s->failure) std::rethrow_exception(s->failure);
  }

  /// Tells the peer why this side stops (an error message), then ends the connection in order
  /// (see `finish`). Never throws.
  asio::awaitable<void> give_up(std::string reason) {
    if (!socket_.is_open()) co_return;
    if (reason.size() > max_text) reason.resize(max_text);
    out_ = encode(msg::error(reason));
    co_await socket_.async_send(asio::buffer(out_), asio::as_tuple(asio::use_awaitable));
    co_await finish();
  }

  /// Ends the connection in order: shuts down sending and waits (at most 5 s) until the peer
  /// closes, so that nothing sent last is lost in the close. Never throws.
  asio::awaitable<void> finish() {
    using namespace asio::experimental::awaitable_operators;
    if (!socket_.is_open()) co_return;
    coverbs::error_code ignored;
    socket_.shutdown(asio::socket_base::shutdown_send, ignored);
    asio::steady_timer deadline(socket_.get_executor(), std::chrono::seconds(5));
    for (;;) {
      auto r = co_await (socket_.async_receive(asio::buffer(in_), asio::as_tuple(asio::use_awaitable)) ||
                         deadline.async_wait(asio::as_tuple(asio::use_awaitable)));
      if (r.index() == 1 || std::get<0>(std::get<0>(r))) break;
    }
    socket_.close();
  }

 private:
  // Closes a connection on which nothing happened for `timeout`. Shared with its timer's
  // handler, which may run after the channel is gone.
  struct watch {
    watch(coverbs::socket& s, std::chrono::seconds t) : timer(s.get_executor()), timeout(t) {}
    asio::steady_timer timer;
    std::chrono::seconds timeout;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    bool cancelled = false;

    static void arm(const std::shared_ptr<watch>& w, channel* owner) {
      w->timer.expires_after(std::chrono::seconds(1));
      w->timer.async_wait([w, owner](coverbs::error_code ec) {
        if (ec || w->cancelled) return;
        if (std::chrono::steady_clock::now() - w->last < w->timeout) return arm(w, owner);
        owner->abort("no sign of the " + owner->peer_ + " for " + std::to_string(w->timeout.count()) + " s");
      });
    }
  };

  // An error message the peer sent before its connection ended; waits at most 2 s, as a
  // failed one-sided operation may come before the connection's end is seen.
  asio::awaitable<std::optional<std::string>> last_words() {
    using namespace asio::experimental::awaitable_operators;
    if (!socket_.is_open()) co_return std::nullopt;
    asio::steady_timer deadline(socket_.get_executor(), std::chrono::seconds(2));
    for (;;) {
      auto r = co_await (socket_.async_receive(asio::buffer(in_), asio::as_tuple(asio::use_awaitable)) ||
                         deadline.async_wait(asio::as_tuple(asio::use_awaitable)));
      if (r.index() == 1) co_return std::nullopt;
      auto [ec, n] = std::get<0>(r);
      if (ec) co_return std::nullopt;
      auto m = decode(std::span(in_.data(), n));
      if (m && m->kind == type::error) co_return m->text;
    }
  }

  coverbs::socket& socket_;
  std::string peer_;
  std::vector<std::byte> in_, out_;
  std::string reason_;
  std::shared_ptr<watch> watch_;
};

}  // namespace ft
