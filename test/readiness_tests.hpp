// Readiness as on tcp::socket, over each transport: async_wait and wait, non-blocking calls,
// and the message-flag overloads of send and receive.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// async_wait: wait_write completes on a fresh connection, wait_read once bytes or a message
/// arrive (and only then), or at the end of the stream; a second wait of a type is refused
/// (in_progress); cancel() and close() end pending waits with operation_aborted; a closed
/// socket gives bad_descriptor, never inside the call; wait() blocks as connect() does.
void waits_as_asio(transport kind);

/// A client waits for the server's greeting right after connecting, before the handshake's
/// last frames have arrived, and the server writes only later: the wait completes (the
/// transport keeps reading while a wait_read is pending).
void wait_for_greeting(transport kind);

/// Non-blocking writes fill the pipe while the peer reads nothing, until would_block; a
/// wait_write then waits until the peer reads, which it does reactor-style (async_wait, then
/// non-blocking read_some until would_block) inside a coroutine, and gets every byte in order.
void full_pipe_then_reactor_style_reads(transport kind);

/// non_blocking(): refused on a socket neither open nor connected, off after close();
/// read_some and receive end with would_block at once when nothing is there, message_size
/// for a too-small buffer (the message stays), eof after the peer's shutdown; send refuses a
/// message too large, write_some after shutdown gives broken_pipe; asynchronous operations
/// still wait.
void non_blocking_as_asio(transport kind);

/// send, receive, async_send and async_receive with message flags: 0 as without, any other
/// flag operation_not_supported (asynchronously: never inside the call).
void message_flags_as_asio(transport kind);

}  // namespace coverbs::test
