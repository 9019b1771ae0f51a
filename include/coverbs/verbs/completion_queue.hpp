// Completion channel and completion queue: where finished work requests are reported.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <span>
#include <system_error>

#include "coverbs/verbs/device.hpp"

namespace coverbs::verbs {

/// Owns an `ibv_comp_channel`: a file descriptor that turns readable when an armed CQ fires.
/// Its descriptor is non-blocking so a reactor can drain every pending event.
class completion_channel {
 public:
  /// Creates a channel on `dev`; throws std::system_error on failure.
  explicit completion_channel(const device& dev);

  /// The libibverbs handle.
  ibv_comp_channel* native_handle() const noexcept { return channel_.get(); }
  /// The pollable file descriptor (owned by the channel).
  int fd() const noexcept { return channel_->fd; }

 private:
  struct destroyer {
    void operator()(ibv_comp_channel* c) const noexcept { ibv_destroy_comp_channel(c); }
  };
  std::unique_ptr<ibv_comp_channel, destroyer> channel_;
};

/// Owns an `ibv_cq`, optionally attached to a completion channel for event notification.
class completion_queue {
 public:
  /// Creates a CQ with room for at least `entries` completions.
  completion_queue(const device& dev, int entries, completion_channel* channel = nullptr);

  /// The libibverbs handle.
  ibv_cq* native_handle() const noexcept { return cq_.get(); }
  /// Number of entries the device actually allocated (may exceed what was asked).
  int capacity() const noexcept { return cq_->cqe; }

  /// Polls up to `out.size()` completions; returns how many were written.
  /// Throws std::system_error if the device reports a polling failure.
  std::size_t poll(std::span<ibv_wc> out);
  /// Requests an event on the channel for the next completion (arms the CQ).
  void request_notify(bool solicited_only = false);
  /// As above, reporting a failure in `ec` instead of throwing.
  void request_notify(std::error_code& ec, bool solicited_only = false) noexcept;
  /// Acknowledges `count` events taken from the channel for this CQ (needed before destruction).
  void acknowledge(unsigned count) noexcept;

 private:
  struct destroyer {
    void operator()(ibv_cq* cq) const noexcept { ibv_destroy_cq(cq); }
  };
  std::unique_ptr<ibv_cq, destroyer> cq_;
};

}  // namespace coverbs::verbs
