#pragma once

#include <cerrno>
#include <system_error>

namespace coverbs::detail {

/// libibverbs reports failure through errno (or a returned errno value); keep both paths uniform.
[[noreturn]] inline void throw_errno(const char* what, int value = errno) {
  throw std::system_error(value != 0 ? value : EIO, std::generic_category(), what);
}

}  // namespace coverbs::detail
