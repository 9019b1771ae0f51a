#include "coverbs/verbs/completion_queue.hpp"

#include <fcntl.h>

#include <cerrno>

#include "coverbs/detail/throw_error.hpp"

namespace coverbs::verbs {

completion_channel::completion_channel(const device& dev)
    : channel_(ibv_create_comp_channel(dev.native_handle())) {
  if (!channel_) detail::throw_errno("ibv_create_comp_channel");
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    detail::throw_errno("fcntl(O_NONBLOCK) on completion channel");
  }
}

completion_queue::completion_queue(const device& dev, int entries, completion_channel* channel)
    : cq_(ibv_create_cq(dev.native_handle(), entries, nullptr,
                        channel != nullptr ? channel->native_handle() : nullptr, 0)) {
  if (!cq_) detail::throw_errno("ibv_create_cq");
}

std::size_t completion_queue::poll(std::span<ibv_wc> out) {
  const int n = ibv_poll_cq(cq_.get(), static_cast<int>(out.size()), out.data());
  // A negative count is no errno (mlx5 gives -1 or -2): the CQ failed, which is an I/O error.
  if (n < 0) detail::throw_errno("ibv_poll_cq", EIO);
  return static_cast<std::size_t>(n);
}

void completion_queue::request_notify(bool solicited_only) {
  std::error_code ec;
  request_notify(ec, solicited_only);
  if (ec) detail::throw_errno("ibv_req_notify_cq", ec.value());
}

void completion_queue::request_notify(std::error_code& ec, bool solicited_only) noexcept {
  const int rc = ibv_req_notify_cq(cq_.get(), solicited_only ? 1 : 0);
  ec = rc != 0 ? std::error_code(rc, std::generic_category()) : std::error_code();
}

void completion_queue::acknowledge(unsigned count) noexcept {
  if (count > 0) ibv_ack_cq_events(cq_.get(), count);
}

}  // namespace coverbs::verbs
