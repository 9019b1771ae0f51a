// How a completed operation runs its handler when it may run it inline.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <type_traits>
#include <utility>

namespace coverbs::detail {

/// Runs `handler(args...)` on its associated executor (by default `io_executor`) as dispatch
/// would. Where that executor is an io_context's running on this thread, dispatch would run it
/// inline too, but only after wrapping it in the any_io_executor's type-erased function (a
/// sixth of a small echo's instructions, and a scheduler operation per work completion): it is
/// called directly instead.
template <class Handler, class... Args>
void invoke_handler(Handler&& handler, const boost::asio::any_io_executor& io_executor, Args&&... args) {
  const auto handler_ex = boost::asio::get_associated_executor(handler, io_executor);
  if constexpr (std::is_same_v<std::decay_t<decltype(handler_ex)>, boost::asio::any_io_executor>) {
    const auto* io = handler_ex.template target<boost::asio::io_context::executor_type>();
    if (io != nullptr && io->running_in_this_thread()) {
      return std::forward<Handler>(handler)(std::forward<Args>(args)...);
    }
  }
  boost::asio::dispatch(io_executor, boost::asio::append(std::forward<Handler>(handler), std::forward<Args>(args)...));
}

}  // namespace coverbs::detail
