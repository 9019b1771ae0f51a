// Tests that steer what a poll of the CQ returns: ibv_poll_cq calls the provider through its
// context's ops, which these swap for as long as they live (one at a time per context).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>

namespace coverbs::test {

/// While it lives, `context`'s polls go to `poll`, which reaches the provider's through
/// `original`.
class swapped_poll_cq {
 public:
  using poll_fn = int (*)(ibv_cq*, int, ibv_wc*);
  swapped_poll_cq(ibv_context* context, poll_fn poll) : context_(context), saved_(context->ops.poll_cq) {
    // One at a time: a second would take the first's poll for the provider's.
    if (original != nullptr) throw std::logic_error("swapped_poll_cq: one at a time");
    original = saved_;
    context_->ops.poll_cq = poll;
  }
  ~swapped_poll_cq() {
    context_->ops.poll_cq = saved_;
    original = nullptr;
  }
  swapped_poll_cq(const swapped_poll_cq&) = delete;
  swapped_poll_cq& operator=(const swapped_poll_cq&) = delete;

  static inline poll_fn original = nullptr;

 private:
  ibv_context* context_;
  poll_fn saved_;
};

/// While it lives, polls of `cq` find nothing until `count` completions have come, then hand
/// them over as polls ask (the engine asks for its whole batch, so one poll takes them all);
/// once they are handed over, polls are the provider's. A test that needs completions taken in
/// one batch gets that whatever the device's pace.
class held_completions {
 public:
  held_completions(ibv_cq* cq, std::size_t count) : swap_(prepared(cq, count), &poll) {}

 private:
  // The statics are set before the swap: from then on, polls of the context read them.
  static ibv_context* prepared(ibv_cq* cq, std::size_t count) {
    // A second one must not reset the live one's statics before its swap refuses it.
    if (swapped_poll_cq::original != nullptr) throw std::logic_error("held_completions: one at a time");
    target = cq;
    wanted = std::min(count, held.size());
    taken = handed = 0;
    return cq->context;
  }
  static int poll(ibv_cq* cq, int entries, ibv_wc* wc) {
    if (cq != target || handed == wanted) return swapped_poll_cq::original(cq, entries, wc);
    if (taken < wanted) {
      const int n = swapped_poll_cq::original(cq, static_cast<int>(wanted - taken), held.data() + taken);
      if (n < 0) return n;
      taken += static_cast<std::size_t>(n);
      if (taken < wanted) return 0;
    }
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(entries), wanted - handed);
    std::copy_n(held.begin() + static_cast<std::ptrdiff_t>(handed), n, wc);
    handed += n;
    return static_cast<int>(n);
  }
  static inline ibv_cq* target = nullptr;
  static inline std::array<ibv_wc, 16> held{};
  static inline std::size_t wanted = 0, taken = 0, handed = 0;
  swapped_poll_cq swap_;
};

}  // namespace coverbs::test
