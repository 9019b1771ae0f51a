// pingpong: two queue pairs on one RDMA device bounce a message with co_await, then one
// side RDMA-WRITEs into the other's buffer and reads it back. Shows the async verbs layer.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <coverbs/coverbs.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>
#include <vector>

#include "command_line.hpp"
#include "percentile.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

struct options {
  std::size_t iterations = 1000;
  std::size_t size = 64;
  polling_mode mode = polling_mode::event;
  std::string device;
};

constexpr std::string_view program = "pingpong";
constexpr std::string_view usage =
    "usage: pingpong [--iterations N] [--size BYTES] [--mode event|busy|adaptive] [--device NAME]\n"
    "Bounces a message between two queue pairs on one RDMA device and prints round-trip\n"
    "latency percentiles, then checks an RDMA WRITE and READ of the same size. It uses the\n"
    "verbs layer directly, so it needs an RDMA device (Soft-RoCE will do: scripts/demo runs it\n"
    "in the test bed VM); there is no TCP fallback here. A long run shows its progress on\n"
    "stderr every 5 s.\n"
    "  --iterations N   round trips measured, 1 to 10000000 (default 1000)\n"
    "  --size BYTES     bytes per message and per WRITE/READ, K and M allowed, 1 to 64M\n"
    "                   (default 64)\n"
    "  --mode M         completion polling: event (sleep until the CQ's event; default), busy\n"
    "                   (poll all the time) or adaptive (poll a while, then sleep)\n"
    "  --device NAME    the RDMA device to use, as ibv_devices lists it (default: the first)\n"
    "Exit status: 0 success, 1 failure (no device, or the WRITE/READ check failed), 2 bad\n"
    "arguments.\n";

options parse(int argc, char** argv) {
  options o;
  cli::arguments args(program, argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (arg == "--iterations") {
      o.iterations = args.number_value(1, 10'000'000);  // each round trip's time is kept
    } else if (arg == "--size") {
      o.size = args.number_value(1, std::size_t{64} << 20);
    } else if (arg == "--mode") {
      const auto m = args.value();
      if (m == "event") o.mode = polling_mode::event;
      else if (m == "busy") o.mode = polling_mode::busy;
      else if (m == "adaptive") o.mode = polling_mode::adaptive;
      else args.bad_value("event, busy or adaptive");
    } else if (arg == "--device") {
      o.device = args.value();
    } else {
      args.unknown();
    }
  }
  return o;
}

asio::awaitable<void> bounce(async_queue_pair& from, async_queue_pair& to, verbs::local_buffer out,
                             verbs::local_buffer in) {
  // Both at once: the receive is posted first, so the send never meets receiver-not-ready.
  co_await (async_receive(to, in, asio::use_awaitable) && async_send(from, out, asio::use_awaitable));
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  try {
    verbs::device dev = verbs::device::open(opt.device);
    const verbs::gid_entry gid = dev.default_gid();
    asio::io_context io;
    verbs::protection_domain pd(dev);
    completion_service service(io.get_executor(), dev, {.mode = opt.mode});
    async_queue_pair a(service, pd), b(service, pd);
    a.connect(b.address(gid), {.local_gid = gid});
    b.connect(a.address(gid), {.local_gid = gid});
    std::vector<std::byte> mem(4 * std::max<std::size_t>(opt.size, 8));
    verbs::memory_region mr(pd, mem, verbs::access::local_write | verbs::access::remote_read |
                                         verbs::access::remote_write);
    std::cout << "pingpong: device " << dev.name() << ", GID index " << gid.index << ", "
              << opt.iterations << " round trips of " << opt.size << " bytes\n";

    std::vector<double> rtt_us;
    bool verified = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      const std::size_t n = opt.size;
      const auto began = std::chrono::steady_clock::now();
      auto shown = began;
      for (std::size_t i = 0; i < opt.iterations; ++i) {
        const auto start = std::chrono::steady_clock::now();
        co_await bounce(a, b, mr.slice(0, n), mr.slice(n, n));
        co_await bounce(b, a, mr.slice(n, n), mr.slice(0, n));
        const auto end = std::chrono::steady_clock::now();
        rtt_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
        if (end - shown >= std::chrono::seconds(5)) {  // under emulation a round trip takes milliseconds
          shown = end;
          std::cerr << "pingpong: " << std::chrono::duration_cast<std::chrono::seconds>(end - began).count()
                    << " s: " << i + 1 << " of " << opt.iterations << " round trips\n";
        }
      }
      for (std::size_t i = 0; i < n; ++i) mem[i] = static_cast<std::byte>(i * 13);
      co_await async_write(a, mr.slice(0, n), mr.remote(2 * n, n), asio::use_awaitable);
      co_await async_read(b, mr.slice(3 * n, n), mr.remote(2 * n, n), asio::use_awaitable);
      verified = std::memcmp(mem.data(), mem.data() + 3 * n, n) == 0;
    }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    io.run();

    std::sort(rtt_us.begin(), rtt_us.end());
    auto pct = [&](double p) { return stats::percentile(rtt_us, p); };
    std::cout << "round trip: p50 " << pct(0.5) << " us, p99 " << pct(0.99) << " us, max "
              << rtt_us.back() << " us\n"
              << "RDMA WRITE then READ of " << opt.size << " bytes: " << (verified ? "match" : "MISMATCH") << "\n";
    return verified ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "pingpong: " << e.what() << "\n";
    return 1;
  }
}
