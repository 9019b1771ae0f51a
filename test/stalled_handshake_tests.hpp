// An RDMA client that stops half-way through the handshake must not hold up an accept onto
// another executor for longer than the acceptor's handshake limit (10 s), nor, once given up
// on, keep any context busy; one that asks for more than a server should give is refused.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <optional>
#include <thread>

#include "coverbs/acceptor.hpp"
#include "coverbs/cm/id.hpp"
#include "coverbs/detail/handshake.hpp"
#include "test_address.hpp"

namespace coverbs::test {

/// Where the stalled accept's socket goes: the acceptor's own executor, a strand of its
/// context, or another context (one per thread, say).
enum class accept_onto { own_executor, strand, other_context };

/// An RDMA client that sends its request (for the receive pool `asked`, by default the
/// options'), then stops while `io` does not run: nobody reads its rdma_cm events, so
/// librdmacm never answers the server's reply (the RTU goes out from rdma_get_cm_event).
class stalled_client {
 public:
  stalled_client(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& server,
                 const socket_options& options, std::optional<detail::stream_geometry> asked = {})
      : id_(io.get_executor()) {
    std::optional<error_code> resolved;
    id_.async_resolve(server, options.resolve_timeout, [&](error_code ec) { resolved = ec; });
    while (!resolved && io.run_one_for(std::chrono::seconds(10)) > 0) {
    }
    BOOST_REQUIRE(resolved && !*resolved);
    pd_.emplace(id_.device());
    service_.emplace(io.get_executor(), id_.device());
    id_.create_queue_pair(*service_, *pd_);
    // The request goes out now; `io` must not run again, or its answer would be taken.
    id_.async_connect(detail::encode_handshake(asked.value_or(detail::local_geometry(options))),
                      [this](error_code ec) { result = ec; });
  }
  stalled_client(const stalled_client&) = delete;
  stalled_client& operator=(const stalled_client&) = delete;

  std::optional<error_code> result;  ///< the connect's, once `io` has run it

 private:
  std::optional<verbs::protection_domain> pd_;  // before the id: freed after its QP
  std::optional<completion_service> service_;
  cm::id id_;
};

/// The acceptor's context and another, driven on this thread.
struct two_contexts {
  boost::asio::io_context io, worker;

  boost::asio::any_io_executor executor_for(accept_onto where) {
    switch (where) {
      case accept_onto::own_executor: return io.get_executor();
      case accept_onto::strand: return boost::asio::make_strand(io);
      case accept_onto::other_context: return worker.get_executor();
    }
    return {};
  }
  /// Runs both until `done` or `limit`; `restarting` a context out of work for now, else
  /// leaving it stopped, which then means it had nothing left to do.
  template <class Done>
  bool drive(const Done& done, std::chrono::seconds limit, bool restarting = true) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      for (auto* context : {&io, &worker}) {
        if (restarting && context->stopped()) context->restart();
      }
      if (io.poll() + worker.poll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  }
  /// True once neither has work left (within `limit`): no handshake lingers on either.
  void expect_both_run_dry(std::chrono::seconds limit) {
    io.restart();
    worker.restart();
    drive([&] { return io.stopped() && worker.stopped(); }, limit, false);
    BOOST_TEST(io.stopped(), "the acceptor's context still has work");
    BOOST_TEST(worker.stopped(), "the worker context still has work");
  }
};

/// A stalled client takes the accept; the accept gives up on it within the limit and takes the
/// next client. The handshake given up on is aborted where it ran: once the connection made is
/// closed, both contexts run out of work, not a minute later when rdma_cm would give up on the
/// stalled client (about 77 s after its request on rxe).
inline void stalled_handshake_does_not_hold_an_accept(accept_onto where) {
  using clock = std::chrono::steady_clock;
  two_contexts contexts;
  boost::asio::io_context stalled_io;
  const socket_options options{.kind = transport::rdma};
  acceptor listener(contexts.io, {rdma_address(), 0}, options);
  stalled_client stalled(stalled_io, listener.local_endpoint(), options);

  const auto target = contexts.executor_for(where);
  std::optional<socket> accepted;
  error_code accept_ec;
  listener.async_accept(target, [&](error_code ec, socket s) {
    accept_ec = ec;
    accepted.emplace(std::move(s));
  });
  const auto started = clock::now();
  contexts.drive([] { return false; }, std::chrono::seconds(3));  // the stalled request takes the accept
  BOOST_TEST(!accepted.has_value());

  socket client(contexts.io, options);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  contexts.drive([&] { return accepted && connected; }, std::chrono::seconds(40));
  const auto waited = clock::now() - started;
  BOOST_REQUIRE(accepted.has_value());
  BOOST_REQUIRE(connected.has_value());
  BOOST_TEST(!accept_ec, accept_ec.message());
  BOOST_TEST(!*connected, connected->message());
  BOOST_TEST((accepted->remote_endpoint() == client.local_endpoint()));
  BOOST_TEST((accepted->get_executor() == target));
  BOOST_TEST(waited >= std::chrono::seconds(9));  // it did wait for the stalled one
  BOOST_TEST(waited < std::chrono::seconds(30));  // and not until rdma_cm gave up on it
  client.close();
  accepted->close();
  listener.close();
  contexts.expect_both_run_dry(std::chrono::seconds(20));
}

/// How the accept of a stalled client's handshake ends: the acceptor closes, or is cancelled
/// (and stays open).
enum class accept_ended_by { close, cancel };

/// Ending the accept while a stalled client's handshake is under way ends it with
/// operation_aborted and gives that handshake up wherever it runs: both contexts run dry soon,
/// not when rdma_cm gives up on the client (about 77 s on rxe). Closing gives every handshake up
/// at once; after cancel() a handshake answered for whichever accept on the acceptor's own
/// executor comes next goes within the handshake limit (10 s).
inline void ending_the_accept_gives_up_a_stalled_handshake(accept_onto where, accept_ended_by how) {
  two_contexts contexts;
  boost::asio::io_context stalled_io;
  const socket_options options{.kind = transport::rdma};
  acceptor listener(contexts.io, {rdma_address(), 0}, options);
  stalled_client stalled(stalled_io, listener.local_endpoint(), options);

  std::optional<error_code> accept_ec;
  listener.async_accept(contexts.executor_for(where), [&](error_code ec, socket) { accept_ec = ec; });
  contexts.drive([] { return false; }, std::chrono::seconds(3));  // the stalled request is answered
  BOOST_TEST(!accept_ec.has_value());
  if (how == accept_ended_by::close) {
    listener.close();
  } else {
    listener.cancel();
  }
  BOOST_REQUIRE(contexts.drive([&] { return accept_ec.has_value(); }, std::chrono::seconds(5)));
  BOOST_TEST((*accept_ec == boost::asio::error::operation_aborted), accept_ec->message());
  contexts.expect_both_run_dry(std::chrono::seconds(30));
}

/// An accept onto another context whose connection is made there, its result posted back to
/// the acceptor's context but not yet run there, when the acceptor closes: the accept still
/// ends, with operation_aborted (close() used to destroy its handler uncalled), and the
/// connection made for it is closed.
inline void closing_the_acceptor_with_an_accepted_connection_on_its_way_ends_the_accept() {
  two_contexts contexts;
  boost::asio::io_context client_io;
  const socket_options options{.kind = transport::rdma};
  acceptor listener(contexts.io, {rdma_address(), 0}, options);
  std::optional<error_code> accept_ec;
  listener.async_accept(contexts.worker.get_executor(), [&](error_code ec, socket) { accept_ec = ec; });
  socket client(client_io, options);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  // Runs `which` (and the client) until `done` or `limit`.
  const auto drive = [&](boost::asio::io_context& which, const auto& done, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      for (auto* context : {&which, &client_io}) {
        if (context->stopped()) context->restart();
      }
      if (which.poll() + client_io.poll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // The request arrives here and is answered on the worker: the acceptor's context runs until
  // the worker has the answer to run (then not again until the close).
  const auto worker_ran = [&] {
    contexts.worker.restart();  // a poll that found nothing left it stopped
    return contexts.worker.poll() > 0;
  };
  drive(contexts.io, worker_ran, std::chrono::milliseconds(30000));
  BOOST_REQUIRE(!connected.has_value());
  // The worker makes the connection; its result is posted to the acceptor's context.
  drive(
      contexts.worker, [&] { return connected.has_value(); }, std::chrono::milliseconds(30000));
  BOOST_REQUIRE(connected.has_value());
  BOOST_TEST(!*connected, connected->message());
  // Its ESTABLISHED comes to the worker, which posts the result back (best effort: were it
  // later, the close would abort the handshake, and the test would pass without the window).
  drive(
      contexts.worker, [] { return false; }, std::chrono::milliseconds(1000));
  BOOST_TEST(!accept_ec.has_value());
  listener.close();
  BOOST_REQUIRE_MESSAGE(contexts.drive([&] { return accept_ec.has_value(); }, std::chrono::seconds(5)),
                        "the accept never ended");
  BOOST_TEST((*accept_ec == boost::asio::error::operation_aborted), accept_ec->message());
  // The connection nobody took is closed: the client reads its end.
  char byte = 0;
  std::optional<error_code> read;
  client.async_read_some(boost::asio::buffer(&byte, 1), [&](error_code ec, std::size_t) { read = ec; });
  drive(
      contexts.worker, [&] { return read.has_value(); }, std::chrono::milliseconds(30000));
  BOOST_REQUIRE(read.has_value());
  BOOST_TEST((*read == boost::asio::error::eof || *read == boost::asio::error::connection_reset),
             read->message());
  client.close();
  client_io.restart();
  client_io.run_for(std::chrono::seconds(1));
  contexts.expect_both_run_dry(std::chrono::seconds(20));
}

/// A client whose handshake asks for a receive pool of 1 TiB (each field in range) is refused
/// before any connection is made: the server would have to allocate and register that much to
/// send into it (std::bad_alloc escaped from its io_context::run). The accept takes the next
/// client.
inline void client_asking_for_too_large_a_pool_is_refused() {
  two_contexts contexts;  // the acceptor's, and the raw client's as the worker
  const socket_options options{.kind = transport::rdma};
  acceptor listener(contexts.io, {rdma_address(), 0}, options);
  std::optional<socket> accepted;
  error_code accept_ec;
  listener.async_accept([&](error_code ec, socket s) {
    accept_ec = ec;
    accepted.emplace(std::move(s));
  });
  stalled_client greedy(contexts.worker, listener.local_endpoint(), options,
                        detail::stream_geometry{65535, 16u << 20});
  // The server's poll throws where it fails outside a handler's error.
  contexts.drive([&] { return greedy.result.has_value(); }, std::chrono::seconds(20));
  BOOST_REQUIRE(greedy.result.has_value());
  BOOST_TEST((*greedy.result == boost::asio::error::connection_refused), greedy.result->message());
  BOOST_TEST(!accepted.has_value());

  socket client(contexts.io, options);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  contexts.drive([&] { return accepted && connected; }, std::chrono::seconds(30));
  BOOST_REQUIRE(accepted.has_value());
  BOOST_REQUIRE(connected.has_value());
  BOOST_TEST(!accept_ec, accept_ec.message());
  BOOST_TEST(!*connected, connected->message());
  BOOST_TEST((accepted->remote_endpoint() == client.local_endpoint()));
  client.close();
  accepted->close();
  listener.close();
  contexts.drive([] { return false; }, std::chrono::seconds(3));
}

}  // namespace coverbs::test
