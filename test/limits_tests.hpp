// The limits of socket_options, shared by both transports: connections an acceptor keeps,
// one-sided operations a connection holds, memory it registers. Reaching one gives a clear
// error at once and leaves everything else working.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>

#include "coverbs/acceptor.hpp"
#include "coverbs/socket.hpp"

namespace coverbs::test {

/// Connects `client` to `server` and returns how the connect ended.
error_code connect_within(boost::asio::io_context& io, socket& client, const acceptor& server,
                          std::chrono::seconds limit);

/// An acceptor that keeps at most two connections turns a third away with connection_refused
/// (RDMA: at connect; TCP: on the first read), never shows it to the application, keeps
/// serving the two, and takes a new one once the application closed one of them.
void connection_limit(transport kind, std::chrono::seconds limit);

/// A connection limited to 100 outstanding one-sided operations (more than the RDMA send queue
/// of 70 and TCP's 16 unanswered requests, so some wait for a slot below the limit): 100 start
/// and succeed, the next two complete at once with too_many_operations and start nothing, and
/// slots free as operations complete.
void operation_limit(transport kind, std::chrono::seconds limit);

/// A connection limited to 1 MiB of registered memory refuses a registration past it with
/// registration_limit (thrown, or in `ec`), counts each registration once however it moves,
/// and takes more once one ends. The peer's limit is its own. A region of 4 GiB or more is
/// refused with value_too_large.
void registration_limit(transport kind);

/// Receive pool options a peer would refuse (no buffer, buffers under 256 B or over 16 MiB,
/// over 1 GiB in all) are invalid_argument at once, on either transport: a connect completes
/// with it without reaching the peer, an acceptor does not open. A pool at the small end
/// connects and carries data.
void unusable_pool_options(transport kind, std::chrono::seconds limit);

}  // namespace coverbs::test
