// Counts the program's heap allocations, so a test can assert that steady-state operations make
// none. Include from exactly one file per program: it replaces the global operator new and
// delete, every form of them, so that all of them agree (as a sanitizer's checks require).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace coverbs::test {
inline std::atomic<std::size_t> allocations{0};
}

// GCC cannot see that the replacements below pair malloc with free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace coverbs::test::counting {
inline void* allocate(std::size_t n, std::size_t align = 0) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  if (align > alignof(std::max_align_t)) return std::aligned_alloc(align, (n + align - 1) / align * align);
  return std::malloc(n);
}
inline void* allocate_or_throw(std::size_t n, std::size_t align = 0) {
  if (void* p = allocate(n, align)) return p;
  throw std::bad_alloc();
}
}  // namespace coverbs::test::counting

void* operator new(std::size_t n) {
  return coverbs::test::counting::allocate_or_throw(n);
}
void* operator new[](std::size_t n) {
  return coverbs::test::counting::allocate_or_throw(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return coverbs::test::counting::allocate(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return coverbs::test::counting::allocate(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return coverbs::test::counting::allocate_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return coverbs::test::counting::allocate_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return coverbs::test::counting::allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return coverbs::test::counting::allocate(n, static_cast<std::size_t>(a));
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
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
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
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
