// Why: a coverbs object that stores a completion handler (a stream's pending read, a work
// request in flight) may be owned by that very handler, through the coroutine frame inside it:
// socket -> stream -> handler -> frame -> socket. Once the execution context stops running,
// nothing breaks such a cycle and everything in it leaks. Asio breaks its own in its services'
// shutdown(), which destroy every pending operation without invoking it; this service does the
// same for coverbs' holders of handlers when their execution context shuts down.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <mutex>

namespace coverbs::detail {

class shutdown_service;

/// Base of an object that stores handlers of its executor's execution context: registered with
/// that context's shutdown_service from construction to destruction.
class handler_holder {
 public:
  handler_holder(const handler_holder&) = delete;
  handler_holder& operator=(const handler_holder&) = delete;

  /// Called at most once, when the context shuts down: destroys every handler held, invoking
  /// none. Destroying a handler may destroy this object and other holders, so an
  /// implementation keeps itself alive and takes the handlers out of its state first.
  virtual void destroy_handlers() noexcept = 0;

 protected:
  explicit handler_holder(const boost::asio::any_io_executor& executor);
  ~handler_holder();

 private:
  friend class shutdown_service;
  shutdown_service* service_;
  handler_holder* prev_ = nullptr;
  handler_holder* next_ = nullptr;
};

/// One per execution context (`boost::asio::use_service`).
class shutdown_service final : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;

  explicit shutdown_service(boost::asio::execution_context& context) : service(context) {}
  /// Holders still alive (made after shutdown, or kept by a later service) forget it.
  ~shutdown_service() override;

 private:
  friend class handler_holder;
  void shutdown() override;
  void add(handler_holder* holder);
  void remove(handler_holder* holder) noexcept;
  void unlink(handler_holder* holder) noexcept;

  std::mutex mutex_;  // holders of one context may be made and destroyed on several threads
  handler_holder* head_ = nullptr;
};

}  // namespace coverbs::detail
