// asio_baseline: the TCP baseline for coverbs' benchmarks. A plain Asio C++20 coroutine
// program (no coverbs anywhere) running the same ping-pong, stream and echo patterns as
// pingpong_bench and stream_bench, from the same templates, on asio::ip::tcp::socket.
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <iostream>

#include "../test/allocation_counter.hpp"
#include "patterns.hpp"

namespace {

using namespace bench;
using tcp = asio::ip::tcp;

constexpr std::string_view program = "asio_baseline";
constexpr std::string_view usage =
    "usage: asio_baseline [--address A] [--patterns LIST] [--sizes LIST] [--iterations N]\n"
    "                     [--stream-sizes LIST] [--connections N] [--bytes N]\n"
    "                     [--echo-connections LIST] [--echo-size N] [--echo-count N] [--quick]\n"
    "Plain Asio over TCP (asio::ip::tcp, epoll), a server thread and a client thread, running\n"
    "the patterns of pingpong_bench and stream_bench. Prints a table and, for bench/run, lines\n"
    "'csv,BENCH,asio,tcp,-,SIZE,CONNECTIONS,METRIC,VALUE'.\n"
    "  --address A              listen and connect address (default 127.0.0.1)\n"
    "  --patterns LIST          pingpong, stream, echo (default all)\n"
    "pingpong: async_write a message, async_read the same size back; half round trips.\n"
    "  --sizes LIST             message sizes (default 64,4K,64K)\n"
    "  --iterations N           samples per size (default 1000), after --warmup N (default 50);\n"
    "                           past a million, the percentiles are a random million's\n"
    "stream: N connections each write BYTES with async_write calls of SIZE bytes.\n"
    "  --stream-sizes LIST      write sizes (default 4K,64K,1M,4M)\n"
    "  --connections N          (default 4)\n"
    "  --bytes N                bytes per connection (default 64M)\n"
    "echo: C connections each doing round trips of one message.\n"
    "  --echo-connections LIST  (default 1,16,64)\n"
    "  --echo-size N            (default 64)\n"
    "  --echo-count N           round trips per connection (default 2000), after 10 of warm-up;\n"
    "                           past a million in all, the percentiles are a random million's\n"
    "  --quick                  tiny amounts: only checks that every case runs\n";

struct options {
  asio::ip::address address = asio::ip::make_address("127.0.0.1");
  bool pingpong = true, stream = true, echo = true;
  std::vector<std::size_t> sizes{64, 4096, 65536};
  std::size_t iterations = 1000, warmup = 50;
  std::vector<std::size_t> stream_sizes{4096, 65536, 1 << 20, 4 << 20};
  std::size_t connections = 4, bytes = 64 << 20;
  std::vector<std::size_t> echo_connections{1, 16, 64};
  std::size_t echo_size = 64, echo_count = 2000, echo_warmup = 10;
};

options parse(int argc, char** argv) {
  options o;
  arguments args(program, argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (arg == "--address") {
      boost::system::error_code ec;
      o.address = asio::ip::make_address(std::string(args.value()), ec);
      if (ec) args.bad_value("a numeric IPv4 or IPv6 address");
    } else if (arg == "--patterns") {
      o.pingpong = o.stream = o.echo = false;
      for (auto p : split(args.value())) {
        if (p == "pingpong") {
          o.pingpong = true;
        } else if (p == "stream") {
          o.stream = true;
        } else if (p == "echo") {
          o.echo = true;
        } else {
          args.bad_value("a comma-separated list of pingpong, stream, echo");
        }
      }
    } else if (arg == "--sizes") {
      o.sizes = args.list_value(1, 64 << 20);
    } else if (arg == "--iterations") {
      o.iterations = args.number_value(1, 100'000'000);
    } else if (arg == "--warmup") {
      o.warmup = args.number_value(0, 100'000'000);
    } else if (arg == "--stream-sizes") {
      o.stream_sizes = args.list_value(1, 64 << 20);
    } else if (arg == "--connections") {
      o.connections = args.number_value(1, 1024);
    } else if (arg == "--bytes") {
      o.bytes = args.number_value(1, std::size_t{1} << 40);
    } else if (arg == "--echo-connections") {
      o.echo_connections = args.list_value(1, 1024, "connection counts");
    } else if (arg == "--echo-size") {
      o.echo_size = args.number_value(1, 64 * 1024);
    } else if (arg == "--echo-count") {
      o.echo_count = args.number_value(1, 100'000'000);
    } else if (arg == "--quick") {
      o.iterations = 20;
      o.warmup = 2;
      o.bytes = 256 * 1024;
      o.echo_count = 10;
      o.echo_warmup = 1;
    } else {
      cli::unknown_argument(program, arg);
    }
  }
  return o;
}

template <class Serve, class Client>
void run(const options& o, shared_state& state, std::size_t connections, Serve serve, Client client) {
  const tcp::endpoint at(o.address, 0);
  run_pair<tcp::socket>(
      state, connections, [&](asio::io_context& io) { return tcp::acceptor(io, at); },
      [&](asio::io_context& io) { return tcp::socket(io); },
      [&](tcp::socket& s, std::size_t i) {
        s.set_option(tcp::no_delay(true));  // as coverbs' TCP transport does
        return serve(s, i);
      },
      [&](tcp::socket& s, std::size_t i) {
        s.set_option(tcp::no_delay(true));
        return client(s, i);
      });
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (!coverbs::test::counter_trusted("asio_baseline")) return 1;
  try {
    if (o.pingpong) {
      for (std::size_t size : o.sizes) {
        shared_state state;
        pingpong<stream_messages> p{size, o.warmup, o.iterations, {}};
        run(
            o, state, 1, [&](tcp::socket& s, std::size_t i) { return p.serve(s, i); },
            [&](tcp::socket& s, std::size_t i) { return p.client(s, i); });
        emit_latency({"pingpong", "asio", "tcp", "-", size, 1}, p.samples);
        emit({"pingpong", "asio", "tcp", "-", size, 1}, "allocs_per_rt", p.allocations_per_trip);
        std::printf("pingpong tcp %8zu B  p50 %8.1f  p99 %8.1f  p99.9 %8.1f us\n", size,
                    p.samples.percentile(0.5), p.samples.percentile(0.99), p.samples.percentile(0.999));
      }
    }
    if (o.stream) {
      for (std::size_t size : o.stream_sizes) {
        shared_state state;
        state.pending = o.connections;
        stream p{size, std::max(o.bytes, size), &state};
        run(
            o, state, o.connections, [&](tcp::socket& s, std::size_t i) { return p.serve(s, i); },
            [&](tcp::socket& s, std::size_t i) { return p.client(s, i); });
        const auto took = clock_type::duration(state.end.load()) - state.start.time_since_epoch();
        const double rate = mib_per_s(p.bytes * o.connections, took);
        emit({"stream", "asio", "tcp", "-", size, o.connections}, "mib_s", rate);
        std::printf("stream   tcp %8zu B x %zu conn  %10.1f MiB/s\n", size, o.connections, rate);
      }
    }
    if (o.echo) {
      for (std::size_t connections : o.echo_connections) {
        shared_state state;
        echo p{o.echo_size, o.echo_warmup, o.echo_count, {}, {}, {}};
        p.samples.reserve(connections * o.echo_count);
        run(
            o, state, connections, [&](tcp::socket& s, std::size_t i) { return p.serve(s, i); },
            [&](tcp::socket& s, std::size_t i) { return p.client(s, i); });
        const double trips = static_cast<double>(connections * (o.echo_warmup + o.echo_count));
        const double rate = trips / std::chrono::duration<double>(p.end - state.start).count();
        const case_id c{"echo", "asio", "tcp", "-", o.echo_size, connections};
        emit(c, "rt_per_s", rate);
        emit(c, "p50_us", p.samples.percentile(0.5));
        emit(c, "p99_us", p.samples.percentile(0.99));
        std::printf("echo     tcp %8zu B x %zu conn  %10.0f round trips/s  p50 %.1f  p99 %.1f us\n",
                    o.echo_size, connections, rate, p.samples.percentile(0.5), p.samples.percentile(0.99));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << describe(e) << std::endl;
    return 1;
  }
}
