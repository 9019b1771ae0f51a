#include "coverbs/detail/shutdown_service.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>

namespace coverbs::detail {

handler_holder::handler_holder(const boost::asio::any_io_executor& executor)
    : service_(&boost::asio::use_service<shutdown_service>(
          boost::asio::query(executor, boost::asio::execution::context))) {
  service_->add(this);
}

handler_holder::~handler_holder() {
  if (service_ != nullptr) service_->remove(this);
}

shutdown_service::~shutdown_service() {
  while (head_ != nullptr) {
    handler_holder* holder = head_;
    unlink(holder);
    holder->service_ = nullptr;
  }
}

void shutdown_service::shutdown() {
  // One holder at a time, the list read afresh each time: destroying one handler may destroy
  // any number of holders, each of which unlinks itself.
  for (;;) {
    handler_holder* holder = nullptr;
    {
      std::lock_guard lock(mutex_);
      holder = head_;
      if (holder == nullptr) return;
      unlink(holder);
      holder->service_ = nullptr;
    }
    holder->destroy_handlers();
  }
}

void shutdown_service::add(handler_holder* holder) {
  std::lock_guard lock(mutex_);
  holder->next_ = head_;
  if (head_ != nullptr) head_->prev_ = holder;
  head_ = holder;
}

void shutdown_service::remove(handler_holder* holder) noexcept {
  std::lock_guard lock(mutex_);
  unlink(holder);
}

void shutdown_service::unlink(handler_holder* holder) noexcept {
  if (holder->prev_ != nullptr) {
    holder->prev_->next_ = holder->next_;
  } else if (head_ == holder) {
    head_ = holder->next_;
  }
  if (holder->next_ != nullptr) holder->next_->prev_ = holder->prev_;
  holder->prev_ = holder->next_ = nullptr;
}

}  // namespace coverbs::detail
