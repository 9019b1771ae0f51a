// The memory a connection's operations are allocated from: handlers waiting in the stream,
// the transport's own reads, writes and work requests, and the posts that complete them.
//
// Asio's default for such memory is a per-thread cache of two blocks per purpose; a thread that
// serves several connections has more operations in flight than that, so every operation would
// go to malloc. This pool keeps the blocks a connection has used (grouped by size) and hands
// them out again; it frees them when the connection and the last of its operations are gone.
// The connection uses it from its executor, but that is not the only thread: Asio frees a
// socket operation's memory on the thread that completed it, before it hands the handler to
// the executor, which with a strand on a context run by several threads is another thread than
// the strand's. So the free lists and the count of users (the connection and each block handed
// out) are behind a spin lock, uncontended but for those frees. Allocators are plain pointers:
// Asio copies an operation's allocator many times per operation, and counting the copies (an
// atomic shared_ptr at first, then a plain count) cost more than the pool saves. An allocator
// allocates only while its connection or an operation allocated from it holds the pool.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <boost/smart_ptr/intrusive_ptr.hpp>
#include <cstddef>
#include <new>
#include <utility>

namespace coverbs::detail {

class operation_memory {
 public:
  operation_memory() = default;
  operation_memory(const operation_memory&) = delete;
  operation_memory& operator=(const operation_memory&) = delete;
  ~operation_memory() {
    for (block*& head : free_) {
      while (head != nullptr)
        ::operator delete (std::exchange(head, head->next), std::align_val_t{alignment});
    }
  }

  void* allocate(std::size_t size) {
    const std::size_t c = size_class(size);
    if (c == classes) {
      void* p = ::operator new (size, std::align_val_t{alignment});
      add_user();
      return p;
    }
    block* b = nullptr;
    {
      const guard g(*this);
      b = free_[c];
      if (b != nullptr) free_[c] = b->next;
      ++users_;
    }
    if (b != nullptr) return b;
    try {
      return ::operator new (class_size(c), std::align_val_t{alignment});
    } catch (...) {
      remove_user();
      throw;
    }
  }

  /// Adds `count` free blocks that hold `size` bytes: a connection that knows how many
  /// operations it can have in flight at once then allocates for none of them, the first
  /// time a burst reaches that many included.
  void reserve(std::size_t size, std::size_t count) {
    const std::size_t c = size_class(size);
    if (c == classes) return;
    for (; count > 0; --count) {
      void* p = ::operator new (class_size(c), std::align_val_t{alignment});
      const guard g(*this);
      free_[c] = ::new (p) block{free_[c]};
    }
  }
  /// reserve(size, count) for every size the pool keeps: for operations whose size the
  /// connection cannot name (the posts that complete its users' handlers, say).
  void reserve_each_size(std::size_t count) {
    for (std::size_t c = 0; c < classes; ++c) reserve(class_size(c), count);
  }

  /// What an allocation of `size` bytes takes from the heap when the pool has no block for it:
  /// `size` rounded up to the block size that holds it (tests make that allocation fail).
  static constexpr std::size_t heap_size(std::size_t size) noexcept {
    const std::size_t c = size_class(size);
    return c == classes ? size : class_size(c);
  }

  /// The last user gone (the connection, then this block), the pool goes too.
  void deallocate(void* p, std::size_t size) noexcept {
    const std::size_t c = size_class(size);
    if (c == classes) {
      ::operator delete (p, std::align_val_t{alignment});
      return remove_user();
    }
    bool last = false;
    {
      const guard g(*this);
      free_[c] = ::new (p) block{free_[c]};
      last = --users_ == 0;
    }
    if (last) destroy(this);
  }

 private:
  struct block {
    block* next;
  };
  static constexpr std::size_t alignment = alignof(std::max_align_t);
  static constexpr std::size_t classes = 5;  // 128 B to 2 KiB; larger ones are not kept
  static constexpr std::size_t class_size(std::size_t c) noexcept { return std::size_t{128} << c; }
  /// The smallest class that holds `size`, or `classes` where none does.
  static constexpr std::size_t size_class(std::size_t size) noexcept {
    if (size <= class_size(0)) return 0;
    return std::min<std::size_t>(classes, std::bit_width(size - 1) - std::bit_width(class_size(0) - 1));
  }

  // Held for a few instructions, so spinning beats sleeping.
  class guard {
   public:
    explicit guard(operation_memory& m) noexcept : lock_(m.lock_) {
      while (lock_.test_and_set(std::memory_order_acquire)) {
        while (lock_.test(std::memory_order_relaxed)) {
        }
      }
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    ~guard() { lock_.clear(std::memory_order_release); }

   private:
    std::atomic_flag& lock_;
  };

  void add_user() noexcept {
    const guard g(*this);
    ++users_;
  }
  void remove_user() noexcept {
    bool last = false;
    {
      const guard g(*this);
      last = --users_ == 0;
    }
    if (last) destroy(this);
  }

  std::atomic_flag lock_;
  std::array<block*, classes> free_{};
  std::size_t users_ = 0;  ///< the connection's handle and every block handed out

  friend void intrusive_ptr_add_ref(operation_memory* m) noexcept { m->add_user(); }
  friend void intrusive_ptr_release(operation_memory* m) noexcept { m->remove_user(); }
  // Out of line: inlined, g++ 12 sees two releases in a row and warns that the second may
  // touch the pool the first deleted (it cannot know the count stays above zero).
  [[gnu::noinline]] static void destroy(operation_memory* m) noexcept { delete m; }
};

/// The connection's handle on its operation_memory (see its count of users).
using operation_memory_ptr = boost::intrusive_ptr<operation_memory>;

/// An allocator over a connection's operation_memory, which the blocks it hands out keep alive.
template <class T>
class operation_allocator {
 public:
  using value_type = T;

  explicit operation_allocator(operation_memory* memory) noexcept : memory_(memory) {}
  template <class U>
  operation_allocator(const operation_allocator<U>& other) noexcept : memory_(other.memory()) {}

  /// Without a pool (a default-constructed handler), plain operator new.
  T* allocate(std::size_t n) {
    if (!memory_)
      return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(std::max_align_t)}));
    return static_cast<T*>(memory_->allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (!memory_) return ::operator delete (p, std::align_val_t{alignof(std::max_align_t)});
    memory_->deallocate(p, n * sizeof(T));
  }

  operation_memory* memory() const noexcept { return memory_; }
  template <class U>
  bool operator==(const operation_allocator<U>& other) const noexcept {
    return memory_ == other.memory();
  }

 private:
  operation_memory* memory_;
};

}  // namespace coverbs::detail
