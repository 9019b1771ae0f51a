// The peer process killed (SIGKILL) in the middle of a stream, shared by both transports: the
// survivor has a read, a write, a send, a receive, a wait for an immediate and a stream of
// one-sided operations pending, and every one of them must end with an error, within a
// bounded time, after which the socket closes and its resources are released.
#pragma once

#include <chrono>

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// The survivor accepts fault_peer's connection, gets the stream and one-sided operations going
/// both ways until its write waits for a peer that does not read, then kills the peer.
void peer_killed_mid_stream(transport kind, std::chrono::seconds limit);

}  // namespace coverbs::test
