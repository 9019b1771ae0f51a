// A connect and the socket object it started on, shared by every transport: the socket
// destroyed, moved, moved onto, cancelled or reused at each turn of the context's handlers
// into the connect, as an Asio socket may be.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// A socket destroyed, or moved from, after each number of the context's handlers into its
/// connect: destroyed, the connect ends with operation_aborted unless it had completed; moved,
/// the socket moved to holds the connection. The completion used to act on the socket object
/// it started from.
void connect_outlived_or_moved(transport kind);

/// At each turn of a connect: cancel() ends it with operation_aborted and leaves the socket
/// closed (or, its last step run already, connected), and a new connect on that socket then
/// succeeds. A socket moved onto another that is connecting gives up the target's own connect
/// (operation_aborted unless it had completed) and the target gets the moved connection;
/// the moved-from socket then connects anew beside it. Each connection is checked by a byte
/// through the peer the acceptor took for it.
void connect_cancelled_or_taken_over(transport kind);

}  // namespace coverbs::test
