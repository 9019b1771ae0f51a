// How the library hands work to an any_io_executor without paying for its type erasure.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <type_traits>
#include <utility>

namespace coverbs::detail {

/// A stand-in executor type: a handler's associated executor is of this type only when the
/// handler has none of its own.
struct no_associated_executor {};
template <class Handler>
constexpr bool has_own_executor =
    !std::is_same_v<boost::asio::associated_executor_t<Handler, no_associated_executor>,
                    no_associated_executor>;

/// Whether `handler` may run right here: its associated executor (by default `io_executor`)
/// is an io_context's running on this thread. The library's own handlers have no executor of
/// their own, so `io_executor` is checked without making a copy of it to ask.
template <class Handler>
bool runs_here(const Handler& handler, const boost::asio::any_io_executor& io_executor) {
  auto running = [](const boost::asio::any_io_executor& ex) {
    const auto* io = ex.target<boost::asio::io_context::executor_type>();
    return io != nullptr && io->running_in_this_thread();
  };
  if constexpr (!has_own_executor<Handler>) {
    return running(io_executor);
  } else {
    const auto handler_ex = boost::asio::get_associated_executor(handler, io_executor);
    if constexpr (std::is_same_v<std::decay_t<decltype(handler_ex)>, boost::asio::any_io_executor>) {
      return running(handler_ex);
    } else {
      return false;
    }
  }
}

/// Runs `handler(args...)` on its associated executor (by default `io_executor`) as dispatch
/// would. Where that executor is an io_context's running on this thread, dispatch would run it
/// inline too, but only after wrapping it in the any_io_executor's type-erased function (a
/// sixth of a small echo's instructions, and a scheduler operation per work completion): it is
/// called directly instead.
template <class Handler, class... Args>
void invoke_handler(Handler&& handler, const boost::asio::any_io_executor& io_executor, Args&&... args) {
  if (runs_here(handler, io_executor)) return std::forward<Handler>(handler)(std::forward<Args>(args)...);
  boost::asio::dispatch(io_executor, boost::asio::append(std::forward<Handler>(handler), std::forward<Args>(args)...));
}

/// Posts `handler` to `executor`, straight to the io_context's executor where the
/// any_io_executor holds one: through the any_io_executor the handler is first wrapped in a
/// type-erased function, which allocates.
template <class Handler>
void post_unerased(const boost::asio::any_io_executor& executor, Handler&& handler) {
  if (const auto* io = executor.target<boost::asio::io_context::executor_type>()) {
    return boost::asio::post(*io, std::forward<Handler>(handler));
  }
  boost::asio::post(executor, std::forward<Handler>(handler));
}

}  // namespace coverbs::detail
