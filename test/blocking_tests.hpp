// The blocking calls of coverbs::socket and coverbs::connect, used as a blocking Asio client
// uses tcp::socket's (boost::asio::write, read, read_until over them), against an asynchronous
// server on a thread of its own, over each transport.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// The client's io_context is never run but by its blocking calls. The server answers: the
/// five bytes written, upper-cased; the message sent, reversed; then a line; then it waits
/// for the end of the stream and closes. Inside a handler of its own context a blocking call
/// fails with would_block instead of stalling that context.
void blocking_calls(transport kind);

/// A client on a strand of a thread_pool, another kind of context than an io_context: its
/// blocking calls leave running it to the pool's threads, and wait for them; inside a handler
/// of the pool a blocking call fails with would_block, and an exception that a call's start
/// throws on the pool leaves the call.
void blocking_calls_on_a_thread_pool(transport kind);

/// A handler of the client's context throws while a blocking call runs it: before the call's
/// operation has started, the exception leaves the call at once and nothing starts; with the
/// operation under way, the call cancels it and waits for its end first, losing nothing that
/// arrives later. A start that throws throws from the call, on an io_context as on a pool.
void blocking_calls_meet_throwing_handlers(transport kind);

/// The shape of Asio's blocking echo server: accept() (reporting each client's address) and
/// accept(peer) on an io_context nobody else runs, then blocking reads and writes; accept()
/// inside a handler of that context fails with would_block, once closed with bad_descriptor.
void blocking_server(transport kind);

}  // namespace coverbs::test
