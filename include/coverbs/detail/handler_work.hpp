// Outstanding work on a handler's own executor while its operation is pending.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/prefer.hpp>
#include <optional>
#include <type_traits>
#include <utility>

namespace coverbs::detail {

/// `ex` counting one more unit of outstanding work while the result lives.
template <class Executor>
auto track_work(const Executor& ex) {
  if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
  } else {  // a Networking TS executor
    return boost::asio::executor_work_guard<Executor>(ex);
  }
}
template <class Executor>
using tracked_work_t = std::decay_t<decltype(track_work(std::declval<const Executor&>()))>;

/// Counts as outstanding work of a handler's own executor from the operation's start until the
/// handler has been handed to that executor, as Asio's I/O objects do: a thread that runs only
/// that executor's context (`bind_executor(other, h)`, then `other.run()`) must wait for the
/// completion, not find no work and return. Nothing is counted where the handler's executor is
/// the I/O executor, which the pending operation keeps busy already; nor is this made for a
/// handler whose executor is an any_io_executor (tracks_handler_work). A moved one hands its
/// count over.
template <class Executor>
class handler_work {
 public:
  handler_work(const Executor& ex, const boost::asio::any_io_executor& io_executor) {
    if (!same(ex, io_executor)) work_.emplace(track_work(ex));
  }

 private:
  static bool same(const Executor& ex, const boost::asio::any_io_executor& io_executor) {
    if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
      return ex == io_executor;
    } else {
      const Executor* io = io_executor.template target<Executor>();
      return io != nullptr && *io == ex;
    }
  }
  std::optional<tracked_work_t<Executor>> work_;
};

}  // namespace coverbs::detail
