// echo_client: opens C concurrent connections to echo_server, each doing N round trips of a
// checked message, and reports round trips per second and latency percentiles.
#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <coverbs/coverbs.hpp>
#include <iomanip>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "cli.hpp"
#include "percentile.hpp"
#include "server_target.hpp"

namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::string_view program = "echo_client";
constexpr std::string_view usage =
    "usage: echo_client --connect HOST[:PORT] [--port N] [--transport auto|rdma|tcp]\n"
    "                   [--connections C] [--messages N] [--size BYTES] [--timeout SECONDS]\n"
    "Opens C connections to an echo_server at once; each sends N messages of BYTES bytes, one\n"
    "at a time, and checks that every byte comes back. Prints round trips per second and the\n"
    "round-trip latency percentiles (nearest rank; past a million round trips, of a random\n"
    "million of them), and meanwhile its progress: each second on a terminal, elsewhere every\n"
    "5 s on stderr. Exits non-zero on any error or mismatch.\n"
    "  --connect HOST[:PORT]\n"
    "                       the server, by address or host name (IPv6 with a port: [ADDR]:PORT);\n"
    "                       RDMA needs the address of an RDMA device, not loopback\n"
    "  --port N             the server's port, when --connect gives none (default 7000)\n"
    "  --transport T        auto: RDMA where possible, else TCP (default); rdma or tcp: only that\n"
    "  --connections C      concurrent connections (default 4)\n"
    "  --messages N         round trips per connection (default 10000)\n"
    "  --size BYTES         bytes per message, K and M allowed (default 64)\n"
    "  --timeout SECONDS    give up when connecting, or a reply, takes longer (default 10)\n";

struct options {
  cli::server_target server{7000};
  coverbs::transport kind = coverbs::transport::automatic;
  std::size_t connections = 4, messages = 10000, size = 64;
  std::chrono::seconds timeout{10};
};

options parse(int argc, char** argv) {
  options o;
  cli::arguments args(program, argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (cli::client_option(args, arg, o.server)) {  // taken
    } else if (arg == "--transport") {
      const auto t = cli::transport(args.value());
      if (!t) args.bad_value("auto, rdma or tcp");
      o.kind = *t;
    } else if (arg == "--connections") {
      const auto n = cli::number(args.value(), 1, 10000);
      if (!n) args.bad_value("a number from 1 to 10000");
      o.connections = *n;
    } else if (arg == "--messages") {
      const auto n = cli::number(args.value(), 1, 1'000'000'000);
      if (!n) args.bad_value("a positive number");
      o.messages = *n;
    } else if (arg == "--size") {
      const auto n = cli::number(args.value(), 1, 64 << 20, true);
      if (!n) args.bad_value("a number of bytes from 1 to 64 MiB");
      o.size = *n;
    } else if (arg == "--timeout") {
      const auto n = cli::number(args.value(), 1, 86400);
      if (!n) args.bad_value("a number of seconds from 1 to 86400");
      o.timeout = std::chrono::seconds(*n);
    } else {
      args.unknown();
    }
  }
  cli::check_target(program, o.server);
  // Each connection holds a message and its reply: 1 GiB in all at most.
  if (o.connections * o.size > (1u << 29))
    cli::usage_error(program,
                     "--connections times --size exceeds 512 MiB (each holds a message and its reply)");
  return o;
}

// Differs per connection and per round trip, so a reply from the wrong request shows.
void fill(std::vector<std::byte>& message, std::size_t connection, std::size_t trip) {
  for (std::size_t j = 0; j < message.size(); ++j) {
    message[j] = static_cast<std::byte>(j * 7 + trip * 13 + connection * 101);
  }
}

class run {
 public:
  run(asio::io_context& io, const options& o) : io_(io), opt_(o), go_(io), ticker_(io) {
    for (std::size_t i = 0; i < o.connections; ++i) {
      sockets_.push_back(std::make_unique<coverbs::socket>(io, coverbs::socket_options{.kind = o.kind}));
    }
  }

  void start() {
    go_.expires_at(clock_type::time_point::max());
    started_ = last_progress_ = clock_type::now();
    for (std::size_t i = 0; i < opt_.connections; ++i) {
      asio::co_spawn(io_, connection(i), [this, i](std::exception_ptr e) {
        if (e) return fail(i, e);
        if (++finished_ == opt_.connections) done();
      });
    }
    tick();
  }
  const std::string& error() const { return error_; }
  void report();

 private:
  asio::awaitable<void> connection(std::size_t i) {
    coverbs::socket& s = *sockets_[i];
    co_await coverbs::async_connect(s, opt_.server.endpoints, asio::use_awaitable);
    used_.insert(s.transport_in_use());
    // Measure only once every connection is up: connection setup is not echo latency.
    if (++connected_ == opt_.connections) {
      all_connected();
    } else {
      co_await go_.async_wait(asio::as_tuple(asio::use_awaitable));  // all_connected() cancels it
    }

    std::vector<std::byte> message(opt_.size), reply(opt_.size);
    for (std::size_t trip = 0; trip < opt_.messages; ++trip) {
      fill(message, i, trip);
      const auto t0 = clock_type::now();
      // Write and read at once: a message larger than the buffers in flight would otherwise
      // stall, with the server unable to send back what this side is not yet reading. When one
      // fails the other is cancelled; both then report the first failure, the one that says why
      // (the cancelled one would say "Operation canceled").
      boost::system::error_code cause;
      const auto check = [&cause](boost::system::error_code ec) {
        if (!ec) return;
        if (!cause) cause = ec;
        throw boost::system::system_error(cause);
      };
      co_await ([&]() -> asio::awaitable<void> {
        check(std::get<0>(
            co_await asio::async_write(s, asio::buffer(message), asio::as_tuple(asio::use_awaitable))));
      }() && [&]() -> asio::awaitable<void> {
        check(std::get<0>(
            co_await asio::async_read(s, asio::buffer(reply), asio::as_tuple(asio::use_awaitable))));
      }());
      latencies_.add(std::chrono::duration<float, std::micro>(clock_type::now() - t0).count());
      ++round_trips_;
      if (message != reply) {
        const auto at = std::mismatch(message.begin(), message.end(), reply.begin()).first - message.begin();
        throw std::runtime_error("round trip " + std::to_string(trip + 1) +
                                 ": reply differs from the message at byte " + std::to_string(at) + " of " +
                                 std::to_string(opt_.size));
      }
    }
    // Half-close and wait for the server's eof, so both sides see an orderly end.
    s.shutdown(asio::socket_base::shutdown_send);
    auto [ec, extra] = co_await s.async_read_some(asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
    if (!ec) throw std::runtime_error("the server sent " + std::to_string(extra) + " bytes nobody asked for");
    if (ec != asio::error::eof) throw boost::system::system_error(ec);
    s.close();
  }

  void all_connected() {
    std::string kinds;
    for (auto t : used_) kinds += (kinds.empty() ? "" : " and ") + std::string(cli::name(t));
    std::cout << program << ": " << opt_.connections << " connection(s) to " << opt_.server.text() << " over "
              << kinds << ", " << opt_.messages << " round trips of " << opt_.size << " bytes each"
              << std::endl;
    started_ = last_progress_ = shown_at_ = clock_type::now();
    go_.cancel();
  }

  // The timeout for connecting and for replies, and progress (cli::progress_due).
  void tick() {
    ticker_.expires_after(cli::tick_period);
    ticker_.async_wait([this](boost::system::error_code ec) {
      // done() cancels the timer, but a tick already due when it did still runs, without an
      // error: it must not go on ticking, and time the run out, after every connection finished.
      if (ec || finished_ == opt_.connections) return;
      const auto now = clock_type::now();
      // Connections count as progress too: many of them may take a while to set up.
      if (connected_ + round_trips_ != last_count_) {
        last_progress_ = now;
        last_count_ = connected_ + round_trips_;
      }
      if (now - last_progress_ >= opt_.timeout) {
        const auto what = connected_ < opt_.connections ? "connecting to " : "waiting for a reply from ";
        return fail(std::string(what) + opt_.server.text() + " took longer than " +
                    std::to_string(opt_.timeout.count()) + " s");
      }
      if (connected_ == opt_.connections && cli::progress_due(terminal_, now, shown_at_)) progress(now);
      tick();
    });
  }

  void progress(clock_type::time_point now) {
    const std::chrono::duration<double> total = now - started_, since = now - shown_at_;
    const std::size_t all = opt_.connections * opt_.messages;
    std::ostringstream line;
    line << std::fixed << std::setprecision(1) << program << ": " << total.count() << " s: " << round_trips_
         << " of " << all << " round trips (" << 100 * round_trips_ / all << "%), "
         << static_cast<std::size_t>(static_cast<double>(round_trips_ - shown_count_) / since.count())
         << "/s\n";
    (terminal_ ? std::cout : std::cerr) << line.str() << std::flush;
    shown_at_ = now;
    shown_count_ = round_trips_;
  }

  void fail(std::size_t i, std::exception_ptr e) {
    const std::string over =
        opt_.kind == coverbs::transport::automatic ? "" : " over " + std::string(cli::name(opt_.kind));
    const std::string where = connected_ < opt_.connections
                                  ? "cannot connect to " + opt_.server.text() + over + ": "
                                  : "connection " + std::to_string(i + 1) + ": ";
    try {
      std::rethrow_exception(e);
    } catch (const asio::multiple_exceptions& x) {
      return fail(i, x.first_exception());
    } catch (const boost::system::system_error& x) {
      // A TCP connection the server never accepted (its backlog, when it stopped) is reset
      // before the server's hello, which the library reports as a refusal, as rdma_cm would.
      const bool unaccepted = x.code() == asio::error::connection_refused && connected_ == opt_.connections;
      fail(where + (x.code() == asio::error::eof ? "the server closed the connection"
                    : unaccepted                 ? "the server never accepted it (" + x.code().message() + ")"
                                                 : x.code().message()));
    } catch (const std::exception& x) {
      fail(where + cli::describe(x));
    }
  }

  // rdma_cm cannot use loopback, and the device error alone does not say so.
  std::string hint() const {
    const bool rdma_to_loopback = opt_.kind == coverbs::transport::rdma && opt_.server.loopback();
    return connected_ < opt_.connections && rdma_to_loopback
               ? " (RDMA needs the address of an RDMA device, not loopback)"
               : "";
  }

  // The first failure ends the run: stopping the context abandons every connection and
  // pending connect at once, and the program exits right after.
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message + hint();
    io_.stop();
  }

  void done() {
    finished_at_ = clock_type::now();
    ticker_.cancel();
  }

  asio::io_context& io_;
  options opt_;
  std::vector<std::unique_ptr<coverbs::socket>> sockets_;
  // Up to 10^13 round trips (connections times --messages): a bounded sample of them.
  stats::reservoir<float> latencies_;
  std::set<coverbs::transport> used_;
  asio::steady_timer go_, ticker_;
  clock_type::time_point started_, last_progress_, shown_at_, finished_at_;
  std::size_t connected_ = 0, finished_ = 0, round_trips_ = 0, last_count_ = 0, shown_count_ = 0;
  std::string error_;
  const bool terminal_ = isatty(STDOUT_FILENO);
};

void run::report() {
  const std::size_t all = latencies_.count();
  const std::chrono::duration<double> took = finished_at_ - started_;
  std::cout << std::fixed << std::setprecision(2) << program << ": " << all << " round trips in "
            << took.count() << " s: " << static_cast<std::size_t>(static_cast<double>(all) / took.count())
            << " round trips/s, every reply matched\n"
            << std::setprecision(1) << program << ": latency us: p50 " << latencies_.percentile(0.5)
            << "  p99 " << latencies_.percentile(0.99) << "  p99.9 " << latencies_.percentile(0.999)
            << "  max " << latencies_.max() << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  options opt = parse(argc, argv);
  cli::resolve(program, opt.server);
  try {
    asio::io_context io;
    run r(io, opt);
    r.start();
    io.run();
    if (!r.error().empty()) {
      std::cerr << program << ": " << r.error() << std::endl;
      return 1;
    }
    r.report();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << cli::describe(e) << std::endl;
    return 1;
  }
}
