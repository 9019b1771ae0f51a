// echo_server: sends every byte it receives back to its sender, one coroutine per connection,
// serving RDMA and TCP clients on the same port. Run echo_client against it.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <coverbs/coverbs.hpp>
#include <csignal>
#include <map>
#include <sstream>
#include <vector>

#include "cli.hpp"

namespace asio = boost::asio;

namespace {

constexpr std::string_view program = "echo_server";
constexpr std::string_view usage =
    "usage: echo_server [--listen ADDR] [--port N] [--transport auto|rdma|tcp] [--connections N]\n"
    "Echoes back every byte its clients send, over RDMA and TCP on one port.\n"
    "  --listen ADDR     IPv4 or IPv6 address to listen on (default 0.0.0.0); RDMA clients need\n"
    "                    the address of an RDMA device, not 127.0.0.1\n"
    "  --port N          port, 0 to let the system pick one (default 7000)\n"
    "  --transport T     auto: RDMA and TCP (default); rdma or tcp: that one only\n"
    "  --connections N   exit after serving N connections (default 0: until SIGINT or SIGTERM)\n"
    "Prints 'listening on ADDR:PORT (TRANSPORTS)' first, then a line when each connection\n"
    "opens and closes.\n";

struct options {
  asio::ip::address listen = asio::ip::address_v4::any();
  std::uint16_t port = 7000;
  coverbs::transport kind = coverbs::transport::automatic;
  std::size_t connections = 0;
};

options parse(int argc, char** argv) {
  options o;
  cli::arguments args(program, argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (cli::server_option(args, arg, o)) {  // taken
    } else if (arg == "--transport") {
      const auto t = cli::transport(args.value());
      if (!t) args.bad_value("auto, rdma or tcp");
      o.kind = *t;
    } else {
      args.unknown();
    }
  }
  return o;
}

// Whole lines, flushed at once: a script reading the port from a pipe must not wait for a
// buffer to fill.
template <class... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  ((line << program << ": ") << ... << parts) << '\n';
  std::cout << line.str() << std::flush;
}

class server {
 public:
  server(asio::io_context& io, const options& o)
      : acceptor_(io, {o.listen, o.port}, {.kind = o.kind}),
        signals_(io, SIGINT, SIGTERM),
        limit_(o.connections),
        kind_(o.kind) {}

  void start() {
    cli::announce([](const auto&... parts) { say(parts...); }, acceptor_, kind_);
    asio::co_spawn(acceptor_.get_executor(), accept_loop(), rethrow);
    signals_.async_wait([this](error_code ec, int signal) {
      if (!ec) stop(signal == SIGINT ? "SIGINT" : "SIGTERM");
    });
  }
  bool failed() const { return failed_; }

 private:
  using error_code = boost::system::error_code;
  static void rethrow(std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  }

  asio::awaitable<void> accept_loop() {
    while (limit_ == 0 || accepted_ < limit_) {
      auto [ec, s] = co_await cli::accept_next(acceptor_, [](const auto&... parts) { say(parts...); });
      if (ec == asio::error::operation_aborted) co_return;  // stop() closed the acceptor
      if (ec) {
        say("accept failed: ", ec.message());
        failed_ = true;
        stop("error");
        co_return;
      }
      const std::size_t id = ++accepted_;
      say("[", id, "] ", s.remote_endpoint(), " connected over ", cli::name(s.transport_in_use()));
      // Registered before the session starts, so stop() and finish_if_idle() see it at once.
      live_.emplace(id, std::move(s));
      asio::co_spawn(acceptor_.get_executor(), session(id), rethrow);
    }
    acceptor_.close();
    finish_if_idle();
  }

  asio::awaitable<void> session(std::size_t id) {
    coverbs::socket& s = live_.at(id);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::byte> data(64 * 1024);
    std::uint64_t echoed = 0;
    error_code ec;
    while (!ec) {
      std::size_t n = 0;
      std::tie(ec, n) = co_await s.async_read_some(asio::buffer(data), asio::as_tuple(asio::use_awaitable));
      if (!ec) {
        std::tie(ec, n) =
            co_await asio::async_write(s, asio::buffer(data.data(), n), asio::as_tuple(asio::use_awaitable));
        echoed += n;
      }
    }
    live_.erase(id);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const std::string why = ec == asio::error::eof ? "client closed"
                            : stopping_            ? "server stopping"
                                                   : "error: " + ec.message();
    say("[", id, "] closed: echoed ", echoed, " bytes in ", ms.count(), " ms (", why, ")");
    finish_if_idle();
  }

  void stop(const char* why) {
    if (stopping_) return;
    stopping_ = true;
    say("stopping (", why, "), closing ", live_.size(), " connection(s)");
    acceptor_.close();
    for (auto& entry : live_) entry.second.close();  // sessions end with operation_aborted
    finish_if_idle();
  }

  // Done when no more connections will come and the last one has ended; the signal wait is
  // the only thing left that would keep io_context::run() going.
  void finish_if_idle() {
    if (live_.empty() && (stopping_ || (limit_ != 0 && accepted_ == limit_))) {
      cli::release_signals(signals_);
      if (!reported_) say("served ", accepted_, " connection(s)");
      reported_ = true;
    }
  }

  coverbs::acceptor acceptor_;
  asio::signal_set signals_;
  std::map<std::size_t, coverbs::socket> live_;  // a map: sessions hold references into it
  std::size_t limit_, accepted_ = 0;
  coverbs::transport kind_;  ///< as asked: automatic, or one transport only
  bool stopping_ = false, failed_ = false, reported_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  return cli::run_server<server>(program, parse(argc, argv));
}
