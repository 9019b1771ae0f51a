// Socket options as coverbs::socket and coverbs::acceptor take them: set on a TCP object where
// there is one, answered for RDMA where there is not, kept raw until a connection exists.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <vector>

#include "coverbs/error.hpp"

namespace coverbs::detail {

/// A socket option set before connecting, as setsockopt(2) takes it.
struct raw_socket_option {
  int level = 0, name = 0;
  std::vector<unsigned char> value;
};

/// setsockopt(2) on `fd`, its errno as an error_code.
error_code set_raw_option(int fd, int level, int name, const void* value, std::size_t size);

/// RDMA's answer to an option a TCP program sets (`value` and `size` null) or reads, for
/// sockets and acceptors alike: `no_delay` and `reuse_address` are taken and read as on (RDMA
/// never holds a send back; rdma_cm's ports are free again at once), others are
/// `operation_not_supported`.
error_code rdma_option(int level, int name, void* value, std::size_t* size);

/// Reads `option` for `protocol` through `read(level, name, value, size)`, which answers as
/// getsockopt(2) does: `size` in, the size read out (the option takes it).
template <class GettableSocketOption, class RawRead>
error_code read_option(GettableSocketOption& option, const boost::asio::ip::tcp& protocol, RawRead read) {
  std::size_t size = option.size(protocol);
  error_code ec = read(option.level(protocol), option.name(protocol), option.data(protocol), size);
  if (!ec) option.resize(protocol, size);
  return ec;
}

/// Sets `option` on `tcp` (a TCP socket or acceptor), or where that is null gives RDMA's answer.
template <class TcpObject, class SettableSocketOption>
void set_option_on(TcpObject* tcp, const SettableSocketOption& option, error_code& ec) {
  if (tcp != nullptr) {
    tcp->set_option(option, ec);
    return;
  }
  // The options RDMA answers have the same level and name in both families.
  const auto protocol = boost::asio::ip::tcp::v4();
  ec = rdma_option(option.level(protocol), option.name(protocol), nullptr, nullptr);
}

/// Reads `option` from `tcp`, or where that is null RDMA's answer.
template <class TcpObject, class GettableSocketOption>
void get_option_from(const TcpObject* tcp, GettableSocketOption& option, error_code& ec) {
  if (tcp != nullptr) {
    tcp->get_option(option, ec);
    return;
  }
  ec = read_option(option, boost::asio::ip::tcp::v4(),
                   [](int level, int name, void* value, std::size_t& size) {
                     return rdma_option(level, name, value, &size);
                   });
}

}  // namespace coverbs::detail
