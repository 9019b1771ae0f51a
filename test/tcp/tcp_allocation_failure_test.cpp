// When the TCP transport cannot allocate a step of its own (a received message's slot, a
// read's new inbox, the copy of a frame the socket took only part of), the connection fails
// with not_enough_memory and nothing else: no exception leaves io_context::run or the
// caller's initiating function, the peer sees a reset, no byte of a frame cut short reaches it
// as anything else, and close() has nothing left to wait for.
#include <array>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstddef>
#include <string>

#include "failing_allocation.hpp"
#include "one_sided_tests.hpp"
#include "tcp_socket_pair.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using coverbs::test::tcp_socket_pair;
using namespace std::chrono_literals;

namespace {

/// `s`'s reads until one fails: the bytes they brought and how the last one ended.
std::pair<std::string, error_code> read_until_error(asio::io_context& io, coverbs::socket& s) {
  std::string all;
  for (;;) {
    std::array<char, 4096> data{};
    test::outcome read;
    s.async_read_some(asio::buffer(data), test::record(read));
    test::run_until_done(
        io, [&] { return read.done; }, 20s);
    if (read.ec) return {all, read.ec};
    all.append(data.data(), read.value);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tcp_allocation_failure)

// b reads the header of a 50,000-byte message that no receive waits for: its slot cannot be
// allocated (inside the read's completion). b's operations end with not_enough_memory; a
// sees its connection reset.
BOOST_AUTO_TEST_CASE(a_message_whose_slot_cannot_be_allocated_fails_the_connection) {
  tcp_socket_pair p(64 * 1024, test::peer_context::own);
  const std::string message(50'000, 'm');
  test::outcome sent;
  p.a.async_send(asio::buffer(message), test::record(sent));
  test::run_until_done(p.io, [&] { return sent.done; });
  BOOST_REQUIRE(!sent.ec);
  // Waiting to read makes b read; with no receive waiting, the message needs a slot.
  test::fail_next_allocation_of(message.size());
  const int failed = test::failed_allocations();
  bool readable = false;
  p.b.async_wait(asio::socket_base::wait_read, [&](error_code) { readable = true; });
  BOOST_CHECK_NO_THROW(test::run_until_done(
      p.peer_io, [&] { return test::failed_allocations() == failed + 1 && readable; }, 20s));

  std::string in(message.size(), '\0');
  test::outcome received;
  p.b.async_receive(asio::buffer(in), test::record(received));
  test::run_until_done(p.peer_io, [&] { return received.done; });
  BOOST_TEST((received.ec == boost::system::errc::not_enough_memory), received.ec.message());
  const auto [a_got, a_error] = read_until_error(p.io, p.a);
  BOOST_TEST(a_got.empty());
  BOOST_TEST((a_error == asio::error::connection_reset), a_error.message());
  p.b.close();
  BOOST_TEST(test::time_to_run_out(p.peer_io).count() < 2000);
}

// b keeps an unread 4,000-byte message in its inbox's memory, so its next read from the socket
// needs a new inbox, which cannot be allocated: inside the user's read, which ends with
// not_enough_memory (posted: never inside its initiating function), as a's reads end in a reset.
BOOST_AUTO_TEST_CASE(a_read_that_cannot_be_started_fails_the_connection) {
  tcp_socket_pair p(64 * 1024, test::peer_context::own);
  const std::string message(4000, 'm');
  test::outcome sent;
  p.a.async_send(asio::buffer(message), test::record(sent));
  test::run_until_done(p.io, [&] { return sent.done; });
  // A receive too small for it makes b read, and leaves it queued (message_size).
  std::array<char, 16> data{};
  test::outcome small;
  p.b.async_receive(asio::buffer(data), test::record(small));
  test::run_until_done(p.peer_io, [&] { return small.done; });
  BOOST_REQUIRE(small.ec == asio::error::message_size);

  test::fail_next_allocation_of(16 * 1024);  // an inbox
  const int failed = test::failed_allocations();
  test::outcome read;
  BOOST_REQUIRE_NO_THROW(p.b.async_read_some(asio::buffer(data), test::record(read)));
  test::fail_next_allocation_of(0);
  BOOST_REQUIRE(test::failed_allocations() == failed + 1);
  BOOST_TEST(!read.done);
  test::run_until_done(p.peer_io, [&] { return read.done; });
  BOOST_TEST((read.ec == boost::system::errc::not_enough_memory), read.ec.message());
  const auto [a_got, a_error] = read_until_error(p.io, p.a);
  BOOST_TEST((a_error == asio::error::connection_reset), a_error.message());
  p.b.close();
  BOOST_TEST(test::time_to_run_out(p.peer_io).count() < 2000);
}

// Small kernel buffers: a's write that finds room for part of its frame copies the rest into
// a frame of its own, which cannot be allocated. The write fails instead of throwing, and b
// reads a's bytes and then a reset: never the next frame's header read as the rest.
BOOST_AUTO_TEST_CASE(a_frame_sent_in_part_whose_rest_cannot_be_copied_fails_the_connection) {
  tcp_socket_pair p(64 * 1024, test::peer_context::own, 4096);
  const std::string data(12000, 'x');  // copied (less than a direct write), more than a send buffer
  {
    test::outcome wrote;  // after the hellos, which make the first frame queue behind them
    p.a.async_write_some(asio::buffer(data, 1), test::record(wrote));
    test::run_until_done(p.io, [&] { return wrote.done; });
    std::array<char, 1> first{};
    test::outcome read;
    p.b.async_read_some(asio::buffer(first), test::record(read));
    test::run_until_done(p.peer_io, [&] { return read.done; });
    BOOST_REQUIRE(!read.ec && first[0] == 'x');
  }
  test::fail_next_allocation_of(wire::header_size + data.size());
  const int failed = test::failed_allocations();
  std::size_t written = 0;
  error_code write_error;
  for (int i = 0; i < 1000 && !write_error; ++i) {
    test::outcome wrote;
    BOOST_REQUIRE_NO_THROW(p.a.async_write_some(asio::buffer(data), test::record(wrote)));
    test::run_until_done(
        p.io, [&] { return wrote.done; }, 20s);
    write_error = wrote.ec;
    written += wrote.value;
  }
  test::fail_next_allocation_of(0);
  BOOST_REQUIRE(test::failed_allocations() == failed + 1);
  BOOST_TEST((write_error == asio::error::broken_pipe),
             write_error.message());  // as into any failed connection
  const auto [b_got, b_error] = read_until_error(p.peer_io, p.b);
  BOOST_TEST_MESSAGE("written " << written << ", b got " << b_got.size());
  BOOST_TEST(b_got.size() > written);  // part of the failed write's frame: the case this is for
  BOOST_TEST(b_got.size() <= written + data.size());
  BOOST_TEST((b_got.find_first_not_of('x') == std::string::npos), "bytes other than the writes' reached b");
  BOOST_TEST((b_error == asio::error::connection_reset), b_error.message());
  const auto [a_got, a_error] = read_until_error(p.io, p.a);
  BOOST_TEST((a_error == boost::system::errc::not_enough_memory), a_error.message());
  p.a.close();
  BOOST_TEST(test::time_to_run_out(p.io).count() < 2000);
}

BOOST_AUTO_TEST_SUITE_END()
