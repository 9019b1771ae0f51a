// A completion condition for asio::async_read_at and async_write_at that moves a slot in as
// few operations as the file allows. Asio's own (transfer_all, transfer_exactly) cap each
// operation at 64 KiB, so a 1 MiB slot took 16 io_uring submissions and 16 completions, each a
// trip through the reactor (and, for tmpfs, through io_uring's worker threads): strace of a
// 1 GiB send counted 16,385 io_uring_enter and ~50,000 epoll_wait calls per side.
#pragma once

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <limits>

namespace ft {

struct whole_slot_t {
  /// Nothing more after an error; otherwise as much as is left (the buffer bounds it).
  std::size_t operator()(const boost::system::error_code& ec, std::size_t) const {
    return ec ? 0 : std::numeric_limits<std::size_t>::max();
  }
};
inline constexpr whole_slot_t whole_slot{};

}  // namespace ft
