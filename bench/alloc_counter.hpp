// Counts every operator new in the program, so a benchmark can report heap allocations per
// operation (the target is none in steady state). Include from exactly one file per program:
// it replaces the global operator new.
#pragma once

#include <cstdlib>
#include <new>

#include "common.hpp"

// GCC cannot see that the replaced operator new below allocates with malloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  bench::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
