// Tests that steer what a poll of the CQ returns: ibv_poll_cq calls the provider through its
// context's ops, which these swap for as long as they live (one at a time per context).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cstddef>

namespace coverbs::test {

/// While it lives, `context`'s polls go to `poll`, which reaches the provider's through
/// `original`.
class swapped_poll_cq {
 public:
  using poll_fn = int (*)(ibv_cq*, int, ibv_wc*);
  swapped_poll_cq(ibv_context* context, poll_fn poll) : context_(context), saved_(context->ops.poll_cq) {
    original = saved_;
    context_->ops.poll_cq = poll;
  }
  ~swapped_poll_cq() { context_->ops.poll_cq = saved_; }
  swapped_poll_cq(const swapped_poll_cq&) = delete;
  swapped_poll_cq& operator=(const swapped_poll_cq&) = delete;

  static inline poll_fn original = nullptr;

 private:
  ibv_context* context_;
  poll_fn saved_;
};

/// While it lives, polls of `cq` find nothing until `count` completions have come, then hand
/// them all to one poll (later polls are the provider's): a test that needs them taken in one
/// batch gets that whatever the device's pace. The engine's polls ask for its whole batch.
class held_completions {
 public:
  held_completions(ibv_cq* cq, std::size_t count) : swap_(cq->context, &poll) {
    target = cq;
    wanted = std::min(count, held.size());
    taken = 0;
    handed = false;
  }

 private:
  static int poll(ibv_cq* cq, int entries, ibv_wc* wc) {
    if (cq != target || handed) return swapped_poll_cq::original(cq, entries, wc);
    const int n = swapped_poll_cq::original(cq, static_cast<int>(wanted - taken), held.data() + taken);
    if (n < 0) return n;
    taken += static_cast<std::size_t>(n);
    if (taken < wanted || entries < static_cast<int>(taken)) return 0;
    handed = true;
    std::copy_n(held.begin(), taken, wc);
    return static_cast<int>(taken);
  }
  static inline ibv_cq* target = nullptr;
  static inline std::array<ibv_wc, 16> held{};
  static inline std::size_t wanted = 0, taken = 0;
  static inline bool handed = false;
  swapped_poll_cq swap_;
};

}  // namespace coverbs::test
