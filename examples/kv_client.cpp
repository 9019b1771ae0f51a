// kv_client: PUT, GET and DELETE against a kv_server, GETs either one-sided (an RDMA READ of
// the key's slot) or by request; a bench that compares the two, and a stress mode that checks
// one-sided GETs against concurrent PUTs.
#include <unistd.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cli.hpp"
#include "kv_bench.hpp"
#include "kv_client_options.hpp"
#include "kv_connection.hpp"
#include "kv_malformed.hpp"
#include "kv_stress.hpp"

namespace asio = boost::asio;

namespace {

using kv_client::options;
using kv_client::program;

class client {
 public:
  client(asio::io_context& io, const options& o) : io_(io), opt_(o), ticker_(io) {}

  void start() {
    started_ = shown_at_ = std::chrono::steady_clock::now();
    asio::co_spawn(io_, run(), [this](std::exception_ptr e) {
      if (e) fail(e);
      io_.stop();  // open sockets would keep run() going
    });
    tick();
  }
  int exit_code() const { return exit_code_; }

 private:
  asio::awaitable<void> run() {
    const auto& cmd = opt_.command;
    if (cmd[0] == "stress") {
      co_await stress();
      co_return;
    }
    kv::connection c(io_.get_executor(), opt_.kind);
    co_await connect(c);
    if (cmd[0] == "bad-request") {
      const auto request = kv::malformed_request(cmd[1], c.table());
      co_await bad_request(c, request);
    } else if (cmd[0] == "bench") {
      co_await bench(c);
    } else {
      co_await single(c);
    }
  }

  // put, get or del of one key.
  asio::awaitable<void> single(kv::connection& c) {
    const auto& cmd = opt_.command;
    const kv::layout& t = c.table();
    const std::string& key = cmd[1];
    if (key.empty() || key.size() > t.max_key) {
      return_code(1, "the server takes keys of 1 to " + std::to_string(t.max_key) + " bytes, not " +
                         std::to_string(key.size()));
    } else if (cmd[0] == "put" && cmd[2].size() > t.max_value) {
      return_code(1, "the server takes values of up to " + std::to_string(t.max_value) + " bytes, not " +
                         std::to_string(cmd[2].size()));
    } else if (cmd[0] == "put") {
      const kv::status s = co_await c.put(key, kv::wire::bytes(cmd[2]));
      if (s == kv::status::table_full) {
        return_code(1,
                    "table full: all " + std::to_string(t.probes()) + " slots for '" + key + "' are taken");
      } else {
        say("stored '", key, "' (", cmd[2].size(), cmd[2].size() == 1 ? " byte)" : " bytes)");
      }
    } else if (cmd[0] == "del") {
      const kv::status s = co_await c.del(key);
      if (s == kv::status::not_found) {
        return_code(1, "not found: " + key);
      } else {
        say("deleted '", key, "'");
      }
    } else {
      kv::get_stats stats;
      std::optional<kv::connection::value> v;
      if (opt_.two_sided) {  // not a ?: expression: g++ 12 mishandles co_await inside one
        v = co_await c.get_two_sided(key);
      } else {
        v = co_await c.get_one_sided(key, stats, opt_.bench.get);
      }
      if (!v) {
        return_code(1, "not found: " + key);
      } else {
        std::cout.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(v->size()))
            << std::endl;
      }
    }
  }

  asio::awaitable<void> connect(kv::connection& c) {
    try {
      co_await c.connect(opt_.server.endpoints);
    } catch (const kv::protocol_failure&) {
      throw;
    } catch (const std::exception& e) {
      throw cannot_connect(e);
    }
    progress_.transport = c.socket().transport_in_use();
    progress_.connected = true;
  }

  // Names the server and the transport asked for; rdma_cm's own error does not say that
  // loopback cannot work.
  std::runtime_error cannot_connect(const std::exception& e) const {
    const std::string over =
        opt_.kind == coverbs::transport::automatic ? "" : " over " + std::string(cli::name(opt_.kind));
    const bool loopback = opt_.kind == coverbs::transport::rdma && opt_.server.loopback();
    return std::runtime_error("cannot connect to " + opt_.server.text() + over + ": " + cli::describe(e) +
                              (loopback ? " (RDMA needs the address of an RDMA device, not loopback)" : ""));
  }

  asio::awaitable<void> bench(kv::connection& c) {
    const auto& o = opt_.bench;
    if (o.value_size > c.table().max_value)
      throw std::runtime_error("--value-size exceeds the server's limit of " +
                               std::to_string(c.table().max_value) + " bytes");
    say("bench over ", cli::name(c.socket().transport_in_use()), ": ", o.ops, " GETs each way of ", o.keys,
        " keys with ", o.value_size, "-byte values");
    const auto r = co_await kv::run_bench(c, o, progress_);
    std::ostringstream table;
    table << std::fixed << std::setprecision(1);
    auto row = [&](const char* name, const kv::latency_summary& s) {
      table << program << ": " << std::left << std::setw(11) << name << std::right << std::setw(10)
            << s.p50_us << std::setw(10) << s.p99_us << std::setw(12) << std::setprecision(0)
            << s.ops_per_second << std::setprecision(1) << "\n";
    };
    table << program << ": GET          p50 us    p99 us       ops/s\n";
    row("one-sided", r.one_sided);
    row("two-sided", r.two_sided);
    std::cout << table.str();
    say("one-sided: ", r.stats.reads, " slot reads, ", r.stats.retries, " retries, ", r.stats.fallbacks,
        " fallbacks to a request");
  }

  asio::awaitable<void> stress() {
    auto o = opt_.stress;
    kv::stress run(io_.get_executor(), opt_.kind, o, progress_);
    say("stress: ", o.writers, " writer(s) and ", o.readers, " reader(s) on ", o.keys, " keys of ",
        o.value_size, "-byte values for ", o.duration.count() / 1000.0, " s",
        o.get.check_versions ? "" : ", versions NOT checked");
    kv::stress_result r;
    try {
      r = co_await run.run(opt_.server.endpoints);
    } catch (const kv::protocol_failure&) {
      throw;
    } catch (const std::exception& e) {
      if (!progress_.connected) throw cannot_connect(e);
      throw;
    }
    say("stress over ", cli::name(run.transport_in_use()), ": ", r.puts, " PUTs, ", r.gets,
        " one-sided GETs (", r.found, " found, ", r.not_found, " not found)");
    say("retries ", r.stats.retries, " (torn slot reads taken again), fallbacks ", r.stats.fallbacks,
        " (GETs left to the server), torn values ", r.torn, ", wrong values ", r.wrong);
    if (r.torn + r.wrong > 0) return_code(1, "FAILED: " + r.first_problem);
  }

  asio::awaitable<void> bad_request(kv::connection& c, const std::vector<std::byte>& request) {
    try {
      const auto r = co_await c.call(request);
      return_code(1, "the server answered a malformed request with status " +
                         std::to_string(static_cast<int>(r.status)));
      co_return;
    } catch (const kv::refused& e) {
      say(e.what());
    }
    std::array<std::byte, 64> extra;
    auto [ec, n] =
        co_await c.socket().async_receive(asio::buffer(extra), asio::as_tuple(asio::use_awaitable));
    if (!ec) {
      return_code(1, "the server sent more after refusing the request");
    } else {
      say("the server closed the connection (", ec.message(), ")");
    }
  }

  template <class... Parts>
  static void say(const Parts&... parts) {
    std::ostringstream line;
    ((line << program << ": ") << ... << parts) << '\n';
    std::cout << line.str() << std::flush;
  }
  void return_code(int code, const std::string& message) {
    std::cerr << program << ": " << message << std::endl;
    exit_code_ = code;
  }

  void fail(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const kv::protocol_failure& x) {
      return_code(1, x.what());
    } catch (const boost::system::system_error& x) {
      return_code(1, "lost the server: " + lost(x.code()));
    } catch (const std::exception& x) {
      return_code(1, cli::describe(x));
    }
  }

  // Why the connection failed, worded as file_client words it, with the transport in use. A
  // server gone away fails a one-sided read in flight with "transport retry counter exceeded",
  // over TCP too (the library reports what an RDMA queue pair would), which says neither.
  std::string lost(const boost::system::error_code& ec) const {
    const std::string over =
        progress_.transport ? " (over " + std::string(cli::name(*progress_.transport)) + ")" : "";
    if (ec == asio::error::eof || ec == asio::error::broken_pipe || ec == asio::error::connection_reset ||
        ec == coverbs::wc_errc::flushed || ec == coverbs::wc_errc::retry_exceeded) {
      return "it closed the connection" + over;
    }
    return ec.message() + over;
  }

  // bench and stress may run for long: how far they got, each second on a terminal (stdout,
  // with the rest), elsewhere every 5 s on stderr, so that a log shows the run moving while
  // stdout keeps only the lines scripts read.
  void show_progress(std::chrono::steady_clock::time_point now) {
    const auto& cmd = opt_.command[0];
    const std::chrono::duration<double> total = now - started_, since = now - shown_at_;
    const std::size_t done = progress_.operations;
    std::ostringstream line;
    line << std::fixed << std::setprecision(1) << program << ": " << cmd << ": " << total.count()
         << " s: " << done;
    if (cmd == "bench") {
      const std::size_t all = opt_.bench.keys + 2 * opt_.bench.ops;
      line << " of " << all << " operations (" << 100 * done / all << "%)";
    } else {
      line << " operations";
    }
    line << ", " << static_cast<std::size_t>(static_cast<double>(done - shown_count_) / since.count())
         << "/s\n";
    (terminal_ ? std::cout : std::cerr) << line.str() << std::flush;
    shown_at_ = now;
    shown_count_ = done;
  }

  // The timeout for connecting and for answers, and bench's and stress's progress
  // (cli::progress_due).
  void tick() {
    ticker_.expires_after(cli::tick_period);
    ticker_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const auto now = std::chrono::steady_clock::now();
      if (progress_.operations != last_count_ || last_progress_ == std::chrono::steady_clock::time_point()) {
        last_progress_ = now;
        last_count_ = progress_.operations;
      }
      if (now - last_progress_ >= opt_.timeout) {
        return_code(1, "no answer from " + opt_.server.text() + " for " +
                           std::to_string(opt_.timeout.count()) + " s" +
                           (progress_.connected ? "" : " while connecting"));
        return io_.stop();
      }
      const auto& cmd = opt_.command[0];
      if ((cmd == "bench" || cmd == "stress") && progress_.connected &&
          cli::progress_due(terminal_, now, shown_at_)) {
        show_progress(now);
      }
      tick();
    });
  }

  asio::io_context& io_;
  options opt_;
  asio::steady_timer ticker_;
  std::chrono::steady_clock::time_point last_progress_, started_, shown_at_;
  kv::activity progress_;
  std::size_t last_count_ = 0, shown_count_ = 0;
  const bool terminal_ = isatty(STDOUT_FILENO);
  int exit_code_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  options opt = kv_client::parse(argc, argv);
  cli::resolve(program, opt.server);
  try {
    asio::io_context io;
    client c(io, opt);
    c.start();
    io.run();
    return c.exit_code();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << cli::describe(e) << std::endl;
    return 1;
  }
}
