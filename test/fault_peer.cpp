// The far end of the fault tests that kill their peer (test/peer_kill_tests.cpp): a process of
// its own, so that the kernel tears down its queue pairs and sockets when it is killed.
//
//   fault_peer tcp|rdma ADDRESS PORT
//
// Connects, registers a region the test may read, write and update atomically, sends its
// descriptor as one message, then writes the byte stream of `pattern_byte` for as long as the
// test reads, never reading anything itself. It runs until killed; exit status 1 means it
// failed before that (the reason is on stderr), 2 a usage error.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <coverbs/socket.hpp>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "fault_peer.hpp"

namespace asio = boost::asio;
using namespace coverbs;

namespace {

asio::awaitable<void> run(coverbs::socket& s, asio::ip::tcp::endpoint server,
                          std::vector<std::byte>& region) {
  co_await s.async_connect(server, asio::use_awaitable);
  for (std::size_t i = 0; i < region.size(); ++i) region[i] = test::pattern_byte(i);
  const auto all = verbs::access::remote_read | verbs::access::remote_write | verbs::access::remote_atomic;
  registered_memory registration = s.register_memory(region, all);
  co_await s.async_send(asio::buffer(registration.remote().serialize()), asio::use_awaitable);
  std::vector<std::byte> chunk(256 * 1024);
  for (std::uint64_t offset = 0;; offset += chunk.size()) {
    for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = test::pattern_byte(offset + i);
    co_await asio::async_write(s, asio::buffer(chunk), asio::use_awaitable);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || (std::string_view(argv[1]) != "tcp" && std::string_view(argv[1]) != "rdma")) {
    std::cerr << "usage: fault_peer tcp|rdma ADDRESS PORT\n";
    return 2;
  }
  try {
    const transport kind = std::string_view(argv[1]) == "tcp" ? transport::tcp : transport::rdma;
    const asio::ip::tcp::endpoint server(asio::ip::make_address(argv[2]),
                                         static_cast<unsigned short>(std::stoul(argv[3])));
    asio::io_context io;
    coverbs::socket s(io, {.kind = kind});
    std::vector<std::byte> region(test::fault_peer_region_size);
    asio::co_spawn(io, run(s, server, region), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
    io.run();
  } catch (const std::exception& e) {
    std::cerr << "fault_peer: " << e.what() << std::endl;
    return 1;
  }
  return 1;  // the stream only ends when the test has gone away
}
