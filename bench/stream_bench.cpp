// stream_bench: byte-stream bandwidth (asio::async_write on coverbs sockets, several
// connections at once) and echo throughput with many connections, in each polling mode.
#include <iostream>

#include "coverbs_side.hpp"

namespace {

using namespace bench;

constexpr std::string_view program = "stream_bench";
constexpr std::string_view usage_head =
    "usage: stream_bench [--transport rdma|tcp] [--address A] [--modes LIST] [--patterns LIST]\n"
    "                    [--sizes LIST] [--connections N] [--bytes N] [--copy-writes]\n"
    "                    [--echo-connections LIST] [--echo-size N] [--echo-count N] [--quick]\n"
    "                    [--buffer-size N] [--receive-buffers N] [--max-spin US]\n"
    "Between coverbs sockets in one process (a server thread and a client thread). Prints a\n"
    "table and, for bench/run, lines 'csv,BENCH,coverbs,TRANSPORT,MODE,SIZE,CONNECTIONS,METRIC,\n"
    "VALUE': stream mib_s; echo rt_per_s, p50_us, p99_us (whole round trips).\n";
constexpr std::string_view usage_tail =
    "  --patterns LIST        stream, echo (default both)\n"
    "stream: each of N connections writes BYTES with asio::async_write calls of SIZE bytes, the\n"
    "server reads them with async_read_some; MiB/s from all connected until all received.\n"
    "  --sizes LIST           write sizes (default 4K,64K,1M,4M)\n"
    "  --connections N        connections writing at once (default 4)\n"
    "  --bytes N              bytes per connection (default 64M; K and M allowed)\n"
    "  --copy-writes          RDMA: the writer's buffer is not registered on the connection and\n"
    "                         asio::async_write copies it into the send buffers (default: it is\n"
    "                         registered and each write is one async_write_some, sent from where\n"
    "                         it is, as ib_write_bw sends; TCP always uses asio::async_write)\n"
    "echo: C connections, each doing round trips of one message the server echoes back.\n"
    "  --echo-connections L   connection counts (default 1,16,64)\n"
    "  --echo-size N          bytes per message (default 64)\n"
    "  --echo-count N         round trips per connection (default 2000), after 10 of warm-up;\n"
    "                         past a million in all, the percentiles are a random million's\n"
    "  --quick                tiny amounts: only checks that every case runs\n";

struct options {
  network net;
  bool stream = true, echo = true;
  std::vector<std::size_t> sizes{4096, 65536, 1 << 20, 4 << 20};
  std::size_t connections = 4, bytes = 64 << 20;
  bool register_writes = true;
  std::vector<std::size_t> echo_connections{1, 16, 64};
  std::size_t echo_size = 64, echo_count = 2000, echo_warmup = 10;
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
    } else if (arg == "--patterns") {
      o.stream = o.echo = false;
      for (auto p : split(args.value())) {
        if (p == "stream") {
          o.stream = true;
        } else if (p == "echo") {
          o.echo = true;
        } else {
          args.bad_value("a comma-separated list of stream, echo");
        }
      }
    } else if (arg == "--sizes") {
      o.sizes = args.list_value(1, 64 << 20);
    } else if (arg == "--connections") {
      o.connections = args.number_value(1, 1024);
    } else if (arg == "--bytes") {
      o.bytes = args.number_value(1, std::size_t{1} << 40);
    } else if (arg == "--copy-writes") {
      o.register_writes = false;
    } else if (arg == "--echo-connections") {
      o.echo_connections = args.list_value(1, 1024, "connection counts");
    } else if (arg == "--echo-size") {
      o.echo_size = args.number_value(1, 64 * 1024);
    } else if (arg == "--echo-count") {
      o.echo_count = args.number_value(1, 100'000'000);
    } else if (arg == "--quick") {
      o.bytes = 256 * 1024;
      o.echo_count = 10;
      o.echo_warmup = 1;
    } else {
      cli::unknown_argument(program, arg);
    }
  }
  return o;
}

void run_stream(const options& o, coverbs::polling_mode mode, std::size_t size) {
  shared_state state;
  state.pending = o.connections;
  // Over TCP registering changes nothing, and the writes stay asio::async_write's, as the
  // plain Asio baseline's are.
  stream p{size, std::max(o.bytes, size), &state, o.register_writes && o.net.transport_name() == "rdma"};
  o.net.run(
      state, mode, o.connections, [&](coverbs::socket& s, std::size_t i) { return p.serve(s, i); },
      [&](coverbs::socket& s, std::size_t i) { return p.client(s, i); });
  const auto took = clock_type::duration(state.end.load()) - state.start.time_since_epoch();
  const double rate = mib_per_s(p.bytes * o.connections, took);
  const std::string label = o.net.mode_label(mode);
  emit({"stream", "coverbs", o.net.transport_name(), label, size, o.connections}, "mib_s", rate);
  std::printf("stream %-5s %-8s %8zu B x %zu conn  %10.1f MiB/s\n",
              std::string(o.net.transport_name()).c_str(), label.c_str(), size, o.connections, rate);
}

void run_echo(const options& o, coverbs::polling_mode mode, std::size_t connections) {
  shared_state state;
  echo p{o.echo_size, o.echo_warmup, o.echo_count, {}, {}, {}};
  p.samples.reserve(connections * o.echo_count);
  o.net.run(
      state, mode, connections, [&](coverbs::socket& s, std::size_t i) { return p.serve(s, i); },
      [&](coverbs::socket& s, std::size_t i) { return p.client(s, i); });
  const double trips = static_cast<double>(connections * (o.echo_warmup + o.echo_count));
  const double rate = trips / std::chrono::duration<double>(p.end - state.start).count();
  const std::string label = o.net.mode_label(mode);
  const case_id c{"echo", "coverbs", o.net.transport_name(), label, o.echo_size, connections};
  emit(c, "rt_per_s", rate);
  emit(c, "p50_us", p.samples.percentile(0.5));
  emit(c, "p99_us", p.samples.percentile(0.99));
  std::printf("echo   %-5s %-8s %8zu B x %zu conn  %10.0f round trips/s  p50 %.1f  p99 %.1f us\n",
              std::string(o.net.transport_name()).c_str(), label.c_str(), o.echo_size, connections, rate,
              p.samples.percentile(0.5), p.samples.percentile(0.99));
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  try {
    for (auto mode : o.net.effective_modes()) {
      if (o.stream) {
        for (std::size_t size : o.sizes) run_stream(o, mode, size);
      }
      if (o.echo) {
        for (std::size_t c : o.echo_connections) run_echo(o, mode, c);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << describe(e) << std::endl;
    return 1;
  }
}
