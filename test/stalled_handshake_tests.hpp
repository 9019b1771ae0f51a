// An RDMA client that stops half-way through the handshake must not hold up an accept onto
// another executor for longer than the acceptor's handshake limit (10 s).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <optional>

#include "coverbs/acceptor.hpp"
#include "coverbs/cm/id.hpp"
#include "coverbs/detail/handshake.hpp"
#include "test_address.hpp"

namespace coverbs::test {

/// The stalled client sends its request, then nobody reads its rdma_cm events, so librdmacm
/// never answers the server's reply (the RTU goes out from rdma_get_cm_event). The accept,
/// onto a strand, gives up on it within the limit and takes the next client.
inline void stalled_handshake_does_not_hold_an_accept() {
  namespace asio = boost::asio;
  using clock = std::chrono::steady_clock;
  asio::io_context io, stalled_io;
  const socket_options options{.kind = transport::rdma};
  acceptor listener(io, {rdma_address(), 0}, options);

  std::optional<verbs::protection_domain> pd;  // made before the id: freed after its QP
  std::optional<completion_service> service;
  cm::id stalled(stalled_io.get_executor());
  std::optional<error_code> resolved;
  stalled.async_resolve(listener.local_endpoint(), options.resolve_timeout,
                        [&](error_code ec) { resolved = ec; });
  while (!resolved && stalled_io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  BOOST_REQUIRE(resolved && !*resolved);
  pd.emplace(stalled.device());
  service.emplace(stalled_io.get_executor(), stalled.device());
  stalled.create_queue_pair(*service, *pd);
  // The request goes out now; stalled_io never runs again, so its answer is never taken.
  stalled.async_connect(detail::encode_handshake(detail::local_geometry(options)), [](error_code) {});

  const auto strand = asio::make_strand(io);
  std::optional<socket> accepted;
  error_code accept_ec;
  listener.async_accept(strand, [&](error_code ec, socket s) {
    accept_ec = ec;
    accepted.emplace(std::move(s));
  });
  const auto started = clock::now();
  io.run_for(std::chrono::milliseconds(500));  // the stalled request takes the accept
  BOOST_TEST(!accepted.has_value());

  socket client(io, options);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  io.restart();
  while (!(accepted && connected) && clock::now() - started < std::chrono::seconds(40)) {
    io.run_one_for(std::chrono::seconds(1));
  }
  const auto waited = clock::now() - started;
  BOOST_REQUIRE(accepted.has_value());
  BOOST_REQUIRE(connected.has_value());
  BOOST_TEST(!accept_ec, accept_ec.message());
  BOOST_TEST(!*connected, connected->message());
  BOOST_TEST((accepted->remote_endpoint() == client.local_endpoint()));
  BOOST_TEST(waited >= std::chrono::seconds(9));  // it did wait for the stalled one
  BOOST_TEST(waited < std::chrono::seconds(30));  // and not until rdma_cm gave up on it
  client.close();
  accepted->close();
  listener.close();
  io.restart();
  io.run_for(std::chrono::seconds(2));
}

}  // namespace coverbs::test
