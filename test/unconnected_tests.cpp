#include "unconnected_tests.hpp"

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/test/unit_test.hpp>
#include <cstddef>
#include <vector>

#include "test_address.hpp"

namespace coverbs::test {
namespace {

namespace asio = boost::asio;

enum class state { opened, bound, closed };

void check(asio::io_context& io, transport kind, state before) {
  socket s(io, {.kind = kind});
  if (before == state::opened) s.open(asio::ip::tcp::v4());
  if (before == state::bound) s.bind(asio::ip::tcp::endpoint(test_address(), 0));
  const bool open = before != state::closed;
  const error_code expected = open ? asio::error::not_connected : asio::error::bad_descriptor;
  BOOST_TEST_CONTEXT("transport " << static_cast<int>(kind) << ", state " << static_cast<int>(before)) {
    std::array<char, 4> in{};
    error_code ec;
    // Blocking, then (where the mode can be set) non-blocking.
    for (const bool non_blocking : {false, true}) {
      if (!open) {
        if (non_blocking) break;  // the mode needs an open()ed or bound socket
      } else {
        s.non_blocking(non_blocking);
      }
      BOOST_TEST(s.read_some(asio::buffer(in), ec) == 0u);
      BOOST_TEST((ec == expected), ec.message());
      BOOST_TEST(s.write_some(asio::buffer("x", 1), ec) == 0u);
      BOOST_TEST((ec == expected), ec.message());
      BOOST_TEST(s.send(asio::buffer("x", 1), ec) == 0u);
      BOOST_TEST((ec == expected), ec.message());
      BOOST_TEST(s.receive(asio::buffer(in), 0, ec) == 0u);
      BOOST_TEST((ec == expected), ec.message());
      BOOST_CHECK_THROW(s.read_some(asio::buffer(in)), boost::system::system_error);
    }
    s.remote_endpoint(ec);
    BOOST_TEST((ec == expected), ec.message());
    s.shutdown(asio::socket_base::shutdown_both, ec);
    BOOST_TEST((ec == expected), ec.message());
    std::vector<std::byte> memory(64);
    s.register_memory(memory, verbs::access::remote_read, ec);
    BOOST_TEST((ec == expected), ec.message());
    ec = asio::error::would_block;
    BOOST_TEST(s.available(ec) == 0u);
    BOOST_TEST((open ? !ec : ec == asio::error::bad_descriptor), ec.message());
    ec = asio::error::would_block;
    s.cancel(ec);
    BOOST_TEST((open ? !ec : ec == asio::error::bad_descriptor), ec.message());

    std::vector<error_code> got;
    const auto record = [&](error_code e, std::size_t n) {
      BOOST_TEST(n == 0u);
      got.push_back(e);
    };
    s.async_read_some(asio::buffer(in), record);
    s.async_write_some(asio::buffer("x", 1), record);
    s.async_send(asio::buffer("x", 1), record);
    s.async_receive(asio::buffer(in), asio::socket_base::message_peek, record);
    asio::async_read(s, asio::buffer(in), record);
    s.async_wait(asio::socket_base::wait_read, [&](error_code e) { got.push_back(e); });
    BOOST_TEST(got.empty());  // never inside the call
    io.restart();
    io.run();
    BOOST_TEST(got.size() == 6u);
    for (const error_code& e : got) BOOST_TEST((e == expected), e.message());
  }
}

}  // namespace

void unconnected_operations(transport kind) {
  asio::io_context io;
  for (state before : {state::opened, state::bound, state::closed}) check(io, kind, before);
}

}  // namespace coverbs::test
