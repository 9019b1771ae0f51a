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
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "command_line.hpp"

namespace cli {

/// A server as a client's command line names it, and the endpoints its host resolves to.
struct server_target {
  /// `default_port`: the port when the command line gives none (the server's default).
  explicit server_target(std::uint16_t default_port) : port(default_port) {}

  std::string host;  ///< a numeric address or a host name, without brackets
  std::uint16_t port;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;  ///< set by resolve(), in the resolver's order

  bool host_given = false, port_in_connect = false, port_option = false;

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

/// Splits HOST[:PORT] ([ADDR]:PORT for IPv6; an IPv6 address with no port needs no brackets).
/// False if the host is empty or the port is not 1 to 65535.
inline bool split_host_port(std::string_view text, server_target& t) {
  std::string_view host = text, port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return false;
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (!rest.starts_with(':')) return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
  } else if (const auto colon = text.find(':'); colon != std::string_view::npos && text.rfind(':') == colon) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (host.empty()) return false;
  if (!port.empty()) {
    const auto p = number(port, 1, 65535);
    if (!p) return false;
    t.port = static_cast<std::uint16_t>(*p);
    t.port_in_connect = true;
  }
  t.host = host;
  t.host_given = true;
  return true;
}

/// The options every client takes: --connect HOST[:PORT] and --port N. True if `arg` was one of
/// them (its value is taken).
inline bool client_option(arguments& args, std::string_view arg, server_target& t) {
  if (arg == "--connect") {
    if (!split_host_port(args.value(), t))
      args.bad_value("HOST or HOST:PORT ([ADDR]:PORT for IPv6), with a port from 1 to 65535");
  } else if (arg == "--port") {
    const auto p = number(args.value(), 1, 65535);
    if (!p) args.bad_value("a port number from 1 to 65535");
    t.port = static_cast<std::uint16_t>(*p);
    t.port_option = true;
  } else {
    return false;
  }
  return true;
}

/// After the command line: --connect given, and the port at most once.
inline void check_target(std::string_view program, const server_target& t) {
  if (!t.host_given) usage_error(program, "--connect HOST[:PORT] is required");
  if (t.port_in_connect && t.port_option)
    usage_error(program, "give the port once: in --connect or with --port");
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
