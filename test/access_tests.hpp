// Access control across connections, shared by both transports. Each connection has its own
// protection domain (RDMA) or region table (TCP), and the API offers no way to share one, so a
// key is good on the connection that registered it and nowhere else.
#pragma once

#include <chrono>

#include "coverbs/socket.hpp"
#include "limits_tests.hpp"

namespace coverbs::test {

/// Two clients of one server. The region the server registered on connection A is refused,
/// with remote_access, to a write, a read and an atomic sent on connection B (whose server
/// side has a region of its own, a fresh connection for each since a refusal ends it); no
/// byte changes anywhere; and the key still works on A.
void keys_do_not_cross_connections(transport kind, std::chrono::seconds limit);

}  // namespace coverbs::test

/// Registers the limits of limits_tests.hpp and the access control above for `kind`; `limit`
/// bounds every wait.
#define COVERBS_LIMITS_TEST_CASES(kind, limit)                 \
  BOOST_AUTO_TEST_CASE(connection_limit) {                     \
    coverbs::test::connection_limit(kind, limit);              \
  }                                                            \
  BOOST_AUTO_TEST_CASE(operation_limit) {                      \
    coverbs::test::operation_limit(kind, limit);               \
  }                                                            \
  BOOST_AUTO_TEST_CASE(registration_limit) {                   \
    coverbs::test::registration_limit(kind);                   \
  }                                                            \
  BOOST_AUTO_TEST_CASE(pool_options_a_peer_refuses) {          \
    coverbs::test::unusable_pool_options(kind, limit);         \
  }                                                            \
  BOOST_AUTO_TEST_CASE(keys_do_not_cross_connections) {        \
    coverbs::test::keys_do_not_cross_connections(kind, limit); \
  }
