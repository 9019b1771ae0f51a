// An io_context destroyed while coroutines wait in coverbs operations. As with Asio, the
// pending handlers must be destroyed, never invoked: that frees the coroutine frames and what
// they own, even the socket or acceptor that stores the handler (a cycle nothing else breaks).
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

void destroyed_context_frees_pending_coroutines(transport kind);

}  // namespace coverbs::test
