// The checksum on a thread of its own, so that hashing one slot overlaps reading, sending and
// writing the others: with the hash on the connection's thread, each side did one stage at a
// time (in the VM SHA-256 ran at ~16 MiB/s then, ~50 MiB/s on a later host, about as fast as
// rxe moves data, which halved the rate; XXH3-128, the default now, runs at ~375 MiB/s there).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/system/error_code.hpp>
#include <span>
#include <tuple>

#include "checksum.hpp"

namespace ft {

namespace asio = boost::asio;

class hasher {
 public:
  /// Handlers without an executor of their own complete on `ex` (the connection's).
  hasher(asio::any_io_executor ex, checksum_kind kind) : ex_(std::move(ex)), hash_(kind) {}
  /// Stops the thread: updates not started are dropped (their handlers destroyed, not called);
  /// one under way finishes first, so the bytes it reads must outlive the hasher.
  ~hasher() = default;
  hasher(const hasher&) = delete;
  hasher& operator=(const hasher&) = delete;

  checksum_kind kind() const { return hash_.kind(); }

  /// Hashes `bytes` after every update started before. They must stay unchanged until the
  /// handler, `void(error_code)`, runs.
  template <typename Token>
  auto async_update(std::span<const std::byte> bytes, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code)>(
        [this, bytes](auto handler) {
          run(std::move(handler), [this, bytes] {
            hash_.update(bytes);
            return std::tuple<>();
          });
        },
        token);
  }

  /// The digest of all updates, once they are done: `void(error_code, digest)`.
  template <typename Token>
  auto async_finish(Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, digest)>(
        [this](auto handler) { run(std::move(handler), [this] { return std::tuple(hash_.finish()); }); },
        token);
  }

 private:
  // Runs `step` on the thread, then the handler with an error code and what `step` returned
  // (a tuple) on the handler's executor (or the connection's), kept busy meanwhile.
  template <typename Handler, typename Step>
  void run(Handler handler, Step step) {
    auto work = asio::make_work_guard(asio::get_associated_executor(handler, ex_));
    asio::post(pool_, [step, handler = std::move(handler), work = std::move(work)]() mutable {
      boost::system::error_code ec;
      decltype(step()) values{};
      try {
        values = step();
      } catch (const std::exception&) {  // OpenSSL or xxHash failed
        ec = asio::error::fault;
      }
      asio::post(work.get_executor(), [handler = std::move(handler), ec, values]() mutable {
        std::apply([&](auto&... v) { std::move(handler)(ec, v...); }, values);
      });
      work.reset();
    });
  }

  asio::any_io_executor ex_;
  checksum hash_;
  asio::thread_pool pool_{1};  // after hash_: joined before the context it uses is freed
};

}  // namespace ft
