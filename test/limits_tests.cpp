// The bodies declared in limits_tests.hpp, compiled once for both transports' tests.

#include "limits_tests.hpp"

#include <boost/system/system_error.hpp>
#include <memory>

#include "completion_log.hpp"
#include "connected_pair.hpp"
#include "one_sided_tests.hpp"

namespace coverbs::test {

error_code connect_within(asio::io_context& io, socket& client, const acceptor& server,
                          std::chrono::seconds limit) {
  outcome connected;
  client.async_connect(server.local_endpoint(), [&](error_code ec) { connected = {true, ec, 0}; });
  run_until_done(
      io, [&] { return connected.done; }, limit);
  return connected.ec;
}

void connection_limit(transport kind, std::chrono::seconds limit) {
  asio::io_context io;
  socket_options options{.kind = kind, .max_connections = 2};
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  std::vector<socket> accepted;
  accept_all(server, accepted);
  std::vector<std::unique_ptr<socket>> clients;
  auto connect = [&] {
    clients.push_back(std::make_unique<socket>(io, socket_options{.kind = kind}));
    return connect_within(io, *clients.back(), server, limit);
  };
  for (std::size_t i = 1; i <= 2; ++i) {
    BOOST_REQUIRE_MESSAGE(!connect(), "connection " << i);
    run_until(
        io, [&] { return accepted.size() == i; }, limit);
    BOOST_REQUIRE(accepted.size() == i);
  }

  const error_code third = connect();
  if (kind == transport::rdma) {
    BOOST_TEST((third == asio::error::connection_refused), third.message());
  } else {
    // The kernel completed the connect; the acceptor reset it before its hello.
    BOOST_REQUIRE_MESSAGE(!third, third.message());
    outcome read, wrote;
    std::array<char, 8> buffer{};
    clients.back()->async_read_some(asio::buffer(buffer), record(read));
    run_until_done(
        io, [&] { return read.done; }, limit);
    BOOST_TEST((read.ec == asio::error::connection_refused), read.ec.message());
    clients.back()->async_write_some(asio::buffer("x", 1), record(wrote));
    run_until_done(
        io, [&] { return wrote.done; }, limit);
    BOOST_TEST((wrote.ec == asio::error::connection_refused), wrote.ec.message());
  }
  BOOST_TEST(accepted.size() == 2u);
  BOOST_TEST(carries_a_byte(io, *clients[0], accepted[0], limit));
  BOOST_TEST(carries_a_byte(io, accepted[1], *clients[1], limit));

  accepted[0].close();  // frees a place
  BOOST_REQUIRE(!connect());
  run_until(
      io, [&] { return accepted.size() == 3; }, limit);
  BOOST_REQUIRE(accepted.size() == 3u);
  BOOST_TEST(carries_a_byte(io, *clients.back(), accepted[2], limit));
  BOOST_TEST(carries_a_byte(io, accepted[1], *clients[1], limit));
}

void operation_limit(transport kind, std::chrono::seconds limit) {
  constexpr std::size_t most = 100, slot = 64;
  connected_pair p(kind, {.receive_buffers = 2, .max_outstanding_operations = most});
  guarded_region target(p.b, (most + 2) * slot, all_remote_rights);
  local_memory local(p.a, (most + 2) * slot);
  completion_log log(most + 2);
  for (std::size_t i = 0; i < most; ++i) {
    p.a.async_read(local.slice(i * slot, slot), target.remote(i * slot, slot), log.handler(i));
  }
  p.a.async_write(local.slice(most * slot, slot), target.remote(most * slot, slot), log.handler(most));
  p.a.async_fetch_add(local.slice((most + 1) * slot, 8), target.remote((most + 1) * slot, 8), 1,
                      log.handler(most + 1));
  BOOST_TEST(log.order.empty());  // not even the refusals complete inside their initiation
  run_until_done(
      p.io, [&] { return log.all_done(); }, limit);
  for (std::size_t i = 0; i < most; ++i) {
    BOOST_TEST_CONTEXT("operation " << i) {
      BOOST_TEST(!log.results[i].ec, log.results[i].ec.message());
      BOOST_TEST(log.results[i].value == slot);
    }
  }
  for (std::size_t i : {most, most + 1}) {
    const error_code ec = log.results[i].ec;
    BOOST_TEST((ec == make_error_code(errc::too_many_operations)), ec.message());
    BOOST_TEST((ec == std::errc::resource_unavailable_try_again));
    BOOST_TEST(ec.message() == "too many operations outstanding on this connection");
    BOOST_TEST(log.results[i].value == 0u);
  }
  BOOST_TEST(target.untouched());  // the refused write and atomic did nothing

  // Every slot is free again: a full round succeeds, and the stream is unharmed.
  completion_log again(most);
  for (std::size_t i = 0; i < most; ++i) {
    p.a.async_fetch_add(local.slice(i * slot, 8), target.remote(most * slot, 8), 1, again.handler(i));
  }
  run_until_done(
      p.io, [&] { return again.all_done(); }, limit);
  std::size_t failed = 0;
  for (const auto& r : again.results) failed += r.ec ? 1 : 0;
  BOOST_TEST(failed == 0u);
  bulk_both_ways(p.io, p.a, p.b, 64 * 1024);
}

void registration_limit(transport kind) {
  constexpr std::size_t half = 512 * 1024;
  connected_pair p(kind, {.max_registered_bytes = 2 * half});
  std::vector<std::byte> m1(half), m2(half), m3(half), one(1);
  registered_memory r1 = p.a.register_memory(m1, verbs::access::remote_read);
  registered_memory r2 = p.a.register_memory(m2, verbs::access::none);

  error_code ec;
  registered_memory refused = p.a.register_memory(one, verbs::access::none, ec);
  BOOST_TEST((ec == make_error_code(errc::registration_limit)), ec.message());
  BOOST_TEST((ec == std::errc::not_enough_memory));
  BOOST_TEST(ec.message() == "the connection's registered memory limit would be exceeded");
  BOOST_TEST(refused.memory().empty());
  BOOST_CHECK_EXCEPTION(
      p.a.register_memory(one, verbs::access::none), boost::system::system_error,
      [](const boost::system::system_error& e) { return e.code() == errc::registration_limit; });

  registered_memory moved = std::move(r2);
  r2 = registered_memory();  // a moved-from registration holds nothing
  BOOST_CHECK_THROW(p.a.register_memory(one, verbs::access::none), boost::system::system_error);
  moved = registered_memory();
  registered_memory r3 = p.a.register_memory(m3, verbs::access::none);  // exactly at the limit again
  BOOST_CHECK_THROW(p.a.register_memory(one, verbs::access::none), boost::system::system_error);

  // The peer registers its own megabyte, and the registrations work.
  std::vector<std::byte> far(2 * half, std::byte{0x5c});
  registered_memory at_b = p.b.register_memory(far, verbs::access::remote_read);
  outcome read;
  p.a.async_read(r3.slice(0, 4096), at_b.remote(0, 4096), record(read));
  run_until_done(p.io, [&] { return read.done; });
  BOOST_TEST(!read.ec, read.ec.message());
  BOOST_TEST(all_bytes(std::span(m3).first(4096), std::byte{0x5c}));
  r1 = registered_memory();
  registered_memory r4 = p.a.register_memory(m1, verbs::access::none, ec);
  BOOST_TEST(!ec, ec.message());

  // 4 GiB or more, which a remote_buffer cannot describe, is refused through `ec` too (the
  // TCP transport's region table threw std::length_error through it). Never touched.
  const std::span<std::byte> huge(m1.data(), std::size_t{1} << 32);
  registered_memory too_large = p.a.register_memory(huge, verbs::access::remote_read, ec);
  BOOST_TEST((ec == std::errc::value_too_large), ec.message());
  BOOST_TEST(too_large.memory().empty());
  BOOST_CHECK_THROW(p.a.register_memory(huge, verbs::access::remote_read), boost::system::system_error);
}

void unusable_pool_options(transport kind, std::chrono::seconds limit) {
  const std::vector<socket_options> refused{
      {.kind = kind, .receive_buffers = 0},
      {.kind = kind, .buffer_size = 255},
      {.kind = kind, .buffer_size = (16u << 20) + 1},
      {.kind = kind, .receive_buffers = 65, .buffer_size = 16u << 20},  // 1040 MiB
  };
  asio::io_context io;
  // Listening, so that only the check stands between a client and a connection.
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), {.kind = kind});
  for (const socket_options& options : refused) {
    BOOST_TEST_CONTEXT(options.receive_buffers << " x " << options.buffer_size) {
      socket client(io, options);
      BOOST_TEST((connect_within(io, client, server, limit) == asio::error::invalid_argument));
      BOOST_TEST(!client.is_open());
      acceptor other(io, options);
      error_code ec;
      other.open(asio::ip::tcp::v4(), ec);
      BOOST_TEST((ec == asio::error::invalid_argument), ec.message());
      BOOST_TEST(!other.is_open());
    }
  }
  connected_pair p(kind, {.receive_buffers = 4, .buffer_size = 256});
  BOOST_TEST(carries_a_byte(p.io, p.a, p.b, limit));
  bulk_both_ways(p.io, p.a, p.b, 64 * 1024);
}

}  // namespace coverbs::test
