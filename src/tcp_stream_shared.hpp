// What tcp_stream's four source files share: receiving (tcp_stream.cpp), sending
// (tcp_stream_send.cpp), the one-sided operations it emulates (tcp_stream_one_sided.cpp), and
// failure and close (tcp_stream_failure.cpp).
#pragma once

#include <boost/asio/error.hpp>
#include <cstddef>

#include "coverbs/detail/tcp_stream.hpp"
#include "coverbs/error.hpp"

// Each of the four files says `using namespace tcp_stream_shared;`.
namespace coverbs::detail::tcp_stream_shared {

namespace error = boost::asio::error;
using wire::frame_status;
using wire::frame_type;
using kind = one_sided_request::kind;

// Bytes queued for sending before writes wait: enough to keep TCP busy, bounded for slow peers.
inline constexpr std::size_t max_outgoing_bytes = 2u << 20;

// What operations still pending when the connection fails end with, as flushed work requests do.
inline error_code flushed() {
  return make_error_code(wc_errc::flushed);
}

// What a frame that breaks the protocol fails the connection with.
inline error_code malformed() {
  return make_error_code(errc::malformed_frame);
}

// The cancellation slot of the handler a one-sided operation holds (a size's or a value's).
template <class Operation>
auto slot_of(const Operation& op) noexcept {
  return op.on_size ? op.on_size.get_cancellation_slot() : op.on_value.get_cancellation_slot();
}

// Clears that slot, whose canceller points at the stream: once the operation's result is known,
// or its handler is destroyed with the context.
template <class Operation>
void disconnect(const Operation& op) noexcept {
  if (auto slot = slot_of(op); slot.is_connected()) slot.clear();
}

}  // namespace coverbs::detail::tcp_stream_shared
