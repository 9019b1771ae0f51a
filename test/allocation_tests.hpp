// Steady-state socket operations allocate nothing: after a warm-up, a thousand rounds of each
// kind of operation make no heap allocation (malloc, operator new, Asio's aligned blocks), on
// either transport, with both ends of a connection on one thread (more operations in flight
// than Asio's per-thread cache of two blocks holds). Plain callbacks drive the rounds, so that
// what is counted is the library's path alone (a coroutine frame per operation comes from
// Asio's recycling cache, which a test cannot hold constant).
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// Every kind of socket operation, each in its own run.
void steady_state_operations_allocate_nothing(transport kind);

}  // namespace coverbs::test
