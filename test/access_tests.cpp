// The bodies declared in access_tests.hpp, compiled once for both transports' tests.

#include "access_tests.hpp"

#include "completion_log.hpp"
#include "connected_pair.hpp"
#include "limits_tests.hpp"
#include "one_sided_tests.hpp"

namespace coverbs::test {

void keys_do_not_cross_connections(transport kind, std::chrono::seconds limit) {
  asio::io_context io;
  const socket_options options{.kind = kind};
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  auto connect = [&](socket& client, socket& served) {
    outcome accepted;
    server.async_accept(served, [&](error_code ec) { accepted = {true, ec, 0}; });
    BOOST_REQUIRE(!connect_within(io, client, server, limit));
    run_until_done(
        io, [&] { return accepted.done; }, limit);
    BOOST_REQUIRE(!accepted.ec);
  };
  socket client_a(io, options), served_a(io);
  connect(client_a, served_a);
  guarded_region at_a(served_a, 4096, all_remote_rights);
  local_memory local_a(client_a, 4096);

  for (int op = 0; op < 3; ++op) {
    BOOST_TEST_CONTEXT("operation " << op) {
      socket client_b(io, options), served_b(io);
      connect(client_b, served_b);
      guarded_region at_b(served_b, 4096, all_remote_rights);
      local_memory local_b(client_b, 4096);
      outcome result;
      switch (op) {
        case 0: client_b.async_write(local_b.slice(0, 256), at_a.remote(0, 256), record(result)); break;
        case 1: client_b.async_read(local_b.slice(0, 256), at_a.remote(0, 256), record(result)); break;
        default: client_b.async_fetch_add(local_b.slice(0, 8), at_a.remote(0, 8), 1, record(result)); break;
      }
      run_until_done(
          io, [&] { return result.done; }, limit);
      BOOST_TEST((result.ec == make_error_code(wc_errc::remote_access)), result.ec.message());
      BOOST_TEST(at_b.untouched());
      BOOST_TEST(local_b.untouched());
    }
  }
  BOOST_TEST(at_a.untouched());

  outcome wrote;
  client_a.async_write(local_a.slice(0, 256), at_a.remote(0, 256), record(wrote));
  run_until_done(
      io, [&] { return wrote.done; }, limit);
  BOOST_TEST(!wrote.ec, wrote.ec.message());
  BOOST_TEST(all_bytes(at_a.region().first(256), local_memory::fill));
  BOOST_TEST(at_a.guards_untouched());
}

}  // namespace coverbs::test
