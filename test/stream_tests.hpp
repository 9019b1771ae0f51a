// Test bodies shared by every transport: each takes a connected pair of sockets (a, b) and
// the io_context running them, so RDMA and TCP run the very same assertions.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "coverbs/socket.hpp"

namespace coverbs::test {

namespace asio = boost::asio;

using namespace asio::experimental::awaitable_operators;

/// Runs `body` as a coroutine to completion within `limit`, rethrowing its exception.
template <class F>
void run_coroutine(asio::io_context& io, F body, std::chrono::seconds limit = std::chrono::seconds(120)) {
  std::exception_ptr failure;
  bool finished = false;
  asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
    io.stop();  // a connection's posted receives keep the context busy for ever
  });
  io.restart();
  io.run_for(limit);
  BOOST_REQUIRE_MESSAGE(finished, "coroutine did not finish within the time limit");
  if (failure) std::rethrow_exception(failure);
}

/// Runs `io` for up to 20 s; whether a handler's std::runtime_error came out of it.
inline bool run_catches_a_throw(asio::io_context& io) {
  io.restart();
  try {
    io.run_for(std::chrono::seconds(20));
  } catch (const std::runtime_error&) {
    return true;
  }
  return false;
}

/// Runs `io` until `done()` holds or `limit` passes: connections keep their contexts busy, so
/// run() alone would not return.
template <class Predicate>
void run_until(asio::io_context& io, Predicate done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  io.restart();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(100));
}

/// Whether a byte `a` writes reaches `b`: checks that a connection carries data, not only that
/// its sockets are open.
template <class Stream>
bool carries_a_byte(asio::io_context& io, Stream& a, Stream& b,
                    std::chrono::seconds limit = std::chrono::seconds(30)) {
  const char sent = 'x';
  char got = 0;
  std::optional<error_code> written, read;
  asio::async_write(a, asio::buffer(&sent, 1), [&](error_code ec, std::size_t) { written = ec; });
  asio::async_read(b, asio::buffer(&got, 1), [&](error_code ec, std::size_t) { read = ec; });
  run_until(
      io, [&] { return written && read; }, limit);
  return written && read && !*written && !*read && got == sent;
}

inline std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

/// asio::async_write and asio::async_read move a large random payload both ways at once.
void bulk_both_ways(boost::asio::io_context& io, socket& a, socket& b, std::size_t size);

/// async_read_until finds lines across reads; shutdown gives the reader eof after the data.
void lines_then_eof(boost::asio::io_context& io, socket& a, socket& b);

/// The peer's end of stream outlasts the connection: once a reader has had the peer's last
/// bytes and its end, a write into the gone peer fails, and reading again still gives eof (as
/// on a TCP socket), not the write's error.
void end_of_stream_outlasts_the_connection(boost::asio::io_context& io, socket& a, socket& b);

/// Messages keep their boundaries; a too-small buffer gets message_size and loses nothing.
void messages_keep_boundaries(boost::asio::io_context& io, socket& a, socket& b);

/// Closes the sockets and runs what that completes as it goes out of scope: declared after the
/// locals a test's handlers write to, a test that failed half way leaves no handler pointing at
/// them.
struct close_on_exit {
  socket& a;
  socket* b;
  boost::asio::io_context& io;
  close_on_exit(socket& a, socket* b, boost::asio::io_context& io) : a(a), b(b), io(io) {}
  close_on_exit(const close_on_exit&) = delete;
  close_on_exit& operator=(const close_on_exit&) = delete;
  ~close_on_exit() {
    a.close();
    if (b != nullptr) b->close();
    io.restart();
    io.poll();
  }
};

/// What a write (or send) the cancellation tests cancel reported, once it completed.
using write_outcome = std::optional<std::pair<error_code, std::size_t>>;

/// What the cancellation tests write after the cancelled write.
inline const std::string cancel_marker = "next";

/// Messages from below min_direct_bytes up to the largest, each gathered from two pieces and
/// followed by a few stream bytes: the peer receives each whole, in order, with the stream
/// bytes between them. Over TCP a message of min_direct_bytes or more goes out from the
/// caller's memory (direct_bytes_written counts it); over RDMA these, in unregistered memory,
/// are copied (messages_from_registered_memory has the uncopied ones).
void large_messages_between_stream_writes(boost::asio::io_context& io, socket& a, socket& b);

/// A read handler that throws leaves io_context::run, as Asio's do, and the stream goes on:
/// each round's bytes arrive, in order, for more rounds than a small RDMA receive pool has
/// buffers (a buffer kept from the peer at each throw would stop the writer after that many),
/// and both directions still work after.
void throwing_read_handlers_leave_run_and_the_stream_goes_on(boost::asio::io_context& io, socket& a,
                                                             socket& b);

/// A write handler that throws leaves io_context::run, and the stream goes on: the message
/// sent behind that write completes and arrives, as do the write's bytes. `ahead` bytes are
/// written first, in copied writes each of which must be taken whole (RDMA: within the
/// credits); over TCP with small kernel buffers they are queued, and the large write and the
/// message then go out together from the callers' memory, ended by one completion.
void throwing_write_handlers_leave_run_and_the_stream_goes_on(boost::asio::io_context& io, socket& a,
                                                              socket& b, std::size_t ahead);

/// The largest message, its send cancelled at once: the send completes whole or with
/// operation_aborted and nothing sent, and the peer receives the message exactly when the send
/// reported it, then the next. Over TCP it goes out from the caller's memory, which cannot be
/// recalled: it completes whole.
void send_cancelled_at_once_is_all_or_nothing(boost::asio::io_context& io, socket& a, socket& b);

/// A read that loses a race with a timer is cancelled, and the connection is unharmed.
void read_cancelled_by_timer_leaves_connection_usable(boost::asio::io_context& io, socket& a, socket& b);

/// A reader whose peer writes faster than it reads does not keep its context to itself: a
/// timer on the same context fires while the peer (on a context and thread of its own) is
/// still writing. Over TCP the reads once took the socket's bytes one after the other inside a
/// single handler for as long as the peer kept writing.
void fast_peer_leaves_room_for_other_handlers(boost::asio::io_context& io, socket& a,
                                              boost::asio::io_context& peer_io, socket& b);

/// Large writes of random sizes against reads of random sizes in one to three pieces, some
/// cancelled a few turns after they start: every byte arrives once, in order, and a cancelled
/// read ends with operation_aborted having taken none. Over TCP a read that waits takes bytes
/// from the socket straight into its buffers (direct_bytes_read counts them); over RDMA they
/// land in the receive buffers first.
void waiting_reads_of_random_sizes(boost::asio::io_context& io, socket& a, socket& b);

/// A large write cancelled while the peer reads nothing ends with operation_aborted and the
/// count of bytes it moved; the peer then reads exactly those bytes, intact, and what is
/// written next. Over TCP the write's last piece goes out from the caller's memory and cannot
/// be recalled: the write ends once the peer has made room for it, and counts it.
void write_cancelled_by_timer_moves_what_it_reports(boost::asio::io_context& io, socket& a, socket& b,
                                                    std::size_t size);

/// Writes (async_write_some calls, as many as it takes) of a sequence whose pieces are memory
/// registered on the connection, then not, then registered, followed by small asio::async_write
/// calls: the peer reads all of it, in order. Over RDMA the registered pieces go out from that
/// memory without a copy (the unregistered one is copied, and so are the later writes, from
/// unregistered memory); over TCP any write of min_direct_bytes or more does.
void writes_from_registered_memory(boost::asio::io_context& io, socket& a, socket& b, std::size_t size);

/// Messages from memory registered on the connection. Over RDMA with zero_copy_messages, one of
/// min_direct_bytes or more in one registered piece goes out uncopied (direct_bytes_written
/// counts it) and completes once the device no longer reads it, so the sender overwrites its
/// buffer as soon as a send completes; a smaller one, one gathered from two pieces, and all of
/// them without the option are copied. Over TCP every message of min_direct_bytes or more goes
/// out from the caller's memory. The peer receives each whole and in order; the last, cancelled
/// at once, cannot be recalled where it went out uncopied.
void messages_from_registered_memory(boost::asio::io_context& io, socket& a, socket& b);

/// A message and a write, both from registered memory and both large enough to go out
/// uncopied (over RDMA with zero_copy_messages), in flight at once, the message's region
/// deregistered as soon as its send has started: each completes on its own, whole, and the peer
/// receives the message and reads the bytes intact.
void uncopied_message_and_write_at_once(boost::asio::io_context& io, socket& a, socket& b);

/// A write from registered memory (over RDMA sent uncopied, the SENDs reading the caller's
/// memory) cancelled at once, while its bytes are on the way: they cannot be recalled, so the
/// write completes with what it sent, which the peer reads, intact, and then what comes next.
void registered_write_cancelled_in_flight(boost::asio::io_context& io, socket& a, socket& b,
                                          std::size_t size);

/// Closing a socket ends its pending read with operation_aborted; the peer reads eof where a
/// connection manager tells it (`peer_notified`; bare loopback queue pairs have none).
void close_aborts_pending_and_peer_sees_eof(boost::asio::io_context& io, socket& a, socket& b,
                                            bool peer_notified = true);

/// As closing a TCP socket: `a` writes while `b` reads nothing until a write has to wait (the
/// transport's queues and the kernel's are full), then closes; `b` still reads every byte of
/// the writes that completed, then eof.
void close_delivers_what_was_written(boost::asio::io_context& io, socket& a, socket& b);

/// shutdown(shutdown_receive) ends a pending read with eof, and later reads and receives too,
/// as on a TCP socket; writing goes on, and the peer reads it. After shutdown(shutdown_send)
/// a write of no bytes still succeeds (a no-op), one of a byte gets broken_pipe.
void shutdown_receive_ends_reads(boost::asio::io_context& io, socket& a, socket& b);

/// A lazy operation (asio::deferred) acts on the socket as it is when it starts, as on an Asio
/// socket: one made while open and started later moves bytes; one started after close() gets
/// bad_descriptor and touches nothing.
void lazy_operation_acts_on_the_socket_when_started(boost::asio::io_context& io, socket& a, socket& b);

/// Small writes and sends usually complete at once (the transport takes the bytes before the
/// handler is stored): as with any Asio operation, the handler still never runs inside the
/// initiating function, runs on its own associated executor, is allocated from its own
/// associated allocator, and every kind of completion token works.
void small_writes_keep_asio_rules(boost::asio::io_context& io, socket& a, socket& b);

}  // namespace coverbs::test
