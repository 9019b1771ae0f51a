// pingpong_bench: message round trips between two coverbs sockets (async_send/async_receive),
// and the latency of one-sided RDMA READ and WRITE on a socket, in each polling mode.
#include <boost/asio/ip/address.hpp>
#include <iostream>

#include "../test/allocation_counter.hpp"
#include "coverbs_side.hpp"

namespace {

using namespace bench;
namespace verbs = coverbs::verbs;

constexpr std::string_view program = "pingpong_bench";
constexpr std::string_view usage_head =
    "usage: pingpong_bench [--transport rdma|tcp] [--address A] [--modes LIST] [--sizes LIST]\n"
    "                      [--ops LIST] [--iterations N] [--warmup N] [--copy-sends] [--quick]\n"
    "                      [--buffer-size N] [--receive-buffers N] [--max-spin US]\n"
    "Latency between two coverbs sockets in one process (a server thread and a client thread,\n"
    "each with its own io_context). Prints a table and, for bench/run, lines\n"
    "'csv,BENCH,coverbs,TRANSPORT,MODE,SIZE,1,METRIC,VALUE' with p50_us, p99_us, p999_us, and\n"
    "for ping-pong allocs_per_rt: heap allocations (malloc-family calls) per round trip, both sides.\n";
constexpr std::string_view usage_tail =
    "  --sizes LIST    message sizes in bytes, K and M allowed (default 64,4K,64K); a send\n"
    "                  must fit one stream buffer (--buffer-size)\n"
    "  --ops LIST      send: message ping-pong, half a round trip per sample, as ib_send_lat;\n"
    "                  read, write: one-sided READ/WRITE on the socket (over TCP, the peer's\n"
    "                  library answers them), post to completion per sample (default send)\n"
    "  --iterations N  measured samples per case (default 1000); past a million, the\n"
    "                  percentiles are a random million's\n"
    "  --warmup N      unmeasured samples first (default 50)\n"
    "  --copy-sends    ping-pong over RDMA: messages are copied into the socket's send buffers\n"
    "                  (default: each side registers the buffer it sends from and sets the\n"
    "                  socket option zero_copy_messages, so that a message of 16 KiB or more\n"
    "                  goes out uncopied, as ib_send_lat sends from registered memory; over TCP\n"
    "                  such messages go from the caller's memory either way)\n"
    "  --quick         20 samples, 2 of warm-up: only checks that every case runs\n";

struct options {
  network net;
  std::vector<std::size_t> sizes{64, 4096, 65536};
  std::vector<std::string_view> ops{"send"};
  std::size_t iterations = 1000, warmup = 50;
  bool copy_sends = false;
};

options parse(int argc, char** argv) {
  options o;
  arguments args(program, argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (arg == "--help" || arg == "-h") {
      std::cout << usage_head << network_usage << usage_tail;
      std::exit(0);
    } else if (o.net.parse(arg, args)) {
    } else if (arg == "--sizes") {
      o.sizes = args.list_value(1, 64 << 20);
    } else if (arg == "--ops") {
      o.ops = split(args.value());
      for (auto op : o.ops) {
        if (op != "send" && op != "read" && op != "write")
          args.bad_value("a comma-separated list of send, read, write");
      }
    } else if (arg == "--iterations") {
      o.iterations = args.number_value(1, 100'000'000);
    } else if (arg == "--warmup") {
      o.warmup = args.number_value(0, 100'000'000);
    } else if (arg == "--copy-sends") {
      o.copy_sends = true;
    } else if (arg == "--quick") {
      o.iterations = 20;
      o.warmup = 2;
    } else {
      cli::unknown_argument(program, arg);
    }
  }
  o.net.defaults.zero_copy_messages = !o.copy_sends;
  const std::size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  if (std::find(o.ops.begin(), o.ops.end(), "send") != o.ops.end() && largest > o.net.defaults.buffer_size) {
    usage_error(program, "a send of " + std::to_string(largest) + " bytes does not fit a stream buffer of " +
                             std::to_string(o.net.defaults.buffer_size) + " bytes (--buffer-size)");
  }
  return o;
}

/// One-sided latency: the server registers memory and sends its descriptor as a message; the
/// client then times `count` READs (or WRITEs) of `size` bytes from (to) it, one at a time.
struct one_sided {
  bool read;
  std::size_t size, warmup, count;
  latency_samples samples;

  awaitable<void> serve(coverbs::socket& s, std::size_t) {
    std::vector<std::byte> memory(size);
    auto reg = s.register_memory(memory, verbs::access::remote_read | verbs::access::remote_write);
    const auto wire = reg.remote().serialize();
    co_await s.async_send(asio::buffer(wire), use_awaitable);
    std::byte b[1];  // the client's close ends this wait
    co_await s.async_receive(asio::buffer(b), asio::as_tuple(use_awaitable));
    s.close();
  }

  awaitable<void> client(coverbs::socket& s, std::size_t) {
    std::array<std::byte, coverbs::remote_buffer::wire_size> wire;
    co_await s.async_receive(asio::buffer(wire), use_awaitable);
    coverbs::remote_buffer remote;
    if (auto ec = coverbs::remote_buffer::parse(wire, remote)) throw std::system_error(ec);
    std::vector<std::byte> memory(size);
    auto reg = s.register_memory(memory, verbs::access::none);
    const auto local = reg.slice(0, size);
    samples.reserve(count);
    auto t0 = clock_type::now();  // one reading per operation, as in bench::pingpong
    for (std::size_t i = 0; i < warmup + count; ++i) {
      if (read) {
        co_await s.async_read(local, remote, use_awaitable);
      } else {
        co_await s.async_write(local, remote, use_awaitable);
      }
      const auto t1 = clock_type::now();
      if (i >= warmup) samples.add(micros(t1 - t0));
      t0 = t1;
    }
    s.close();
  }
};

void report(const case_id& c, latency_samples& samples) {
  emit_latency(c, samples);
  std::printf("%-6s %-5s %-8s %7zu B  p50 %10.1f  p99 %10.1f  p99.9 %10.1f us\n",
              std::string(c.bench).c_str(), std::string(c.transport).c_str(), std::string(c.mode).c_str(),
              c.size, samples.percentile(0.5), samples.percentile(0.99), samples.percentile(0.999));
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (!coverbs::test::counter_trusted("pingpong_bench")) return 1;
  try {
    for (auto op : o.ops) {
      for (auto mode : o.net.effective_modes()) {
        for (std::size_t size : o.sizes) {
          shared_state state;
          latency_samples samples;
          std::optional<double> allocs;
          if (op == "send") {
            pingpong<socket_messages> p{size, o.warmup, o.iterations, {}};
            p.register_buffers = !o.copy_sends;
            o.net.run(
                state, mode, 1, [&](coverbs::socket& s, std::size_t i) { return p.serve(s, i); },
                [&](coverbs::socket& s, std::size_t i) { return p.client(s, i); });
            samples = std::move(p.samples);
            allocs = p.allocations_per_trip;
          } else {
            one_sided p{op == "read", size, o.warmup, o.iterations, {}};
            o.net.run(
                state, mode, 1, [&](coverbs::socket& s, std::size_t i) { return p.serve(s, i); },
                [&](coverbs::socket& s, std::size_t i) { return p.client(s, i); });
            samples = std::move(p.samples);
          }
          const std::string_view bench = op == "send" ? "pingpong" : op;
          const std::string label = o.net.mode_label(mode);
          const case_id c{bench, "coverbs", o.net.transport_name(), label, size, 1};
          report(c, samples);
          if (allocs) emit(c, "allocs_per_rt", *allocs);
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << describe(e) << std::endl;
    return 1;
  }
}
