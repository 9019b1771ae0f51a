// What tcp_stream's three source files share: receiving (tcp_stream.cpp), sending
// (tcp_stream_send.cpp) and the one-sided operations it emulates (tcp_stream_one_sided.cpp).
#pragma once

#include <cstddef>

#include "coverbs/error.hpp"

namespace coverbs::detail::tcp_stream_shared {

// Bytes queued for sending before writes wait: enough to keep TCP busy, bounded for slow peers.
inline constexpr std::size_t max_outgoing_bytes = 2u << 20;

// What operations still pending when the connection fails end with, as flushed work requests do.
inline error_code flushed() {
  return make_error_code(wc_errc::flushed);
}

}  // namespace coverbs::detail::tcp_stream_shared
