// kv_server: a key-value cache in registered memory. Clients GET by reading a slot with RDMA
// READ (no server CPU involved) or by request; PUT and DELETE are requests. Serves RDMA and
// TCP clients on one port. Run kv_client against it.
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <coverbs/coverbs.hpp>
#include <csignal>
#include <map>
#include <sstream>

#include "cli.hpp"
#include "kv_protocol.hpp"
#include "kv_table.hpp"

namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

constexpr std::string_view program = "kv_server";
constexpr std::string_view usage =
    "usage: kv_server [--listen ADDR] [--port N] [--transport auto|rdma|tcp] [--slots N]\n"
    "                 [--max-key BYTES] [--max-value BYTES] [--probes N] [--write-window-us N]\n"
    "Serves a key-value cache from a hash table in registered memory, over RDMA and TCP on one\n"
    "port. Clients read slots directly (one-sided GET) or send get, put and delete requests.\n"
    "  --listen ADDR         address to listen on (default 0.0.0.0); RDMA clients need the\n"
    "                        address of an RDMA device, not 127.0.0.1\n"
    "  --port N              port, 0 to let the system pick one (default 7100)\n"
    "  --transport T         auto: RDMA and TCP (default); rdma or tcp: that one only\n"
    "  --slots N             slots in the table (default 4096)\n"
    "  --max-key BYTES       longest key (default 64, at most 1024)\n"
    "  --max-value BYTES     longest value (default 1024, at most 60000)\n"
    "  --probes N            slots a key may occupy: linear probing from its hash (default 8)\n"
    "  --write-window-us N   keep each slot being written open (odd version) for N us between\n"
    "                        the halves of its value, so that tests see reads race writes\n"
    "                        (default 0)\n"
    "Prints 'listening on ADDR:PORT (TRANSPORTS)' first, then a line when each connection\n"
    "opens and closes. A malformed request closes its connection.\n";

struct options {
  asio::ip::address listen = asio::ip::address_v4::any();
  std::uint16_t port = 7100;
  coverbs::transport kind = coverbs::transport::automatic;
  kv::layout table;
  std::chrono::microseconds window{0};
};

options parse(int argc, char** argv) {
  options o;
  cli::arguments args(program, argc, argv);
  auto count = [&](std::size_t low, std::size_t high, const char* what) {
    const auto n = cli::number(args.value(), low, high);
    if (!n) args.bad_value(what);
    return *n;
  };
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
    } else if (arg == "--slots") {
      o.table.slots = static_cast<std::uint32_t>(count(1, 1 << 24, "a number of slots from 1 to 16777216"));
    } else if (arg == "--max-key") {
      o.table.max_key = static_cast<std::uint16_t>(count(1, 1024, "a number of bytes from 1 to 1024"));
    } else if (arg == "--max-value") {
      o.table.max_value = static_cast<std::uint32_t>(count(1, 60000, "a number of bytes from 1 to 60000"));
    } else if (arg == "--probes") {
      o.table.probe_limit = static_cast<std::uint32_t>(count(1, 1024, "a number from 1 to 1024"));
    } else if (arg == "--write-window-us") {
      o.window = std::chrono::microseconds(count(0, 1'000'000, "microseconds from 0 to 1000000"));
    } else {
      args.unknown();
    }
  }
  // A remote_buffer's length is 32 bits.
  if (o.table.table_size() > 0xffffffffu) {
    cli::usage_error(program, "the table would exceed 4 GiB: " + std::to_string(o.table.slots) +
                                  " slots of " + std::to_string(o.table.slot_size()) +
                                  " bytes; use fewer --slots or a smaller --max-value");
  }
  return o;
}

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
        table_(o.table),
        window_(o.window),
        lock_(io, 1),
        kind_(o.kind) {}

  void start() {
    cli::announce([](const auto&... parts) { say(parts...); }, acceptor_, kind_);
    const auto& t = table_.geometry();
    say("table: ", t.slots, " slots of ", t.slot_size(), " bytes (keys up to ", t.max_key, ", values up to ",
        t.max_value, " bytes, ", t.probe_limit, " probes)");
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
    for (;;) {
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
      live_.emplace(id, std::move(s));
      asio::co_spawn(acceptor_.get_executor(), session(id),
                     [this, id](std::exception_ptr e, std::string why) {
                       if (e) {
                         try {
                           std::rethrow_exception(e);
                         } catch (const std::exception& x) {
                           why = "error: " + cli::describe(x);
                         }
                       }
                       live_.erase(id);
                       say("[", id, "] closed: ", why);
                       finish_if_idle();
                     });
    }
  }

  // Returns why the connection ended.
  asio::awaitable<std::string> session(std::size_t id) {
    coverbs::socket& s = live_.at(id);
    // Each connection has its own protection domain, so the table is registered once per
    // connection; the key in the hello works on this connection only.
    const auto region = s.register_memory(table_.memory(), coverbs::verbs::access::remote_read);
    const auto hello = kv::encode(kv::hello{table_.geometry(), region.remote()});
    if (auto [ec, n] = co_await s.async_send(asio::buffer(hello), asio::as_tuple(asio::use_awaitable)); ec) {
      co_return "no hello sent: " + co_await failure(s, ec);
    }

    const auto& t = table_.geometry();
    std::vector<std::byte> in(kv::request_header_size + t.max_key + t.max_value);
    std::size_t requests = 0;
    error_code ec;
    while (!ec) {
      std::size_t n = 0;
      std::string why;
      std::tie(ec, n) = co_await s.async_receive(asio::buffer(in), asio::as_tuple(asio::use_awaitable));
      if (ec == asio::error::message_size) {
        why = "request larger than the largest valid one (" + std::to_string(in.size()) + " bytes)";
      } else if (ec) {
        break;
      }
      const auto request = ec ? std::nullopt : kv::parse_request(std::span(in).first(n), t, why);
      if (!request) {
        say("[", id, "] malformed request: ", why, "; closing the connection");
        co_await refuse(s, why);
        co_return "malformed request after " + std::to_string(requests) + " request(s)";
      }
      ++requests;
      const auto reply = co_await apply(*request);
      std::tie(ec, n) = co_await s.async_send(asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
    }
    co_return std::to_string(requests) + " request(s) (" + ending(ec) + ")";
  }

  // Why a connection ended, from the error that ended it.
  std::string ending(error_code ec) const {
    if (ec == asio::error::eof) return "client closed";
    return stopping_ ? "server stopping" : "error: " + ec.message();
  }

  // Why a connection failed, given a send's error: that says only broken_pipe, and a receive on
  // the failed connection ends at once with the cause (a client that is not a kv_client sends
  // what reads as a malformed frame).
  asio::awaitable<std::string> failure(coverbs::socket& s, error_code send_error) const {
    if (stopping_) co_return "server stopping";  // stop() closed the socket
    std::array<std::byte, 1> probe;
    const auto [ec, n] = co_await s.async_receive(asio::buffer(probe), asio::as_tuple(asio::use_awaitable));
    co_return ending(ec ? ec : send_error);
  }

  // Tells the client why, then lets it close first (a socket closed at once may drop what it
  // just sent); a client that does not is cut off after two seconds.
  asio::awaitable<void> refuse(coverbs::socket& s, const std::string& why) {
    const auto reply = kv::encode(kv::response{kv::status::malformed, kv::wire::bytes(why)});
    auto [ec, n] = co_await s.async_send(asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    s.shutdown(asio::socket_base::shutdown_send);
    asio::steady_timer limit(s.get_executor(), std::chrono::seconds(2));
    std::array<std::byte, 256> discard;
    for (;;) {
      auto result = co_await (s.async_receive(asio::buffer(discard), asio::as_tuple(asio::use_awaitable)) ||
                              limit.async_wait(asio::as_tuple(asio::use_awaitable)));
      if (result.index() == 1 || std::get<0>(std::get<0>(result))) break;
    }
    s.close();
  }

  // Requests take turns on the table: with a write window a put yields half way through, and
  // nothing else may touch the table until it commits.
  asio::awaitable<std::vector<std::byte>> apply(const kv::request& r) {
    co_await lock_.async_send(error_code(), asio::use_awaitable);
    struct unlock {
      decltype(lock_)& l;
      ~unlock() {
        l.try_receive([](error_code) {});
      }
    } guard{lock_};

    const auto index = r.op == kv::op::put ? table_.place_for(r.key) : table_.find(r.key);
    if (!index) {
      const auto missing = r.op == kv::op::put ? kv::status::table_full : kv::status::not_found;
      co_return kv::encode(kv::response{missing, {}});
    }
    if (r.op == kv::op::get) co_return kv::encode(kv::response{kv::status::ok, table_.view(*index).value});

    table_.open(*index);
    if (r.op == kv::op::del) {
      table_.fill(*index, kv::slot_state::deleted, {}, {}, 0, 0);
    } else {
      const std::size_t half = r.value.size() / 2;
      table_.fill(*index, kv::slot_state::live, r.key, r.value, 0, half);
      if (window_.count() > 0) {
        asio::steady_timer wait(lock_.get_executor(), window_);
        co_await wait.async_wait(asio::as_tuple(asio::use_awaitable));
      }
      table_.fill(*index, kv::slot_state::live, r.key, r.value, half, r.value.size());
    }
    table_.commit(*index);
    co_return kv::encode(kv::response{kv::status::ok, {}});
  }

  void stop(const char* why) {
    if (stopping_) return;
    stopping_ = true;
    say("stopping (", why, "), closing ", live_.size(), " connection(s)");
    acceptor_.close();
    for (auto& entry : live_) entry.second.close();  // sessions end with operation_aborted
    finish_if_idle();
  }

  // Once stopping and the last connection has ended; the signal wait is the only thing left
  // that would keep io_context::run() going.
  void finish_if_idle() {
    if (!stopping_ || !live_.empty() || reported_) return;
    cli::release_signals(signals_);
    say("served ", accepted_, " connection(s)");
    reported_ = true;
  }

  coverbs::acceptor acceptor_;
  asio::signal_set signals_;
  kv::table table_;
  std::chrono::microseconds window_;
  asio::experimental::channel<void(error_code)> lock_;  // one token: held while a request runs
  coverbs::transport kind_;                             // as asked: automatic, or one only
  std::map<std::size_t, coverbs::socket> live_;         // a map: sessions hold references into it
  std::size_t accepted_ = 0;
  bool stopping_ = false, failed_ = false, reported_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  return cli::run_server<server>(program, parse(argc, argv));
}
