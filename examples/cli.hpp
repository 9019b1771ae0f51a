// Helpers shared by the example programs: options they have in common (transport, addresses,
// the servers' --listen and --port) and servers' accept loops. Reading a command line is
// command_line.hpp's.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <coverbs/acceptor.hpp>
#include <coverbs/socket.hpp>
#include <cstdlib>
#include <iostream>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "command_line.hpp"

namespace cli {

inline std::optional<coverbs::transport> transport(std::string_view text) {
  if (text == "auto") return coverbs::transport::automatic;
  if (text == "rdma") return coverbs::transport::rdma;
  if (text == "tcp") return coverbs::transport::tcp;
  return {};
}

inline std::string_view name(coverbs::transport t) {
  switch (t) {
    case coverbs::transport::rdma: return "rdma";
    case coverbs::transport::tcp: return "tcp";
    case coverbs::transport::automatic: break;
  }
  return "auto";
}

/// A server's --listen: numeric only, since a server listens on one of its own addresses (and
/// RDMA on a device's). Clients take host names too (server_target.hpp).
inline std::optional<boost::asio::ip::address> address(std::string_view text) {
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(std::string(text), ec);
  if (ec) return {};
  return a;
}

/// The reason alone, without the source location Boost adds to what().
inline std::string describe(const std::exception& e) {
  if (auto* b = dynamic_cast<const boost::system::system_error*>(&e)) return b->code().message();
  if (auto* s = dynamic_cast<const std::system_error*>(&e)) return s->code().message();
  return e.what();
}

/// The options every server takes: --listen ADDR, --port N and, where `Options` has a
/// `connections` limit, --connections N. True if `arg` was one of them (its value is taken).
template <class Options>
bool server_option(arguments& args, std::string_view arg, Options& o) {
  if (arg == "--listen") {
    const auto a = address(args.value());
    if (!a) args.bad_value("an IPv4 or IPv6 address");
    o.listen = *a;
  } else if (arg == "--port") {
    const auto p = number(args.value(), 0, 65535);
    if (!p) args.bad_value("a port number from 0 to 65535");
    o.port = static_cast<std::uint16_t>(*p);
  } else if constexpr (requires { o.connections; }) {
    if (arg != "--connections") return false;
    const auto n = number(args.value(), 0, 1'000'000'000);
    if (!n) args.bad_value("a number of connections (0: no limit)");
    o.connections = *n;
  } else {
    return false;
  }
  return true;
}

/// A server program's main after parsing: constructs `Server(io, opt, extra...)` (a failure
/// there is "cannot listen on ...", or "not enough memory"), calls `start()`, runs the context until it
/// stops, and returns the exit status: 1 if construction or the run failed, or if `failed()` says so. `extra`
/// outlives the context, and with it any coroutine a failed run leaves suspended.
template <class Server, class Options, class... Extra>
int run_server(std::string_view program, const Options& opt, Extra&... extra) {
  try {
    boost::asio::io_context io;
    std::optional<Server> s;
    try {
      s.emplace(io, opt, extra...);
    } catch (const std::bad_alloc&) {  // the sizes asked for passed their checks, not this machine's
      std::cerr << program << ": not enough memory for the sizes asked for (see --help)\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << program << ": cannot listen on " << boost::asio::ip::tcp::endpoint(opt.listen, opt.port)
                << " (" << name(opt.kind) << "): " << describe(e) << "\n";
      return 1;
    }
    s->start();
    io.run();
    return s->failed() ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << describe(e) << "\n";
    return 1;
  }
}

/// A server's first lines: "listening on ADDR:PORT (rdma, tcp)" followed by `extra`, then, when
/// it was to serve both transports but no RDMA device serves its address, that only TCP
/// clients can connect. `say(parts...)` prints a line.
template <class Say, class... Extra>
void announce(Say say, const coverbs::acceptor& a, coverbs::transport asked, const Extra&... extra) {
  std::string kinds = a.accepts_rdma() ? "rdma" : "";
  if (a.accepts_tcp()) kinds += kinds.empty() ? "tcp" : ", tcp";
  say("listening on ", a.local_endpoint(), " (", kinds, ")", extra...);
  if (asked == coverbs::transport::automatic && !a.accepts_rdma()) {
    say("no RDMA device serves this address: TCP clients only");
  }
}

/// How often a client checks its timeout and progress: ten times a second, so that a timeout
/// comes a fraction of a second late, not a whole one.
inline constexpr std::chrono::milliseconds tick_period{100};

/// Whether a client's next progress line is due, `shown_at` being the last one's time: each
/// second on a terminal; elsewhere every five, on stderr, where a log shows a long run moving
/// without the lines a script reads from stdout changing. With a little slack, since the ticks
/// drift a little behind whole tenths.
inline bool progress_due(bool terminal, std::chrono::steady_clock::time_point now,
                         std::chrono::steady_clock::time_point shown_at) {
  const auto every = terminal ? std::chrono::seconds(1) : std::chrono::seconds(5);
  return now - shown_at >= every - tick_period / 2;
}

/// Stops waiting for SIGINT and SIGTERM once a program has nothing left to stop, so that
/// `io_context::run` can return, and gives the signals back their default action: should the
/// rest of the shutdown stall, a signal still ends the program instead of being caught by a
/// handler that no longer runs.
inline void release_signals(boost::asio::signal_set& signals) {
  boost::system::error_code ignored;
  signals.cancel(ignored);
  signals.clear(ignored);
}

/// Whether an accept failed for want of descriptors or memory, in the process or the system:
/// the connection waits in the listen backlog, and accepting again later may succeed.
inline bool out_of_resources(const boost::system::error_code& ec) {
  namespace error = boost::asio::error;
  return ec == error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
         ec == error::no_buffer_space || ec == error::no_memory;
}

/// A server's next connection. Clients that gave up before being accepted are passed over.
/// Out of descriptors or memory, the server says so (`say(parts...)`, once per call) and tries
/// again every 100 ms: exiting there would drop every connection it serves, and each one that
/// ends makes room for the next. Any other error is returned, operation_aborted once the
/// acceptor is closed (also during a pause).
template <class Say>
boost::asio::awaitable<std::tuple<boost::system::error_code, coverbs::socket>> accept_next(
    coverbs::acceptor& acceptor, Say say) {
  namespace asio = boost::asio;
  bool short_of_resources = false;
  for (;;) {
    auto [ec, s] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::connection_aborted) continue;
    if (!out_of_resources(ec)) co_return std::tuple{ec, std::move(s)};
    if (!std::exchange(short_of_resources, true)) {
      say("accept failed: ", ec.message(), "; new connections wait until some end");
    }
    asio::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(100));
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    // Stopped meanwhile: a closed acceptor would answer bad_descriptor, not a stop.
    if (!acceptor.is_open())
      co_return std::tuple{boost::system::error_code(asio::error::operation_aborted), std::move(s)};
  }
}

}  // namespace cli
