// The count that allocation_counter.hpp keeps, for code that reads it without replacing the
// allocator itself (a benchmark's patterns, shared by programs that count and programs that
// do not: there it stays 0).
#pragma once

#include <atomic>
#include <boost/asio/detail/memory.hpp>
#include <cstddef>
#include <iostream>
#include <new>

namespace coverbs::test {

/// Heap allocations so far, where the program includes allocation_counter.hpp.
inline std::atomic<std::size_t> allocations{0};

inline void count_allocation() noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
}

/// Whether the count sees each way the library and Asio allocate: malloc, operator new, its
/// aligned form (the library's operation memory past its pool) and Asio's aligned_new (its
/// recycled handler memory and coroutine frames): a count that misses one would report no
/// allocations for what it cannot see.
inline bool counter_sees_allocations() {
  const std::size_t before = allocations.load();
  void* volatile block = std::malloc(64);
  std::free(block);
  block = ::operator new(64);
  ::operator delete(block);
  block = ::operator new (64, std::align_val_t{64});
  ::operator delete (block, std::align_val_t{64});
  block = boost::asio::aligned_new(64, 64);
  boost::asio::aligned_delete(block);
  return allocations.load() >= before + 4;
}

/// For a benchmark's main(): counter_sees_allocations(), else says on stderr, under `program`'s
/// name, that its figures would mean nothing.
inline bool counter_trusted(const char* program) {
  if (counter_sees_allocations()) return true;
  std::cerr << program << ": the allocation counter misses allocations; its figures would mean nothing\n";
  return false;
}

}  // namespace coverbs::test
