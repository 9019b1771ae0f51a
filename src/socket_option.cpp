#include "coverbs/detail/socket_option.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/error.hpp>
#include <cerrno>
#include <cstring>

namespace coverbs::detail {

namespace asio = boost::asio;

error_code set_raw_option(int fd, int level, int name, const void* value, std::size_t size) {
  if (::setsockopt(fd, level, name, value, static_cast<socklen_t>(size)) == 0) return {};
  return error_code(errno, asio::error::get_system_category());
}

error_code rdma_option(int level, int name, void* value, std::size_t* size) {
  const bool taken =
      (level == IPPROTO_TCP && name == TCP_NODELAY) || (level == SOL_SOCKET && name == SO_REUSEADDR);
  if (!taken) return asio::error::operation_not_supported;
  if (value != nullptr) {
    const int on = 1;
    if (*size < sizeof on) return asio::error::invalid_argument;
    std::memcpy(value, &on, sizeof on);
    *size = sizeof on;
  }
  return {};
}

}  // namespace coverbs::detail
