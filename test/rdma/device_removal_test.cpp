// The RDMA device goes away under a running server (rdma_cm's DEVICE_REMOVAL): its connections
// end with an error instead of hanging, an automatic acceptor bound to the device's address goes
// on serving TCP clients, an RDMA-only one's accept fails with no_such_device, and one on the
// any address is not touched. The test deletes the Soft-RoCE link that $COVERBS_REMOVE_LINK
// names, so it runs only through test/device-removal-launcher, which boots the test bed's VM for
// it and adds the link back afterwards.
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "coverbs/coverbs.hpp"
#include "stream_tests.hpp"
#include "test_address.hpp"

using namespace coverbs;
namespace asio = boost::asio;

namespace {

/// Starts deleting the link: the command returns only once every process has let go of the
/// device (rxe cannot take it from them), this one included, so it is left running.
void remove_device() {
  const char* link = std::getenv("COVERBS_REMOVE_LINK");
  BOOST_REQUIRE_MESSAGE(link != nullptr && std::string(link).rfind("rxe", 0) == 0,
                        "run through test/device-removal-launcher, which names a Soft-RoCE link to delete");
  const std::string command = std::string("rdma link delete ") + link + " < /dev/null > /dev/null 2>&1 &";
  BOOST_REQUIRE(std::system(command.c_str()) == 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_removed_device_leaves_the_acceptor_to_tcp) {
  asio::io_context io;
  const asio::ip::tcp::endpoint any_port(test::test_address(), 0);
  acceptor server(io, any_port);  // automatic: RDMA and TCP
  acceptor rdma_only(io, any_port, {.kind = transport::rdma});
  // On the any address rdma_cm listens through each device on its own, and drops a removed
  // device's listener without an event: such an acceptor is not touched.
  acceptor on_any_address(io, asio::ip::tcp::endpoint(asio::ip::tcp::v4(), 0));
  BOOST_REQUIRE(on_any_address.accepts_rdma());
  BOOST_REQUIRE(server.accepts_rdma());
  BOOST_REQUIRE(server.accepts_tcp());

  // An RDMA connection, with a read pending on each side.
  coverbs::socket client(io, {.kind = transport::rdma});
  std::optional<coverbs::socket> served;
  std::optional<error_code> connected;
  server.async_accept([&](error_code ec, coverbs::socket s) {
    BOOST_TEST(!ec, ec.message());
    served.emplace(std::move(s));
  });
  client.async_connect(server.local_endpoint(), [&](error_code ec) { connected = ec; });
  test::run_until(io, [&] { return connected && served; });
  BOOST_REQUIRE(connected && served && !*connected);
  BOOST_REQUIRE((served->transport_in_use() == transport::rdma));
  BOOST_REQUIRE(test::carries_a_byte(io, client, *served));
  char byte = 0;
  std::optional<error_code> client_read, served_read;
  client.async_read_some(asio::buffer(&byte, 1), [&](error_code ec, std::size_t) { client_read = ec; });
  served->async_read_some(asio::buffer(&byte, 1), [&](error_code ec, std::size_t) { served_read = ec; });

  // Accepts waiting when the device goes.
  std::optional<error_code> accepted, rdma_accepted;
  std::optional<coverbs::socket> tcp_served;
  server.async_accept([&](error_code ec, coverbs::socket s) {
    accepted = ec;
    if (!ec) tcp_served.emplace(std::move(s));
  });
  rdma_only.async_accept([&](error_code ec, coverbs::socket) { rdma_accepted = ec; });
  std::optional<error_code> accepted_on_any;
  std::optional<coverbs::socket> served_on_any;
  on_any_address.async_accept([&](error_code ec, coverbs::socket s) {
    accepted_on_any = ec;
    if (!ec) served_on_any.emplace(std::move(s));
  });
  BOOST_REQUIRE(!accepted && !rdma_accepted);  // both listeners armed by the calls

  remove_device();
  test::run_until(
      io, [&] { return client_read && served_read && rdma_accepted && !server.accepts_rdma(); },
      std::chrono::seconds(60));
  BOOST_REQUIRE(client_read && served_read);
  BOOST_TEST(*client_read, "the client's read ended with an error");
  BOOST_TEST(*served_read, "the server's read ended with an error");
  BOOST_REQUIRE(rdma_accepted.has_value());
  BOOST_TEST((*rdma_accepted == asio::error::no_such_device), rdma_accepted->message());
  BOOST_TEST(!accepted.has_value(), "the automatic acceptor's accept waits on, for TCP");
  BOOST_TEST(!server.accepts_rdma());
  BOOST_TEST(server.accepts_tcp());

  // A TCP client, and an automatic one (its RDMA attempt finds no device), are served.
  coverbs::socket tcp_client(io, {.kind = transport::tcp});
  connected.reset();
  tcp_client.async_connect(server.local_endpoint(), [&](error_code ec) { connected = ec; });
  test::run_until(io, [&] { return connected && accepted; });
  BOOST_REQUIRE(connected && accepted);
  BOOST_TEST(!*connected, connected->message());
  BOOST_TEST(!*accepted, accepted->message());
  BOOST_REQUIRE(tcp_served.has_value());
  BOOST_TEST(test::carries_a_byte(io, tcp_client, *tcp_served));

  coverbs::socket automatic_client(io);
  std::optional<coverbs::socket> automatic_served;
  connected.reset();
  server.async_accept([&](error_code ec, coverbs::socket s) {
    BOOST_TEST(!ec, ec.message());
    automatic_served.emplace(std::move(s));
  });
  automatic_client.async_connect(server.local_endpoint(), [&](error_code ec) { connected = ec; });
  test::run_until(io, [&] { return connected && automatic_served; });
  BOOST_REQUIRE(connected && automatic_served);
  BOOST_TEST(!*connected, connected->message());
  BOOST_TEST((automatic_client.transport_in_use() == transport::tcp));
  BOOST_TEST(test::carries_a_byte(io, automatic_client, *automatic_served));

  BOOST_TEST(!accepted_on_any.has_value(), "the accept on the any address waits on");
  BOOST_TEST(on_any_address.accepts_rdma());
  coverbs::socket any_client(io);
  connected.reset();
  any_client.async_connect({test::test_address(), on_any_address.local_endpoint().port()},
                           [&](error_code ec) { connected = ec; });
  test::run_until(io, [&] { return connected && accepted_on_any; });
  BOOST_REQUIRE(connected && accepted_on_any && served_on_any);
  BOOST_TEST(!*connected, connected->message());
  BOOST_TEST(!*accepted_on_any, accepted_on_any->message());
  BOOST_TEST(test::carries_a_byte(io, any_client, *served_on_any));
}
