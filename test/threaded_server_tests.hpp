// Servers on several threads, in the two shapes Asio programs use: one io_context run by
// several threads, the acceptor on a strand and each connection accepted onto a strand of its
// own (Beast's servers); and one io_context per thread, connections accepted onto the workers'
// contexts in turn. Connections run at once on different threads, so a connection whose
// internals ran anywhere but its socket's executor would race (ThreadSanitizer runs this in CI).
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// One io_context on four threads: the acceptor on a strand, each connection onto its own.
void threaded_echo_server(transport kind);

/// One io_context per thread: the acceptor on one, connections onto three others in turn.
void context_per_thread_echo_server(transport kind);

}  // namespace coverbs::test
