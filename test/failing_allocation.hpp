// Makes one chosen heap allocation fail, as memory running out would: once armed on a thread,
// that thread's next operator new of a given size throws std::bad_alloc. Include from exactly
// one file per program.
//
// It replaces every form of operator new and delete, with forwarders to malloc, aligned_alloc
// and free: under AddressSanitizer, which checks that each block is freed as it was allocated,
// every block then comes from the malloc family and goes back to it.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace coverbs::test {

namespace failing {
inline thread_local std::size_t size = 0;  ///< the size whose next allocation fails; 0: none
inline thread_local int failed = 0;        ///< how many allocations failed on this thread

inline void* allocate(std::size_t n, std::size_t alignment) {
  if (n != 0 && n == size) {
    size = 0;
    ++failed;
    throw std::bad_alloc();
  }
  if (n == 0) n = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else {
    p = std::aligned_alloc(alignment, (n + alignment - 1) / alignment * alignment);
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

inline void* allocate(std::size_t n, std::size_t alignment, const std::nothrow_t&) noexcept {
  try {
    return allocate(n, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
}  // namespace failing

/// This thread's next operator new of `size` bytes throws std::bad_alloc (once).
inline void fail_next_allocation_of(std::size_t size) noexcept {
  failing::size = size;
}

/// How many allocations were made to fail on this thread.
inline int failed_allocations() noexcept {
  return failing::failed;
}

}  // namespace coverbs::test

// NOLINTBEGIN(misc-new-delete-overloads, cert-dcl54-cpp)
void* operator new(std::size_t n) {
  return coverbs::test::failing::allocate(n, 0);
}
void* operator new[](std::size_t n) {
  return coverbs::test::failing::allocate(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return coverbs::test::failing::allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return coverbs::test::failing::allocate(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t& t) noexcept {
  return coverbs::test::failing::allocate(n, 0, t);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return coverbs::test::failing::allocate(n, 0, t);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return coverbs::test::failing::allocate(n, static_cast<std::size_t>(a), t);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return coverbs::test::failing::allocate(n, static_cast<std::size_t>(a), t);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
// NOLINTEND(misc-new-delete-overloads, cert-dcl54-cpp)
