// Counts the program's heap allocations (every malloc-family call, so operator new and Asio's
// own aligned allocations alike), so that a test can assert that steady-state operations make
// none. Include from exactly one file per program.
//
// Under AddressSanitizer the sanitizer owns malloc and reports each call to a hook; elsewhere
// this file replaces glibc's malloc family with forwarders to glibc's own implementation.
#pragma once

#include <cerrno>
#include <cstddef>

#include "allocation_count.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COVERBS_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(COVERBS_TEST_ASAN)

extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*,
                                                                             std::size_t),
                                                         void (*free_hook)(const volatile void*));

namespace coverbs::test::counting {
inline void on_malloc(const volatile void*, std::size_t) {
  count_allocation();
}
inline void on_free(const volatile void*) {}  // the sanitizer takes both hooks or neither
[[maybe_unused]] static const int installed = __sanitizer_install_malloc_and_free_hooks(&on_malloc, &on_free);
}  // namespace coverbs::test::counting

#else

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* __libc_valloc(std::size_t);
void* __libc_pvalloc(std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_realloc(p, n);
}
void* memalign(std::size_t align, std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_memalign(align, n);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  if (align % sizeof(void*) != 0 || (align & (align - 1)) != 0) return EINVAL;
  coverbs::test::count_allocation();
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_valloc(n);
}
void* pvalloc(std::size_t n) {
  coverbs::test::count_allocation();
  return __libc_pvalloc(n);
}
void free(void* p) {
  __libc_free(p);
}
}

#endif
