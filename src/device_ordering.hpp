// Orderings the device makes that ThreadSanitizer cannot see, told to it explicitly.
#pragma once

#include "coverbs/detail/operation.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace coverbs::detail::device_ordering {

// A work request is posted before its completion can be polled: the device orders the two,
// through memory that libibverbs and the kernel touch uninstrumented, so ThreadSanitizer cannot
// see it. These tell it, keyed by the operation, so that what the posting thread wrote before
// the post (counters, the operation) is known to precede what the polling thread does after.
inline void posted(operation* op) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(op);
#else
  (void)op;
#endif
}
inline void polled(operation* op) noexcept {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(op);
#else
  (void)op;
#endif
}

}  // namespace coverbs::detail::device_ordering
