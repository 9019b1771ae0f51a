// What the library does with an exception from a handler it ran inside its own work.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <exception>
#include <utility>

namespace coverbs::detail {

/// Lets `thrown` leave io_context::run, as Asio lets a handler's exception do, from a handler
/// posted to `executor`: the work that follows the handler that threw (returning a buffer,
/// ending a second operation, serving the next accept) is done first, not unwound.
inline void rethrow_later(const boost::asio::any_io_executor& executor, std::exception_ptr thrown) {
  boost::asio::post(executor, [thrown = std::move(thrown)] { std::rethrow_exception(thrown); });
}

/// Invokes `handler` with `args`, passing what it throws to rethrow_later: the library's work
/// around the call goes on.
template <class Handler, class... Args>
void invoke_or_rethrow_later(const boost::asio::any_io_executor& executor, Handler&& handler,
                             Args&&... args) {
  try {
    std::forward<Handler>(handler)(std::forward<Args>(args)...);
  } catch (...) {
    rethrow_later(executor, std::current_exception());
  }
}

}  // namespace coverbs::detail
