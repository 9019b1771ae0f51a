// Registering the transfer's buffers, whose failure is the transfer's, told to the peer.
#pragma once

#include <cerrno>
#include <coverbs/registered_memory.hpp>
#include <coverbs/socket.hpp>
#include <span>
#include <string>

#include "channel.hpp"

namespace ft {

/// `memory` registered on `s` with `rights`, for `what` ("the send buffers"); a failure throws
/// transfer_error (origin local), with the likely cause where the device ran out of lockable
/// memory, since that is what users hit first: Debian limits an unprivileged user to 8 MiB.
inline coverbs::registered_memory register_buffers(coverbs::socket& s, std::span<std::byte> memory,
                                                   coverbs::verbs::access rights, const std::string& what) {
  coverbs::error_code ec;
  coverbs::registered_memory r = s.register_memory(memory, rights, ec);
  if (!ec) return r;
  std::string hint;
  if (ec == std::errc::not_enough_memory) {
    hint =
        " (more than the locked-memory limit, ulimit -l, allows: raise it, or use a smaller --window or "
        "--slot-size)";
  }
  throw transfer_error(transfer_error::origin::local, "cannot register " +
                                                          std::to_string(memory.size() >> 10) + " KiB of " +
                                                          what + ": " + ec.message() + hint);
}

}  // namespace ft
