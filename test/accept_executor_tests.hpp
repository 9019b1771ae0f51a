// acceptor::async_accept(executor or context, token): the accepted socket's executor is the one
// given, as Beast's servers accept onto a strand, over each transport.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// Accepting onto a strand: the socket's executor is the strand (its operations' handlers run
/// there), the accept's handler runs on the acceptor's, and the connection works; likewise
/// into a socket on the strand, and onto another io_context, by its executor or into its
/// socket (the client's address reported by both).
void accept_onto_executor(transport kind);

/// A connection accepted onto another context needs nothing of the acceptor's any more: with
/// the acceptor and its context gone, it still carries data both ways, ends, and leaves no work
/// behind on its context (its rdma_cm events come through that context's event channel).
void accepted_connection_outlives_the_acceptors_context(transport kind);

}  // namespace coverbs::test
