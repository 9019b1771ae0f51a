// file_server: serves a directory to file_client, which sends files into it and fetches
// files from it, over RDMA and TCP on one port; one coroutine per connection.
#include <sys/stat.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <coverbs/coverbs.hpp>
#include <csignal>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "disk.hpp"
#include "part_file.hpp"
#include "progress.hpp"
#include "receiver.hpp"
#include "sender.hpp"
#include "tuning.hpp"

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view program = "file_server";
constexpr std::string_view usage =
    "usage: file_server --dir DIR [--listen ADDR] [--port N] [--transport auto|rdma|tcp]\n"
    "                   [--window N] [--slot-size BYTES] [--timeout SECONDS] [--connections N]\n"
    "                   [--send-memory BYTES]\n"
    "Serves the files of DIR to file_client, which sends files into it and fetches files from it.\n"
    "  --dir DIR          the directory; names are plain file names in it (no '/', no leading\n"
    "                     '.', no control characters; a symbolic link in it is followed). A file\n"
    "                     being received is written as .NAME.part-XXXXXX and renamed to NAME,\n"
    "                     replacing any file of that name, once its size and checksum match\n"
    "                     (a server killed mid-transfer leaves its .part file, which the next\n"
    "                     one names when it starts)\n"
    "  --listen ADDR      IPv4 or IPv6 address to listen on (default 0.0.0.0); RDMA clients need\n"
    "                     the address of an RDMA device, not 127.0.0.1\n"
    "  --port N           port, 0 to let the system pick one (default 7001)\n"
    "  --transport T      auto: RDMA and TCP (default); rdma or tcp: that one only\n"
    "  --window N         slots of the window each connection receives into, at most: a\n"
    "                     smaller file gets fewer, and smaller ones (default 8)\n"
    "  --slot-size BYTES  bytes per slot, K and M allowed (default 1M)\n"
    "  --send-memory BYTES\n"
    "                     most memory one connection sends a file from, whatever window the\n"
    "                     client offers: fewer or smaller buffers then (default 64M; K and M\n"
    "                     allowed). Never more than the file needs\n"
    "  --timeout SECONDS  drop a client that shows no sign of life for this long (default 30)\n"
    "  --connections N    exit after serving N connections (default 0: until SIGINT or SIGTERM)\n"
    "Each transfer is checked with the checksum the client asks for (file_client --checksum:\n"
    "xxh128 or sha256), which the line that reports it names.\n"
    "Prints 'listening on ADDR:PORT (TRANSPORTS)' first, then a line when a connection opens or\n"
    "closes and when a transfer ends or fails.\n";

struct options : ft::tuning {
  fs::path dir;
  std::size_t send_memory = ft::default_send_memory;
  asio::ip::address listen = asio::ip::address_v4::any();
  std::uint16_t port = 7001;
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
    } else if (ft::parse_tuning(args, arg, o)) {  // taken
    } else if (arg == "--dir") {
      o.dir = args.value();
    } else if (arg == "--send-memory") {
      o.send_memory = args.number_value(4096, std::size_t{1} << 40);
    } else if (cli::server_option(args, arg, o)) {  // taken
    } else {
      args.unknown();
    }
  }
  if (o.dir.empty()) cli::usage_error(program, "--dir DIR is required");
  std::error_code ec;
  if (!fs::is_directory(o.dir, ec)) {
    std::cerr << program << ": " << o.dir.string() << " is not a directory\n";
    std::exit(1);
  }
  return o;
}

// Whole lines, flushed at once: a script reading the port from a pipe must not wait.
template <class... Parts>
void say(const Parts&... parts) {
  std::ostringstream line;
  ((line << program << ": ") << ... << parts) << '\n';
  std::cout << line.str() << std::flush;
}

using ft::transfer_error;
using origin = ft::transfer_error::origin;

// What a name ft::valid_name refuses is told.
const std::string not_a_plain_name = "not a plain file name (no '/', no leading '.', no control characters)";

class server {
 public:
  server(asio::io_context& io, const options& o, ft::disk& disk)
      : disk_(disk),
        opt_(o),
        acceptor_(io, {o.listen, o.port}, {.kind = o.kind}),
        signals_(io, SIGINT, SIGTERM) {}

  void start() {
    cli::announce([](const auto&... parts) { say(parts...); }, acceptor_, opt_.kind, ", serving ",
                  opt_.dir.string());
    // Told, not removed: another server may be receiving them into the same directory.
    if (const auto parts = ft::part_names(opt_.dir); !parts.empty()) {
      constexpr std::size_t shown = 10;
      std::string names;
      for (std::size_t i = 0; i < std::min(parts.size(), shown); ++i)
        names += (i == 0 ? "" : ", ") + ft::printable(parts[i]);
      if (parts.size() > shown) names += " and " + std::to_string(parts.size() - shown) + " more";
      say(parts.size(), " partial file(s) of interrupted transfers in ", opt_.dir.string(), ": ", names,
          " (remove them once no server receives into it)");
    }
    asio::co_spawn(acceptor_.get_executor(), accept_loop(), rethrow);
    signals_.async_wait([this](boost::system::error_code ec, int signal) {
      if (!ec) stop(signal == SIGINT ? "SIGINT" : "SIGTERM");
    });
  }
  bool failed() const { return failed_; }

 private:
  struct connection {
    connection(coverbs::socket s, const options& o)
        : socket(std::move(s)),
          ch(socket, "client", o.timeout),
          out(ch, o.send_memory),
          in(ch, o.slots, o.slot_size) {}
    coverbs::socket socket;
    ft::channel ch;
    ft::sender out;
    ft::receiver in;
  };

  static void rethrow(std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  }

  asio::awaitable<void> accept_loop() {
    while (opt_.connections == 0 || accepted_ < opt_.connections) {
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
      live_.emplace(std::piecewise_construct, std::forward_as_tuple(id),
                    std::forward_as_tuple(std::move(s), opt_));
      asio::co_spawn(acceptor_.get_executor(), session(id), rethrow);
    }
    acceptor_.close();
    finish_if_idle();
  }

  asio::awaitable<void> session(std::size_t id) {
    connection& c = live_.at(id);
    std::string why = "client closed";
    try {
      while (auto request = co_await c.ch.next()) {
        if (request->kind == ft::type::put) {
          co_await receive(id, c, request->text, request->size, request->check);
        } else if (request->kind == ft::type::get) {
          co_await send(id, c, request->text, request->check);
        } else {
          throw transfer_error(origin::connection, "the client broke the protocol");
        }
      }
    } catch (const transfer_error& e) {
      why = stopping_ ? "server stopping" : e.what();
    } catch (const std::exception& e) {  // one connection's trouble, not the server's
      why = "error: " + cli::describe(e);
    }
    live_.erase(id);
    say("[", id, "] closed (", why, ")");
    finish_if_idle();
  }

  // A request refused before any data moved: the connection goes on.
  asio::awaitable<void> refuse(std::size_t id, connection& c, const std::string& what,
                               const std::string& why) {
    say("[", id, "] refused ", what, ": ", why);
    co_await c.ch.send(ft::msg::error(why));
  }

  // What a failed transfer leaves: the peer told if the failure is this side's, the
  // connection ended (the data in flight cannot be told from the next request's).
  asio::awaitable<void> end(std::size_t id, connection& c, const std::string& what, const transfer_error& e) {
    say("[", id, "] ", what, " failed: ", e.what());
    if (e.from() == origin::local) co_await c.ch.give_up(e.what());
    throw transfer_error(e.from(), what + " failed");
  }

  asio::awaitable<void> receive(std::size_t id, connection& c, const std::string& name, std::uint64_t size,
                                ft::checksum_kind check) {
    if (!ft::valid_name(name)) {
      co_return co_await refuse(id, c, "'" + ft::printable(name) + "'", not_a_plain_name);
    }
    std::optional<ft::part_file> part;
    std::string cannot;
    try {
      part.emplace(disk_.executor(), opt_.dir, name, size);
    } catch (const std::system_error& e) {
      cannot = e.what();
    }
    if (!part) co_return co_await refuse(id, c, name, cannot);
    std::optional<transfer_error> failure;
    try {
      co_await c.ch.send(ft::msg::ready(c.in.offer(size)));
      const auto start = std::chrono::steady_clock::now();
      const ft::digest sum = co_await c.in.receive(part->file(), size, name, check, [](std::uint64_t) {});
      try {
        co_await c.ch.keep_peer_waiting(part->commit(blocking_.get_executor()));
      } catch (const std::system_error& e) {
        throw transfer_error(origin::local, e.what());
      }
      co_await c.ch.send(ft::msg::ok());
      say("[", id, "] received ", name, ": ", ft::summary(size, start, sum));
    } catch (const transfer_error& e) {
      failure = e;
    }
    if (failure) {
      part.reset();  // no file that looks whole: the temporary one goes at once
      co_await end(id, c, "receiving " + name, *failure);
    }
  }

  asio::awaitable<void> send(std::size_t id, connection& c, const std::string& name,
                             ft::checksum_kind check) {
    if (!ft::valid_name(name)) {
      co_return co_await refuse(id, c, "'" + ft::printable(name) + "'", not_a_plain_name);
    }
    const fs::path path = opt_.dir / name;
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (!fs::exists(status)) co_return co_await refuse(id, c, name, "no such file: " + name);
    if (!fs::is_regular_file(status)) co_return co_await refuse(id, c, name, name + " is not a regular file");
    asio::random_access_file file(disk_.executor());
    boost::system::error_code open_ec;
    file.open(path.string(), asio::file_base::read_only, open_ec);
    if (open_ec) co_return co_await refuse(id, c, name, "cannot read " + name + ": " + open_ec.message());
    const std::uint64_t size = file.size();

    std::optional<transfer_error> failure;
    try {
      co_await c.ch.send(ft::msg::file(size));
      // The client's window, unless set otherwise.
      c.out.prepare(ft::tuning{}.slots, ft::tuning{}.slot_size, size);
      const ft::message reply = co_await c.ch.receive();
      if (reply.kind == ft::type::error) {  // the client cannot store it: its own problem
        say("[", id, "] the client refused ", name, ": ", reply.text);
        co_return;
      }
      if (reply.kind != ft::type::ready)
        throw transfer_error(origin::connection, "the client broke the protocol");
      const auto start = std::chrono::steady_clock::now();
      const ft::digest sum = co_await c.out.send(file, size, name, reply.area, check, [](std::uint64_t) {});
      say("[", id, "] sent ", name, ": ", ft::summary(size, start, sum));
    } catch (const transfer_error& e) {
      failure = e;
    }
    if (failure) co_await end(id, c, "sending " + name, *failure);
  }

  void stop(const char* why) {
    if (stopping_) return;
    stopping_ = true;
    say("stopping (", why, "), closing ", live_.size(), " connection(s)");
    acceptor_.close();
    for (auto& entry : live_) entry.second.ch.abort("the server is stopping");
    finish_if_idle();
  }

  // Done when no more connections will come and the last one has ended; the signal wait is
  // the only thing left that would keep io_context::run() going.
  void finish_if_idle() {
    if (live_.empty() && (stopping_ || (opt_.connections != 0 && accepted_ == opt_.connections))) {
      cli::release_signals(signals_);
      if (!reported_) say("served ", accepted_, " connection(s)");
      reported_ = true;
    }
  }

  ft::disk& disk_;  // where the files are read and written
  options opt_;
  coverbs::acceptor acceptor_;
  asio::signal_set signals_;
  asio::thread_pool blocking_{1};           // fdatasync, which io_uring-backed files lack
  std::map<std::size_t, connection> live_;  // a map: sessions hold references into it
  std::size_t accepted_ = 0;
  bool stopping_ = false, failed_ = false, reported_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  ft::disk disk;  // outlives the server's io_context and the coroutines a failed run leaves there
  return cli::run_server<server>(program, opt, disk);
}
