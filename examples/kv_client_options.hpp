// kv_client's command line: the usage text, the options and their checks. Bad input exits
// with status 2 and a pointer to --help (cli.hpp).
#pragma once

#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "kv_bench.hpp"
#include "kv_malformed.hpp"
#include "kv_stress.hpp"
#include "server_target.hpp"

namespace kv_client {

namespace asio = boost::asio;

constexpr std::string_view program = "kv_client";
constexpr std::string_view usage =
    "usage: kv_client --connect HOST[:PORT] [--port N] [--transport auto|rdma|tcp] [OPTIONS] [--] COMMAND\n"
    "Talks to a kv_server. Commands:\n"
    "  put KEY VALUE    stores VALUE under KEY\n"
    "  get KEY          prints KEY's value: reads its slot one-sided, and asks the server only\n"
    "                   after --retries torn reads of a slot (--two-sided: always asks)\n"
    "  del KEY          deletes KEY\n"
    "  bench            PUTs --keys keys, GETs them --ops times one-sided and --ops times by\n"
    "                   request, and prints both latencies (p50, p99 in us) and rates side by side\n"
    "  stress           --writers connections PUT self-checking values to --keys keys while\n"
    "                   --readers connections GET them one-sided, for --seconds; fails on any\n"
    "                   torn or wrong value, and reports how many torn reads were retried\n"
    "  bad-request KIND sends a malformed request (short, version, op, key-length, value-length,\n"
    "                   length, oversize) and checks that the server refuses it and disconnects\n"
    "Options:\n"
    "  --connect HOST[:PORT]\n"
    "                       the server, by address or host name (IPv6 with a port: [ADDR]:PORT);\n"
    "                       RDMA needs the address of an RDMA device, not loopback\n"
    "  --port N             the server's port, when --connect gives none (default 7100)\n"
    "  --transport T        auto: RDMA where possible, else TCP (default); rdma or tcp: only that\n"
    "  --two-sided          get: by request only\n"
    "  --retries N          torn reads of a slot before a GET asks the server (default 16)\n"
    "  --timeout SECONDS    give up when the server does not answer for this long (default 10)\n"
    "  --ops N, --keys N, --value-size BYTES     bench (2000, 100, 64) and stress (-, 8, 256)\n"
    "  --writers W, --readers R, --seconds S     stress (2, 2, 3)\n"
    "  --skip-version-check stress: accept slot copies without checking their versions, to show\n"
    "                       that torn reads happen: against a server whose writes stay open long\n"
    "                       enough to be caught (kv_server --write-window-us 200) the run then\n"
    "                       fails, reporting them\n"
    "  --                   ends the options: all that follows is the command and its arguments.\n"
    "                       Options are read after the command too (get --two-sided KEY), so a\n"
    "                       KEY or VALUE that begins with '-' goes after '--': put KEY -- -h\n"
    "                       stores '-h' (put KEY -h shows this help)\n"
    "bench and stress show their progress: each second on a terminal, elsewhere every 5 s on\n"
    "stderr. Latency percentiles are nearest rank (past a million GETs, of a random million).\n"
    "Exit status: 0 success, 1 not found or any failure, 2 bad arguments.\n";

struct options {
  cli::server_target server{7100};
  coverbs::transport kind = coverbs::transport::automatic;
  std::vector<std::string> command;  // the command word and its arguments
  bool two_sided = false;
  std::chrono::seconds timeout{10};
  kv::bench_options bench;
  kv::stress_options stress;
};

/// Options are read after the command word too (bench --ops N, get --two-sided KEY), so a KEY
/// or VALUE that looks like one is taken as one; where that may be why a command line fails,
/// the message points to '--'.
constexpr std::string_view dash_dash_hint = "a KEY or VALUE that begins with '-' goes after '--'";

inline options parse(int argc, char** argv) {
  options o;
  bool keys_given = false, size_given = false, only_operands = false;
  std::string option_after_command;  // the first after put, get or del: perhaps a KEY or VALUE
  cli::arguments args(program, argc, argv);
  const auto takes_operands = [&] {
    return !o.command.empty() && (o.command[0] == "put" || o.command[0] == "get" || o.command[0] == "del");
  };
  auto count = [&](std::size_t low, std::size_t high, const char* what, bool suffixed = false) {
    const auto n = cli::number(args.value(), low, high, suffixed);
    if (!n) args.bad_value(what);
    return *n;
  };
  while (args.next()) {
    const auto arg = args.current();
    // Every option but -h (which exits) begins with "--"; other words are operands.
    const bool option = !only_operands && arg.size() > 2 && arg.starts_with("--");
    if (option && takes_operands() && option_after_command.empty()) option_after_command = arg;
    if (only_operands) {
      o.command.emplace_back(arg);
    } else if (arg == "--") {  // as file_client takes it
      only_operands = true;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (cli::client_option(args, arg, o.server)) {  // taken
    } else if (arg == "--transport") {
      const auto t = cli::transport(args.value());
      if (!t) args.bad_value("auto, rdma or tcp");
      o.kind = *t;
    } else if (arg == "--two-sided") {
      o.two_sided = true;
    } else if (arg == "--skip-version-check") {
      o.stress.get.check_versions = false;
    } else if (arg == "--retries") {
      o.bench.get.retries = o.stress.get.retries = count(0, 1'000'000, "a number from 0 to 1000000");
    } else if (arg == "--timeout") {
      o.timeout = std::chrono::seconds(count(1, 86400, "a number of seconds from 1 to 86400"));
    } else if (arg == "--ops") {
      o.bench.ops = count(1, 100'000'000, "a number from 1 to 100000000");
    } else if (arg == "--keys") {
      o.bench.keys = o.stress.keys = count(1, 1'000'000, "a number from 1 to 1000000");
      keys_given = true;
    } else if (arg == "--value-size") {
      o.bench.value_size = o.stress.value_size = count(1, 60000, "a number of bytes from 1 to 60000", true);
      size_given = true;
    } else if (arg == "--writers") {
      o.stress.writers = count(1, 1000, "a number from 1 to 1000");
    } else if (arg == "--readers") {
      o.stress.readers = count(1, 1000, "a number from 1 to 1000");
    } else if (arg == "--seconds") {
      o.stress.duration = std::chrono::seconds(count(1, 86400, "a number of seconds from 1 to 86400"));
    } else if (arg.starts_with("--")) {
      const std::string hint = takes_operands() ? " (" + std::string(dash_dash_hint) + ")" : "";
      cli::usage_error(program, "unknown option '" + std::string(arg) + "'" + hint);
    } else {
      o.command.emplace_back(arg);
    }
  }
  cli::check_target(program, o.server);
  if (o.command.empty()) cli::usage_error(program, "no command: put, get, del, bench, stress or bad-request");
  static const std::map<std::string, std::size_t> arity = {{"put", 3},   {"get", 2},    {"del", 2},
                                                           {"bench", 1}, {"stress", 1}, {"bad-request", 2}};
  const auto it = arity.find(o.command[0]);
  if (it == arity.end()) cli::usage_error(program, "unknown command '" + o.command[0] + "'");
  if (o.command.size() != it->second) {
    std::string message = o.command[0] + " takes " + std::to_string(it->second - 1) + " argument(s)";
    if (!option_after_command.empty()) {
      message += "; '" + option_after_command + "' was read as an option: " + std::string(dash_dash_hint);
    }
    cli::usage_error(program, message);
  }
  static const std::set<std::string> malformed_kinds = {"short",        "version", "op",      "key-length",
                                                        "value-length", "length",  "oversize"};
  if (o.command[0] == "bad-request" && !malformed_kinds.contains(o.command[1])) {
    cli::usage_error(program,
                     "bad-request takes short, version, op, key-length, value-length, length or oversize");
  }
  if (o.command[0] == "stress" && size_given && o.stress.value_size < kv::min_checked_value) {
    cli::usage_error(program, "stress needs --value-size of at least 32 bytes");
  }
  if (o.command[0] == "bench" && o.bench.keys > o.bench.ops && keys_given) {
    cli::usage_error(program, "bench needs at least as many --ops as --keys");
  }
  return o;
}

/// A request the server must refuse; built by hand because kv::encode only makes valid ones.
}  // namespace kv_client
