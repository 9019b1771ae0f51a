#pragma once

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <system_error>

namespace coverbs::detail {

/// libibverbs reports failure through errno (or a returned errno value); keep both paths uniform.
[[noreturn]] inline void throw_errno(const char* what, int value = errno) {
  throw std::system_error(value != 0 ? value : EIO, std::generic_category(), what);
}

/// The throwing overloads of the Asio-shaped classes throw what Asio's own throw.
inline void throw_if(const boost::system::error_code& ec, const char* what) {
  if (ec) throw boost::system::system_error(ec, what);
}

}  // namespace coverbs::detail
