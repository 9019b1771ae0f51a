#include "coverbs/wire/region_table.hpp"

#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "coverbs/detail/throw_error.hpp"
#include "coverbs/error.hpp"

namespace coverbs::wire {

namespace {

// A peer must not guess keys it was never given, so keys come from the kernel's random source
// rather than a counter or a seeded generator whose state a peer could learn. getrandom opens
// no file (std::random_device may, per call) and fails with an errno, which register_memory
// reports as its error_code.
std::uint32_t random_key() {
  std::uint32_t key = 0;
  for (;;) {
    const ssize_t n = ::getrandom(&key, sizeof key, 0);
    if (n == static_cast<ssize_t>(sizeof key)) return key;
    if (n < 0 && errno != EINTR) coverbs::detail::throw_errno("coverbs: getrandom");
  }
}

}  // namespace

remote_buffer region_table::register_region(std::span<std::byte> memory, verbs::access rights) {
  if (memory.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("coverbs: a region must be shorter than 4 GiB");
  }
  std::uint32_t rkey = 0;
  while (rkey == 0 || regions_.contains(rkey)) rkey = random_key();
  regions_.emplace(rkey, region{memory, rights});
  return {reinterpret_cast<std::uint64_t>(memory.data()), rkey, static_cast<std::uint32_t>(memory.size())};
}

void region_table::deregister(std::uint32_t rkey) noexcept {
  regions_.erase(rkey);
}

std::error_code region_table::locate(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                                     verbs::access right, std::byte*& at) const noexcept {
  // An operation of no bytes reaches no memory: as InfiniBand's rule C9-88 has it (and rxe
  // does), its key and address are not checked. `at` still points somewhere, for a caller's
  // zero-byte copy.
  if (length == 0) {
    static std::byte nowhere;
    at = &nowhere;
    return {};
  }
  const auto it = regions_.find(rkey);
  if (it == regions_.end() || !verbs::has(it->second.rights, right)) return wc_errc::remote_access;
  const std::span<std::byte> memory = it->second.memory;
  const auto start = reinterpret_cast<std::uint64_t>(memory.data());
  // Written so that no sum can wrap: addr - start only after addr >= start is known.
  if (addr < start || addr - start > memory.size() || length > memory.size() - (addr - start)) {
    return wc_errc::remote_access;
  }
  at = memory.data() + (addr - start);
  return {};
}

std::error_code region_table::check(std::uint32_t rkey, std::uint64_t addr, std::uint64_t length,
                                    verbs::access right) const noexcept {
  std::byte* at = nullptr;
  return locate(rkey, addr, length, right, at);
}

std::error_code region_table::locate_word(std::uint32_t rkey, std::uint64_t addr,
                                          std::uint64_t*& word) noexcept {
  std::byte* at = nullptr;
  // The device checks key, rights and bounds before alignment (rxe does), so the errors agree.
  if (auto ec = locate(rkey, addr, sizeof(std::uint64_t), verbs::access::remote_atomic, at)) return ec;
  if (addr % alignof(std::uint64_t) != 0) return wc_errc::remote_invalid_request;
  word = reinterpret_cast<std::uint64_t*>(at);
  return {};
}

// atomic_ref makes the update atomic with respect to local threads that use atomics on the same
// word too, as IBV_ATOMIC_GLOB devices are with the CPU.
std::error_code region_table::apply_fetch_add(std::uint32_t rkey, std::uint64_t addr, std::uint64_t add,
                                              std::uint64_t& previous) noexcept {
  std::uint64_t* word = nullptr;
  if (auto ec = locate_word(rkey, addr, word)) return ec;
  previous = std::atomic_ref(*word).fetch_add(add);
  return {};
}

std::error_code region_table::apply_compare_swap(std::uint32_t rkey, std::uint64_t addr,
                                                 std::uint64_t compare, std::uint64_t swap,
                                                 std::uint64_t& previous) noexcept {
  std::uint64_t* word = nullptr;
  if (auto ec = locate_word(rkey, addr, word)) return ec;
  std::atomic_ref(*word).compare_exchange_strong(compare, swap);
  previous = compare;  // compare_exchange leaves the value it found in `compare`
  return {};
}

}  // namespace coverbs::wire
