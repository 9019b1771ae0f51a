// Where a client program connects: --connect HOST[:PORT] and --port N, the same in every
// client, and the host resolved to the endpoints to try, as an Asio TCP client would.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "command_line.hpp"

namespace cli {

/// A server as a client's command line names it, and the endpoints its host resolves to.
struct server_target {
  /// `default_port`: the port when the command line gives none (the server's default).
  explicit server_target(std::uint16_t default_port) : port(default_port) {}

  std::string host;    ///< a numeric address or a host name, without brackets
  std::uint16_t port;  ///< final once check_target() has run
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;   ///< set by resolve(), in the resolver's order
  std::optional<std::uint16_t> connect_port, option_port;  ///< as --connect and --port gave them

  /// HOST:PORT as a user would write it: [ADDR]:PORT for an IPv6 address.
  std::string text() const {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
  /// Whether every endpoint is loopback, which rdma_cm cannot reach.
  bool loopback() const {
    for (const auto& e : endpoints)
      if (!e.address().is_loopback()) return false;
    return !endpoints.empty();
  }
};

/// Splits HOST[:PORT]. Brackets hold an IPv6 address, needed when a port follows ([ADDR]:PORT)
/// and optional alone. False for an empty host, a port that is not 1 to 65535, and several
/// colons outside brackets that are no IPv6 address or read as ADDR:PORT too: ::1:7000 is an
/// address, but was likely meant as [::1]:7000.
inline bool split_host_port(std::string_view text, std::string& host, std::optional<std::uint16_t>& port) {
  const auto is_v6 = [](std::string_view a) {
    boost::system::error_code ec;
    boost::asio::ip::make_address_v6(std::string(a), ec);
    return !ec;
  };
  std::string_view h = text, p;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return false;
    h = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (!rest.starts_with(':') || rest.size() == 1) return false;
      p = rest.substr(1);
    }
    if (!is_v6(h)) return false;
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') == colon) {
      h = text.substr(0, colon);
      p = text.substr(colon + 1);
      if (p.empty()) return false;
    } else {
      const bool also_address_and_port =
          is_v6(text.substr(0, colon)) && number(text.substr(colon + 1), 1, 65535).has_value();
      if (!is_v6(text) || also_address_and_port) return false;
    }
  }
  if (h.empty() || h.find_first_of("[]") != std::string_view::npos) return false;
  port.reset();
  if (!p.empty()) {
    const auto n = number(p, 1, 65535);
    if (!n) return false;
    port = static_cast<std::uint16_t>(*n);
  }
  host = h;
  return true;
}

/// The options every client takes: --connect HOST[:PORT] and --port N. True if `arg` was one of
/// them (its value is taken). A later --connect replaces an earlier one, port included.
inline bool client_option(arguments& args, std::string_view arg, server_target& t) {
  if (arg == "--connect") {
    if (!split_host_port(args.value(), t.host, t.connect_port))
      args.bad_value("HOST or HOST:PORT, an IPv6 address as [ADDR]:PORT, and a port from 1 to 65535");
  } else if (arg == "--port") {
    const auto p = number(args.value(), 1, 65535);
    if (!p) args.bad_value("a port number from 1 to 65535");
    t.option_port = static_cast<std::uint16_t>(*p);
  } else {
    return false;
  }
  return true;
}

/// After the command line: --connect given, and the port at most once; sets `t.port`.
inline void check_target(std::string_view program, server_target& t) {
  if (t.host.empty()) usage_error(program, "--connect HOST[:PORT] is required");
  if (t.connect_port && t.option_port)
    usage_error(program, "give the port once: in --connect or with --port");
  if (t.connect_port) t.port = *t.connect_port;
  if (t.option_port) t.port = *t.option_port;
}

/// Fills `t.endpoints`: a numeric address as it is, a host name through the system's resolver
/// (/etc/hosts, DNS; this blocks, before the program's I/O starts). On failure, says why and
/// exits with status 1.
inline void resolve(std::string_view program, server_target& t) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(t.host, ec);
  if (!ec) {
    t.endpoints = {asio::ip::tcp::endpoint(address, t.port)};
    return;
  }
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  const auto results =
      resolver.resolve(t.host, std::to_string(t.port), asio::ip::tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    std::cerr << program << ": cannot resolve " << t.host << ": "
              << (ec ? ec.message() : std::string("no address")) << "\n";
    std::exit(1);
  }
  t.endpoints.clear();
  for (const auto& r : results) t.endpoints.push_back(r.endpoint());
}

}  // namespace cli
