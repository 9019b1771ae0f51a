// The type-erased state of one posted work request, found again through its wr_id.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace coverbs::detail {

class posting_queue;

/// Base of every asynchronous verbs operation. The work request lives inside it so an
/// operation that waits for a free queue slot can be posted later without copying.
struct operation {
  /// Delivers the stored result and frees the operation. `defer` posts the handler instead
  /// of dispatching it (used when completing from outside the completion loop).
  using complete_fn = void (*)(operation*, bool defer);
  /// Frees the operation and destroys its handler without invoking it (the execution context
  /// is shutting down).
  using destroy_fn = void (*)(operation*);

  operation(complete_fn fn, destroy_fn d) noexcept : complete(fn), destroy(d) {}

  complete_fn complete;
  destroy_fn destroy;
  operation* next = nullptr;  ///< links of the one list the operation is in (op_queue, op_list)
  operation* prev = nullptr;  ///< (op_list only)
  posting_queue* owner = nullptr;

  union {
    ibv_send_wr send;
    ibv_recv_wr recv;
  } wr{};
  ibv_sge sge{};

  ibv_wc_status status = IBV_WC_SUCCESS;
  int post_error = 0;          ///< errno of a failed post, reported instead of `status`
  std::uint32_t byte_len = 0;
  std::uint32_t imm = 0;       ///< immediate data in host order
  bool rdma_immediate = false; ///< a receive consumed by an RDMA WRITE with immediate
  bool cancelled = false;
};

/// Intrusive FIFO of operations; no allocation.
class op_queue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  void push(operation* op) noexcept {
    op->next = nullptr;
    (tail_ != nullptr ? tail_->next : head_) = op;
    tail_ = op;
  }
  operation* pop() noexcept {
    operation* op = head_;
    if (op != nullptr) {
      head_ = op->next;
      if (head_ == nullptr) tail_ = nullptr;
      op->next = nullptr;
    }
    return op;
  }
  /// Removes `op` if queued; returns whether it was.
  bool erase(operation* op) noexcept {
    operation* prev = nullptr;
    for (operation* cur = head_; cur != nullptr; prev = cur, cur = cur->next) {
      if (cur != op) continue;
      (prev != nullptr ? prev->next : head_) = cur->next;
      if (tail_ == cur) tail_ = prev;
      cur->next = nullptr;
      return true;
    }
    return false;
  }

 private:
  operation* head_ = nullptr;
  operation* tail_ = nullptr;
};

/// Intrusive list of posted operations, each removed in constant time wherever it is (an SRQ's
/// receives complete in any order); no allocation.
class op_list {
 public:
  void push(operation* op) noexcept {
    op->prev = tail_;
    op->next = nullptr;
    (tail_ != nullptr ? tail_->next : head_) = op;
    tail_ = op;
  }
  /// Removes `op`, which must be in this list.
  void erase(operation* op) noexcept {
    (op->prev != nullptr ? op->prev->next : head_) = op->next;
    (op->next != nullptr ? op->next->prev : tail_) = op->prev;
    op->next = op->prev = nullptr;
  }
  operation* pop() noexcept {
    operation* op = head_;
    if (op != nullptr) erase(op);
    return op;
  }
  operation* front() const noexcept { return head_; }
  /// Whether `op` is in this list, given that it is in no other op_list (only this class sets
  /// `prev`, and erase clears it).
  bool contains(const operation* op) const noexcept { return op->prev != nullptr || head_ == op; }

 private:
  operation* head_ = nullptr;
  operation* tail_ = nullptr;
};

}  // namespace coverbs::detail
