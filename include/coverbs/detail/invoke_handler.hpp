// How the library hands work to an any_io_executor without paying for its type erasure.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <tuple>
#include <type_traits>
#include <utility>

#include "coverbs/detail/handler_work.hpp"

namespace coverbs::detail {

/// A stand-in executor type: a handler's associated executor is of this type only when the
/// handler has none of its own.
struct no_associated_executor {};
template <class Handler>
constexpr bool has_own_executor =
    !std::is_same_v<boost::asio::associated_executor_t<Handler, no_associated_executor>,
                    no_associated_executor>;

/// Whether `ex` is an io_context's executor running on this thread (only an any_io_executor is
/// asked: other executor types are handed over by dispatch).
template <class Executor>
bool running_here(const Executor& ex) {
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    const auto* io = ex.template target<boost::asio::io_context::executor_type>();
    return io != nullptr && io->running_in_this_thread();
  } else {
    return false;
  }
}

/// Whether a pending operation counts work on `Handler`'s own executor (see handler_work):
/// where that executor has a type of its own (`bind_executor(io_context, h)`, a strand). An
/// any_io_executor is mostly a coroutine's, whose co_spawn keeps that context busy until the
/// coroutine ends; copying and comparing type-erased executors at each operation cost the TCP
/// echo 480 instructions per round trip, 6 % (session 54, callgrind), so those are not counted.
template <class Handler>
constexpr bool tracks_handler_work =
    has_own_executor<Handler> &&
    !std::is_same_v<boost::asio::associated_executor_t<Handler>, boost::asio::any_io_executor>;
/// The work a pending operation counts on its handler's own executor (see handler_work), if
/// any: nothing where tracks_handler_work is false.
template <class Handler>
using handler_work_for =
    std::conditional_t<tracks_handler_work<Handler>,
                       handler_work<boost::asio::associated_executor_t<Handler>>, no_associated_executor>;
template <class Handler>
handler_work_for<Handler> track_handler_work(const Handler& handler, const boost::asio::any_io_executor& ex) {
  if constexpr (tracks_handler_work<Handler>) {
    return {boost::asio::get_associated_executor(handler), ex};
  } else {
    return {};
  }
}

/// What a stored or posted handler keeps of the I/O executor: where the handler has an
/// executor of its own, which is all it needs to run (copying and moving an any_io_executor is
/// much of what storing a small handler costs), only the work counted on that executor, if any.
template <class Handler>
using io_executor_for =
    std::conditional_t<has_own_executor<Handler>, handler_work_for<Handler>, boost::asio::any_io_executor>;
template <class Handler>
io_executor_for<Handler> keep_io_executor(const Handler& handler, const boost::asio::any_io_executor& ex) {
  if constexpr (has_own_executor<Handler>) {
    return track_handler_work(handler, ex);
  } else {
    return ex;
  }
}

/// Runs `handler(args...)` on its associated executor (by default `io_executor`, which a
/// handler with an executor of its own never needs: see io_executor_for) as dispatch would.
/// Where that executor is an io_context's running on this thread, dispatch would run it inline
/// too, but only after wrapping it in the any_io_executor's type-erased function (a sixth of a
/// small echo's instructions, and a scheduler operation per work completion): it is called
/// directly instead.
template <class Handler, class IoExecutor, class... Args>
void invoke_handler(Handler&& handler, const IoExecutor& io_executor, Args&&... args) {
  const auto run_on = [&](const auto& ex) {
    if (running_here(ex)) return std::forward<Handler>(handler)(std::forward<Args>(args)...);
    boost::asio::dispatch(ex,
                          boost::asio::append(std::forward<Handler>(handler), std::forward<Args>(args)...));
  };
  if constexpr (has_own_executor<std::decay_t<Handler>>) {
    run_on(boost::asio::get_associated_executor(handler));
  } else {
    run_on(io_executor);
  }
}

/// Posts `handler` to `executor`, straight to the io_context's executor where the
/// any_io_executor holds one: through the any_io_executor the handler is first wrapped in a
/// type-erased function, which allocates.
template <class Handler>
void post_unerased(const boost::asio::any_io_executor& executor, Handler&& handler) {
  if (const auto* io = executor.target<boost::asio::io_context::executor_type>()) {
    if constexpr (!has_own_executor<std::decay_t<Handler>> && std::is_invocable_v<std::decay_t<Handler>&>) {
      // With no executor of its own to hand over to, the handler needs none of asio::post's
      // preparation (an executor preferring its allocator, a work_dispatcher): a third of the
      // instructions of a posted completion.
      const auto allocator = boost::asio::get_associated_allocator(handler);
      return io->post(std::forward<Handler>(handler), allocator);
    }
    return boost::asio::post(*io, std::forward<Handler>(handler));
  }
  boost::asio::post(executor, std::forward<Handler>(handler));
}

/// A handler with no executor of its own (an erased_handler) bound to its results, for
/// post_unerased: cheaper to post than asio::append's token, which asio::post must first
/// turn into a handler.
template <class Handler, class... Results>
struct posted_call {
  using allocator_type = boost::asio::associated_allocator_t<Handler>;

  Handler handler;
  std::tuple<Results...> results;

  allocator_type get_allocator() const noexcept { return boost::asio::get_associated_allocator(handler); }
  void operator()() { std::apply(std::move(handler), std::move(results)); }
};

/// A handler and its results, to be posted as they are: like an erased_handler it reports no
/// associated executor (so posting it adds no dispatch through the handler's executor) and,
/// when run, invokes the handler on that executor (by default `io_executor`). Its memory comes
/// from the handler's allocator, by default `Memory`.
template <class Handler, class Memory, class... Results>
struct posted_result {
  using allocator_type = boost::asio::associated_allocator_t<Handler, Memory>;

  Handler handler;
  [[no_unique_address]] io_executor_for<Handler> io_executor;
  allocator_type allocator;
  std::tuple<Results...> results;

  allocator_type get_allocator() const noexcept { return allocator; }
  void operator()() {
    std::apply([this](Results&... r) { invoke_handler(std::move(handler), io_executor, std::move(r)...); },
               results);
  }
};

/// Posts `handler(results...)` to `executor`, to run as posted_result says.
template <class Handler, class Memory, class... Results>
void post_result(const boost::asio::any_io_executor& executor, Handler&& handler, const Memory& memory,
                 Results... results) {
  using handler_type = std::decay_t<Handler>;
  using posted = posted_result<handler_type, Memory, Results...>;
  auto allocator = boost::asio::get_associated_allocator(handler, memory);
  io_executor_for<handler_type> kept = keep_io_executor(handler, executor);  // before the handler moves
  post_unerased(executor,
                posted{std::forward<Handler>(handler), std::move(kept), allocator, {std::move(results)...}});
}

}  // namespace coverbs::detail
