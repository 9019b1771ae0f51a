// A socket before it is connected, as on tcp::socket: what answers and what is refused.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// A socket open()ed or bound but not connected: reads, writes, sends, receives (blocking,
/// non-blocking and asynchronous, with flags too), waits, remote_endpoint, shutdown and
/// register_memory fail with not_connected (POSIX's ENOTCONN; the asynchronous ones never
/// inside the call); cancel() succeeds and available() is 0. A closed socket gives
/// bad_descriptor for each, cancel() and available() too.
void unconnected_operations(transport kind);

}  // namespace coverbs::test
