// Ending accepts before a client comes, as with tcp::acceptor.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// An accept raced against a timer with `||` (per-operation cancellation, also through
/// use_awaitable's as_default_on acceptor) ends with operation_aborted when the timer wins,
/// and so does one bound to a cancellation signal while another accept waits on (that one
/// takes the next client); acceptor.cancel() ends a pending accept, after which the context
/// runs out of work (nothing listens while no accept waits), and an accept started right
/// after the cancel still takes a client. Each time, the connection works.
void accept_cancellation(transport kind);

}  // namespace coverbs::test
