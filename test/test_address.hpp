// Where tests listen and connect. Inside the Soft-RoCE test bed, $COVERBS_VM_IP is the rxe
// device's address (rdma_cm cannot use 127.0.0.1 there); this is the one place it is read.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <initializer_list>
#include <optional>

namespace coverbs::test {

/// The test bed's RDMA device address, if the test runs in it (or on a machine that names one).
inline std::optional<boost::asio::ip::address> device_address() {
  const char* ip = std::getenv("COVERBS_VM_IP");
  if (ip == nullptr) return std::nullopt;
  return boost::asio::ip::make_address(ip);
}

/// An address an RDMA test must use: the device's; fails the test where there is none.
inline boost::asio::ip::address rdma_address() {
  auto a = device_address();
  BOOST_REQUIRE_MESSAGE(a.has_value(), "COVERBS_VM_IP is unset: run through test/rdma-launcher");
  return *a;
}

/// The address of tests that run on either transport: the device's in the test bed, else loopback.
inline boost::asio::ip::address test_address() {
  return device_address().value_or(boost::asio::ip::address_v4::loopback());
}

/// A port nobody listens on: one bound by a TCP acceptor, then closed (for a bind; a connect
/// that must be refused takes a refusing_port, which nobody can take meanwhile).
inline unsigned short free_port(boost::asio::io_context& io) {
  boost::asio::ip::tcp::acceptor probe(io, boost::asio::ip::tcp::endpoint(test_address(), 0));
  return probe.local_endpoint().port();
}

/// A port where nobody listens: a bound TCP socket that does not listen holds it, so a TCP
/// connect to it is refused and no other TCP socket can take it while this lives. rdma_cm's
/// ports are its own: an RDMA connect is refused as long as no rdma_cm listener has the number,
/// so list the test's listeners in `taken`.
class refusing_port {
 public:
  explicit refusing_port(boost::asio::io_context& io, std::initializer_list<unsigned short> taken = {})
      : holder_(io) {
    for (;;) {
      holder_.open(test_address().is_v4() ? boost::asio::ip::tcp::v4() : boost::asio::ip::tcp::v6());
      holder_.bind({test_address(), 0});
      if (std::find(taken.begin(), taken.end(), port()) == taken.end()) return;
      holder_.close();
    }
  }
  /// The port held.
  unsigned short port() const { return holder_.local_endpoint().port(); }
  /// Where a connect is refused: the test address at the port held.
  boost::asio::ip::tcp::endpoint endpoint() const { return {test_address(), port()}; }

 private:
  boost::asio::ip::tcp::socket holder_;
};

/// A free port (as free_port) that is none of `taken`: rdma_cm's ports are not TCP's, so a
/// port free on TCP may still be an RDMA listener's.
inline unsigned short free_port_except(boost::asio::io_context& io,
                                       std::initializer_list<unsigned short> taken) {
  return refusing_port(io, taken).port();
}

}  // namespace coverbs::test
