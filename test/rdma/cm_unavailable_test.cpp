// A machine that shows RDMA devices but whose rdma_cm cannot be used (its device node missing or
// not allowed, as in a container given only the verbs device): an automatic acceptor serves TCP
// alone, and an automatic client connects over TCP too instead of failing; a client that asked
// for RDMA, or whose rdma_cm failed otherwise, gets rdma_cm's error. The test makes
// rdma_create_event_channel fail as it then does.
#include <dlfcn.h>
#include <rdma/rdma_cma.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>
#include <cerrno>
#include <chrono>
#include <optional>

#include "coverbs/acceptor.hpp"
#include "coverbs/socket.hpp"
#include "coverbs/verbs/device.hpp"
#include "test_address.hpp"

namespace asio = boost::asio;
using namespace coverbs;

namespace {
int refuse_with = 0;  ///< the errno that rdma_create_event_channel fails with; 0: it works
}  // namespace

// Defined in the test program, so it comes before librdmacm's for every caller in it.
extern "C" rdma_event_channel* rdma_create_event_channel() {
  if (refuse_with != 0) {
    errno = refuse_with;
    return nullptr;
  }
  using create = rdma_event_channel* (*)();
  static const auto real = reinterpret_cast<create>(dlsym(RTLD_NEXT, "rdma_create_event_channel"));
  return real();
}

namespace {

// rdma_cm refuses with `err` for the test's lifetime.
struct rdma_cm_refusing {
  explicit rdma_cm_refusing(int err) {
    BOOST_REQUIRE_MESSAGE(!verbs::device::names().empty(),
                          "this test needs an RDMA device (run it in the VM)");
    refuse_with = err;
  }
  ~rdma_cm_refusing() { refuse_with = 0; }
};

template <class Predicate>
void run_until(asio::io_context& io, Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    if (io.stopped()) io.restart();
    io.run_for(std::chrono::milliseconds(10));
  }
}

void automatic_connects_over_tcp(int err) {
  const rdma_cm_refusing refusing(err);
  asio::io_context io;
  acceptor listener(io, {test::rdma_address(), 0});
  BOOST_TEST(!listener.accepts_rdma());
  BOOST_TEST(listener.accepts_tcp());
  std::optional<coverbs::socket> accepted;
  listener.async_accept([&](error_code ec, coverbs::socket s) {
    BOOST_TEST(!ec, ec.message());
    accepted.emplace(std::move(s));
  });
  coverbs::socket client(io);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  run_until(io, [&] { return accepted && connected; });
  BOOST_REQUIRE(connected.has_value());
  BOOST_REQUIRE(!*connected);  // before, the client failed with rdma_cm's error
  BOOST_REQUIRE(accepted.has_value());
  BOOST_TEST((client.transport_in_use() == transport::tcp));
  BOOST_TEST((accepted->transport_in_use() == transport::tcp));
  // And it carries bytes.
  char out[5] = "ping", in[5] = {};
  asio::write(client, asio::buffer(out, 4));
  asio::read(*accepted, asio::buffer(in, 4));
  BOOST_TEST(std::string(in) == "ping");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cm_unavailable)

BOOST_AUTO_TEST_CASE(no_rdma_cm_device_node) {
  automatic_connects_over_tcp(ENOENT);
}

BOOST_AUTO_TEST_CASE(rdma_cm_not_allowed) {
  automatic_connects_over_tcp(EACCES);
}

// Only a missing or forbidden rdma_cm means "no RDMA here": another failure (out of descriptors)
// is the connect's, not a reason to go over TCP unasked.
BOOST_AUTO_TEST_CASE(another_failure_of_rdma_cm_fails_the_connect) {
  const rdma_cm_refusing refusing(EMFILE);
  asio::io_context io;
  acceptor listener(io, {test::rdma_address(), 0});
  coverbs::socket client(io);
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  run_until(io, [&] { return connected.has_value(); });
  BOOST_REQUIRE(connected.has_value());
  BOOST_TEST((*connected == std::errc::too_many_files_open), connected->message());
}

BOOST_AUTO_TEST_CASE(a_client_that_asked_for_rdma_gets_rdma_cms_error) {
  const rdma_cm_refusing refusing(ENOENT);
  asio::io_context io;
  acceptor listener(io, {test::rdma_address(), 0});
  coverbs::socket client(io, socket_options{.kind = transport::rdma});
  std::optional<error_code> connected;
  client.async_connect(listener.local_endpoint(), [&](error_code ec) { connected = ec; });
  run_until(io, [&] { return connected.has_value(); });
  BOOST_REQUIRE(connected.has_value());
  BOOST_TEST((*connected == std::errc::no_such_file_or_directory), connected->message());
}

BOOST_AUTO_TEST_SUITE_END()
