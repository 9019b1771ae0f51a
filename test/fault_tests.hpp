// Fault and pressure bodies shared by both transports, over real connections (acceptor and
// connect): a side closing while one-sided operations are in flight, a slow reader, queues
// filled far beyond their depth, and an acceptor closed with a connection nobody took.
#pragma once

#include <chrono>
#include <cstddef>

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// When a side closes in `close_during_one_sided`.
enum class close_point {
  at_once,     ///< right after the operations started: many are queued or on the wire
  in_handler,  ///< inside the tenth one's handler (over Soft-RoCE all may be done by then)
};

/// `ops` mixed one-sided operations of 64 KiB (more than the RDMA send queue holds, so some
/// wait for a slot) go from a to b, and one side closes. Every operation completes, in the
/// order started: successes with the right result, then only errors. A requester's close
/// cancels its operations; a responder's ends them at once over TCP, and over RDMA once the
/// requester has acknowledged the responder's end of stream (rdma_stream::close keeps the QP
/// up until then, and Soft-RoCE may serve every operation before it).
void close_during_one_sided(transport kind, bool requester_closes, close_point when,
                            std::chrono::seconds limit);

/// How the slow reader test runs on a transport: the reader takes at most `read_size` bytes,
/// then pauses, so it is slower than the transport; `total` is several times `ahead_limit`.
struct slow_reader_setup {
  socket_options options;
  std::size_t total, ahead_limit, read_size;
  std::chrono::milliseconds pause;
};

/// A writer far faster than its reader: its writes wait (none fails), the bytes it is ahead
/// stay under `ahead_limit` while it writes `total` bytes, the live heap grows by less than
/// `ahead_limit`, and the reader gets every byte in order.
void slow_reader_holds_the_writer_back(transport kind, const slow_reader_setup& setup,
                                       std::chrono::seconds limit);

/// Sends while the peer receives nothing: they complete until the peer's pool (RDMA credits;
/// TCP's buffers) is full, then one waits instead of failing, and completes once the peer
/// receives. Every message arrives once, whole and in order. `pool`: the number of sends that
/// complete before one waits, where the transport fixes it (0: not fixed).
void sends_wait_for_the_receiver(transport kind, std::size_t pool, std::chrono::seconds limit);

/// Far more one-sided operations at once than the queues hold (RDMA: a send queue of 70
/// requests with this pool; TCP: 16 unanswered requests): all wait their turn, none fails,
/// and each completes in order with its own result.
void one_sided_beyond_the_queue_depth(transport kind, std::size_t ops, std::chrono::seconds limit);

/// A connection that arrives after the application stopped waiting is kept for the next
/// accept; closing the acceptor instead refuses it, so its client learns rather than waiting
/// for ever: an RDMA connect nobody answered fails, and a TCP one (the kernel completed it)
/// fails its first read, both with connection_refused.
void closing_the_acceptor_refuses_untaken_connections(transport kind, std::chrono::seconds limit);

}  // namespace coverbs::test

/// Registers the bodies above and the peer kill of peer_kill_tests.hpp for `kind`; `limit`
/// bounds every wait. Each transport adds its own slow_reader case: its speeds differ.
#define COVERBS_FAULT_TEST_CASES(kind, limit)                                                          \
  BOOST_AUTO_TEST_CASE(peer_killed_mid_stream) {                                                       \
    coverbs::test::peer_killed_mid_stream(kind, limit);                                                \
  }                                                                                                    \
  COVERBS_CLOSE_DURING_ONE_SIDED(kind, limit, responder, false, at_once)                               \
  COVERBS_CLOSE_DURING_ONE_SIDED(kind, limit, responder, false, in_handler)                            \
  COVERBS_CLOSE_DURING_ONE_SIDED(kind, limit, requester, true, at_once)                                \
  COVERBS_CLOSE_DURING_ONE_SIDED(kind, limit, requester, true, in_handler)                             \
  BOOST_AUTO_TEST_CASE(sends_wait_for_the_receiver) {                                                  \
    coverbs::test::sends_wait_for_the_receiver(kind, kind == coverbs::transport::rdma ? 8 : 0, limit); \
  }                                                                                                    \
  BOOST_AUTO_TEST_CASE(one_sided_beyond_the_queue_depth) {                                             \
    coverbs::test::one_sided_beyond_the_queue_depth(kind, 2000, limit);                                \
  }                                                                                                    \
  BOOST_AUTO_TEST_CASE(closing_the_acceptor_refuses_untaken_connections) {                             \
    coverbs::test::closing_the_acceptor_refuses_untaken_connections(kind, limit);                      \
  }

#define COVERBS_CLOSE_DURING_ONE_SIDED(kind, limit, who, requester, when)                            \
  BOOST_AUTO_TEST_CASE(who##_closes_##when##_during_one_sided) {                                     \
    coverbs::test::close_during_one_sided(kind, requester, coverbs::test::close_point::when, limit); \
  }
