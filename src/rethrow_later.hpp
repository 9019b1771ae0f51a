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

}  // namespace coverbs::detail
