// file_client: sends files to a file_server or fetches files from it, each checked end to
// end (XXH3-128 or SHA-256), with a progress bar on a terminal.
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <coverbs/coverbs.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "../server_target.hpp"
#include "disk.hpp"
#include "part_file.hpp"
#include "progress.hpp"
#include "receiver.hpp"
#include "send_list.hpp"
#include "sender.hpp"
#include "tuning.hpp"

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view program = "file_client";
constexpr std::string_view usage =
    "usage: file_client --connect HOST[:PORT] [--port N] [options] send FILE... [--as NAME]\n"
    "       file_client --connect HOST[:PORT] [--port N] [options] fetch NAME... [--to DIR]\n"
    "Sends files to a file_server, or fetches files from it, checking each end to end.\n"
    "  send FILE...       sends each FILE under its own name (a directory: its regular files,\n"
    "                     hidden ones aside); the server stores it under that name\n"
    "  --as NAME          with a single FILE: the name to store it under\n"
    "  fetch NAME...      fetches each NAME into DIR, replacing a file of that name; it is\n"
    "                     written as .NAME.part-XXXXXX and renamed once size and checksum match\n"
    "  --to DIR           where fetched files go (default: the current directory)\n"
    "  --connect HOST[:PORT]\n"
    "                     the server, by address or host name (IPv6 with a port: [ADDR]:PORT);\n"
    "                     RDMA needs the address of an RDMA device, not loopback\n"
    "  --port N           the server's port, when --connect gives none (default 7001)\n"
    "  --transport T      auto: RDMA where possible, else TCP (default); rdma or tcp: only that\n"
    "  --checksum C       xxh128 (default; as xxh128sum prints it) or sha256 (as sha256sum does)\n"
    "  --window N         when fetching, slots of the window to receive into, at most: a\n"
    "                     smaller file gets fewer, and smaller ones (default 8)\n"
    "  --slot-size BYTES  when fetching, bytes per slot, K and M allowed (default 1M)\n"
    "  --timeout SECONDS  give up when connecting takes longer, or the server shows no sign of\n"
    "                     life for this long (default 30)\n"
    "Shows a progress bar on a terminal (elsewhere a line every 10%) and a summary line per file.\n"
    "Stops at the first failure. Exit status: 0 when every file went through, 1 on a failure,\n"
    "2 for bad usage.\n";

struct options : ft::tuning {
  cli::server_target server{7001};
  bool fetch = false;
  std::vector<std::string> operands;
  std::optional<std::string> as;
  fs::path to = ".";
  ft::checksum_kind check = ft::checksum_kind::xxh128;
};

options parse(int argc, char** argv) {
  options o;
  bool have_command = false, have_to = false, only_operands = false;
  cli::arguments args(program, argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (only_operands || arg.empty() || arg[0] != '-') {
      if (have_command) {
        o.operands.emplace_back(arg);
      } else if (arg == "send" || arg == "fetch") {
        have_command = true;
        o.fetch = arg == "fetch";
      } else {
        cli::usage_error(program, "unknown command '" + std::string(arg) + "' (send or fetch)");
      }
    } else if (arg == "--") {
      only_operands = true;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (ft::parse_tuning(args, arg, o)) {           // taken
    } else if (cli::client_option(args, arg, o.server)) {  // taken
    } else if (arg == "--checksum") {
      const auto c = ft::checksum_named(args.value());
      if (!c) args.bad_value("xxh128 or sha256");
      o.check = *c;
    } else if (arg == "--as") {
      o.as = args.value();
    } else if (arg == "--to") {
      o.to = args.value();
      have_to = true;
    } else {
      cli::usage_error(program, "unknown option '" + std::string(arg) + "'");
    }
  }
  cli::check_target(program, o.server);
  if (!have_command) cli::usage_error(program, "say what to do: send FILE... or fetch NAME...");
  if (o.operands.empty()) cli::usage_error(program, o.fetch ? "fetch needs a NAME" : "send needs a FILE");
  if (o.as && (o.fetch || o.operands.size() != 1))
    cli::usage_error(program, "--as goes with send and one FILE");
  if (have_to && !o.fetch) cli::usage_error(program, "--to goes with fetch");
  return o;
}

void say(const std::string& line) {
  std::cout << program << ": " << line << std::endl;
}

using ft::transfer_error;
using origin = ft::transfer_error::origin;

class client {
 public:
  client(asio::io_context& io, ft::disk& disk, const options& o, std::vector<ft::send_item> items)
      : io_(io),
        disk_(disk),
        opt_(o),
        items_(std::move(items)),
        socket_(io, {.kind = o.kind}),
        signals_(io, SIGINT, SIGTERM),
        connect_timer_(io) {}

  void start() {
    asio::co_spawn(io_, run(), [this](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          fail(cli::describe(x));
        }
      }
      ch_ = nullptr;
      cli::release_signals(signals_);
    });
    signals_.async_wait([this](boost::system::error_code ec, int signal) {
      if (ec) return;
      const std::string why = std::string("interrupted by ") + (signal == SIGINT ? "SIGINT" : "SIGTERM");
      if (ch_) return ch_->abort(why);
      fail(why);
      io_.stop();  // a connect in progress cannot be cancelled
    });
  }
  const std::string& error() const { return error_; }

 private:
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }

  asio::awaitable<void> run() {
    const std::string server = opt_.server.text();
    connect_timer_.expires_after(opt_.timeout);
    connect_timer_.async_wait([this, server](boost::system::error_code ec) {
      // A tick already due when the connect completed runs without an error: see connected_.
      if (ec || connected_) return;
      std::ostringstream s;
      s << "cannot connect to " << server << ": no answer within " << opt_.timeout.count() << " s";
      fail(s.str());
      io_.stop();
    });
    auto [ec, endpoint] =
        co_await coverbs::async_connect(socket_, opt_.server.endpoints, asio::as_tuple(asio::use_awaitable));
    connected_ = true;
    connect_timer_.cancel();
    if (ec) {
      std::ostringstream s;
      s << "cannot connect to " << server;
      if (opt_.kind != coverbs::transport::automatic) s << " over " << cli::name(opt_.kind);
      s << ": " << ec.message();
      if (opt_.kind == coverbs::transport::rdma && opt_.server.loopback()) {
        s << " (RDMA needs the address of an RDMA device, not loopback)";
      }
      co_return fail(s.str());
    }
    std::ostringstream s;
    s << "connected to " << endpoint << " over " << cli::name(socket_.transport_in_use());
    say(s.str());

    ft::channel ch(socket_, "server", opt_.timeout);
    ch_ = &ch;
    ft::sender out(ch);
    ft::receiver in(ch, opt_.slots, opt_.slot_size);
    if (opt_.fetch) {
      for (const auto& name : opt_.operands) {
        if (!co_await fetch(ch, in, name)) break;
      }
    } else {
      for (const auto& it : items_) {
        if (!co_await send(ch, out, it)) break;
      }
    }
    // Also after a failure: an error message sent last must reach the server.
    co_await ch.finish();
    ch_ = nullptr;
  }

  // Runs one transfer; on failure reports it and tells the server when the failure is ours.
  template <class Transfer>
  asio::awaitable<bool> attempt(ft::channel& ch, const std::string& what, ft::progress& shown,
                                Transfer transfer) {
    std::optional<transfer_error> failure;
    try {
      co_await transfer();
      co_return true;
    } catch (const transfer_error& e) {
      failure = e;
    }
    shown.end_bar();
    fail("cannot " + what + ": " + failure->what());
    if (failure->from() == origin::local) co_await ch.give_up(failure->what());
    co_return false;
  }

  asio::awaitable<bool> send(ft::channel& ch, ft::sender& out, const ft::send_item& it) {
    asio::random_access_file file(disk_.executor());
    boost::system::error_code ec;
    file.open(it.path.string(), asio::file_base::read_only, ec);
    if (ec) {
      fail("cannot send " + it.path.string() + ": " + ec.message());
      co_return false;
    }
    const std::uint64_t size = file.size();
    if (size == 0 && ft::reads_past(file, 0)) {
      fail("cannot send " + it.path.string() + ": its size is not known in advance (like those of files in " +
           "/proc, it reads as more than the 0 bytes its size says); copy it to a regular file first");
      co_return false;
    }
    if (it.name.size() > ft::max_name) {  // the protocol cannot carry it: no server takes it
      fail("cannot send " + it.path.string() + ": its name is longer than " + std::to_string(ft::max_name) +
           " bytes");
      co_return false;
    }
    ft::progress shown(std::string(program), it.name, size, isatty(STDOUT_FILENO));
    co_return co_await attempt(ch, "send " + it.path.string(), shown, [&]() -> asio::awaitable<void> {
      co_await ch.send(ft::msg::put(it.name, size, opt_.check));
      // The server's window, unless set otherwise.
      out.prepare(ft::tuning{}.slots, ft::tuning{}.slot_size, size);
      const ft::message ready = co_await ch.expect(ft::type::ready);
      shown.start();
      const ft::digest sum = co_await out.send(file, size, it.path.string(), ready.area, opt_.check,
                                               [&](std::uint64_t done) { shown.update(done); });
      shown.finish("sent", sum);
    });
  }

  asio::awaitable<bool> fetch(ft::channel& ch, ft::receiver& in, const std::string& name) {
    if (name.size() > ft::max_name) {  // the protocol cannot carry it: no server has such a file
      fail("cannot fetch " + name + ": the name is longer than " + std::to_string(ft::max_name) + " bytes");
      co_return false;
    }
    ft::progress shown(std::string(program), name, 0, false);
    co_return co_await attempt(ch, "fetch " + name, shown, [&]() -> asio::awaitable<void> {
      // In this frame: a failure removes the temporary file before anything else happens.
      std::optional<ft::part_file> part;
      co_await ch.send(ft::msg::get(name, opt_.check));
      const ft::message file = co_await ch.expect(ft::type::file);
      std::string cannot;
      try {
        // The server vouches for nothing: a name it should have refused is refused here.
        if (!ft::valid_name(name)) throw std::runtime_error("not a plain file name: " + name);
        part.emplace(disk_.executor(), opt_.to, name, file.size);
      } catch (const std::exception& e) {
        cannot = e.what();
      }
      if (!part) {
        // Nothing moved yet: the server, told, stays in step (so, no giving up).
        co_await ch.send(ft::msg::error(cannot));
        throw transfer_error(origin::peer, cannot);
      }
      shown = ft::progress(std::string(program), name, file.size, isatty(STDOUT_FILENO));
      co_await ch.send(ft::msg::ready(in.offer(file.size)));
      shown.start();
      const ft::digest sum = co_await in.receive(part->file(), file.size, name, opt_.check,
                                                 [&](std::uint64_t done) { shown.update(done); });
      co_await commit(ch, *part);
      co_await ch.send(ft::msg::ok());
      shown.finish("fetched", sum);
    });
  }

  asio::awaitable<void> commit(ft::channel& ch, ft::part_file& part) {
    std::string cannot;
    try {
      co_await ch.keep_peer_waiting(part.commit(blocking_.get_executor()));
      co_return;
    } catch (const std::system_error& e) {
      cannot = e.what();
    }
    throw transfer_error(origin::local, cannot);
  }

  asio::io_context& io_;
  ft::disk& disk_;  // where the files are read and written
  options opt_;
  std::vector<ft::send_item> items_;
  coverbs::socket socket_;
  asio::signal_set signals_;
  asio::steady_timer connect_timer_;
  bool connected_ = false;         ///< the connect finished (with or without an error): no timeout
  asio::thread_pool blocking_{1};  // fdatasync, which io_uring-backed files lack
  ft::channel* ch_ = nullptr;
  std::string error_;
};

}  // namespace

int main(int argc, char** argv) {
  options opt = parse(argc, argv);
  cli::resolve(program, opt.server);
  std::vector<ft::send_item> items;
  if (std::error_code ec; opt.fetch && !fs::is_directory(opt.to, ec)) {  // before a connection costs anything
    std::cerr << program << ": cannot fetch into " << opt.to.string() << ": "
              << (ec ? ec.message() : "not a directory") << "\n";
    return 1;
  }
  if (!opt.fetch) {
    auto checked = ft::send_list(program, opt.operands, opt.as);
    if (!checked) return 1;
    items = std::move(*checked);
    if (items.empty()) {
      std::cerr << program << ": nothing to send: the directories hold no regular files\n";
      return 1;
    }
  }
  try {
    ft::disk disk;  // outlives the io_context and any coroutine a failed run leaves there
    asio::io_context io;
    client c(io, disk, opt, std::move(items));
    c.start();
    io.run();
    if (!c.error().empty()) {
      std::cerr << program << ": " << c.error() << std::endl;
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << cli::describe(e) << std::endl;
    return 1;
  }
}
