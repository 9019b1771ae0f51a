// The memory a connection's operations are allocated from: handlers waiting in the stream,
// the transport's own reads, writes and work requests, and the posts that complete them.
//
// Asio's default for such memory is a per-thread cache of two blocks per purpose; a thread that
// serves several connections has more operations in flight than that, so every operation would
// go to malloc. This pool keeps the blocks a connection has used (grouped by size) and hands
// them out again; it frees them when the connection and the last of its operations are gone.
// Like the connection itself it is used from one thread at a time (its executor), and so is its
// count of users: the connection and each block handed out. Allocators are plain pointers:
// Asio copies an operation's allocator many times per operation, and counting the copies (an
// atomic shared_ptr at first, then a plain count) cost more than the pool saves. An allocator
// allocates only while its connection or an operation allocated from it holds the pool.
#pragma once

#include <array>
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
    void* p = nullptr;
    if (c == classes) {
      p = ::operator new (size, std::align_val_t{alignment});
    } else if (block* b = free_[c]) {
      free_[c] = b->next;
      p = b;
    } else {
      p = ::operator new (class_size(c), std::align_val_t{alignment});
    }
    ++users_;
    return p;
  }

  /// The last user gone (the connection, then this block), the pool goes too.
  void deallocate(void* p, std::size_t size) noexcept {
    const std::size_t c = size_class(size);
    if (c == classes) {
      ::operator delete (p, std::align_val_t{alignment});
    } else {
      free_[c] = ::new (p) block{free_[c]};
    }
    if (--users_ == 0) destroy(this);
  }

 private:
  struct block {
    block* next;
  };
  static constexpr std::size_t alignment = alignof(std::max_align_t);
  static constexpr std::size_t classes = 5;  // 128 B to 2 KiB; larger ones are not kept
  static constexpr std::size_t class_size(std::size_t c) noexcept { return std::size_t{128} << c; }
  static std::size_t size_class(std::size_t size) noexcept {
    std::size_t c = 0;
    while (c < classes && class_size(c) < size) ++c;
    return c;
  }

  std::array<block*, classes> free_{};
  std::size_t users_ = 0;  ///< the connection's handle and every block handed out

  friend void intrusive_ptr_add_ref(operation_memory* m) noexcept { ++m->users_; }
  friend void intrusive_ptr_release(operation_memory* m) noexcept {
    if (--m->users_ == 0) destroy(m);
  }
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
