// The coverbs half of the benchmarks: sockets and acceptors made from the command line's
// transport and polling mode, and messages that keep their boundaries.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/system/system_error.hpp>
#include <coverbs/coverbs.hpp>
#include <sstream>
#include <stdexcept>

#include "patterns.hpp"

namespace bench {

/// Messages as a coverbs program sends them: async_send/async_receive keep the boundaries.
/// As in stream_messages, the initiating functions' awaitables are returned as they are.
struct socket_messages {
  static awaitable<std::size_t> send(coverbs::socket& s, asio::const_buffer b) {
    return s.async_send(b, use_awaitable);
  }
  static awaitable<receive_result> receive(coverbs::socket& s, asio::mutable_buffer b) {
    return s.async_receive(b, asio::as_tuple(use_awaitable));
  }
};

inline std::string_view mode_name(coverbs::polling_mode m) {
  switch (m) {
    case coverbs::polling_mode::busy: return "busy";
    case coverbs::polling_mode::adaptive: return "adaptive";
    case coverbs::polling_mode::event: break;
  }
  return "event";
}

/// The transport and polling modes a coverbs benchmark runs with.
struct network {
  coverbs::transport kind = coverbs::transport::tcp;
  asio::ip::address address = asio::ip::make_address("127.0.0.1");
  std::vector<coverbs::polling_mode> modes{coverbs::polling_mode::event};
  coverbs::socket_options defaults;  ///< --buffer-size, --receive-buffers, --max-spin

  std::string_view transport_name() const { return kind == coverbs::transport::rdma ? "rdma" : "tcp"; }
  /// Polling modes only change RDMA completions; over TCP the name is "-". Stream buffers
  /// other than the defaults follow the mode, as "event:SIZExCOUNT", so that such a run is a
  /// case of its own in the report.
  std::string mode_label(coverbs::polling_mode m) const {
    if (kind != coverbs::transport::rdma) return "-";
    std::string label(mode_name(m));
    const coverbs::socket_options standard;
    if (defaults.buffer_size != standard.buffer_size ||
        defaults.receive_buffers != standard.receive_buffers) {
      // Appended piece by piece: `":" + std::to_string(...)` trips g++ 12's -Wrestrict at -O3
      // (GCC PR 105329).
      label += ':';
      label += std::to_string(defaults.buffer_size);
      label += 'x';
      label += std::to_string(defaults.receive_buffers);
    }
    return label;
  }
  /// TCP has one mode: running the others would only repeat the same case.
  std::vector<coverbs::polling_mode> effective_modes() const {
    if (kind == coverbs::transport::tcp) return {coverbs::polling_mode::event};
    return modes;
  }
  coverbs::socket_options options(coverbs::polling_mode m) const {
    coverbs::socket_options o = defaults;
    o.kind = kind;
    o.mode = m;
    return o;
  }

  /// Runs one case between coverbs sockets in polling mode `m`.
  template <class Serve, class Client>
  void run(shared_state& state, coverbs::polling_mode m, std::size_t connections, Serve serve,
           Client client) const {
    const auto opts = options(m);
    const asio::ip::tcp::endpoint at(address, 0);
    run_pair<coverbs::socket>(
        state, connections, [&](asio::io_context& io) { return listen(io, at, opts); },
        [&](asio::io_context& io) { return coverbs::socket(io, opts); }, serve, client);
  }

  /// The server's acceptor. Its failure says where and over what: "bind: No such device" alone
  /// does not tell that RDMA needs the address of a device.
  coverbs::acceptor listen(asio::io_context& io, const asio::ip::tcp::endpoint& at,
                           const coverbs::socket_options& opts) const {
    try {
      return coverbs::acceptor(io, at, opts);
    } catch (const boost::system::system_error& e) {
      std::ostringstream s;
      s << "cannot listen on " << at.address() << " (" << transport_name() << "): " << e.code().message();
      const bool no_device_there = e.code() == boost::system::errc::no_such_device ||
                                   e.code() == boost::system::errc::address_not_available;
      if (kind == coverbs::transport::rdma && no_device_there)
        s << " (RDMA needs --address of an RDMA device)";
      throw std::runtime_error(s.str());
    }
  }

  /// Parses --transport, --address and --modes; false when `arg` is none of them.
  bool parse(std::string_view arg, arguments& args) {
    if (arg == "--transport") {
      const auto v = args.value();
      if (v == "rdma") {
        kind = coverbs::transport::rdma;
      } else if (v == "tcp") {
        kind = coverbs::transport::tcp;
      } else {
        args.bad_value("rdma or tcp");
      }
    } else if (arg == "--address") {
      boost::system::error_code ec;
      address = asio::ip::make_address(std::string(args.value()), ec);
      if (ec) args.bad_value("a numeric IPv4 or IPv6 address");
    } else if (arg == "--modes") {
      modes.clear();
      for (auto m : split(args.value())) {
        if (m == "event") {
          modes.push_back(coverbs::polling_mode::event);
        } else if (m == "busy") {
          modes.push_back(coverbs::polling_mode::busy);
        } else if (m == "adaptive") {
          modes.push_back(coverbs::polling_mode::adaptive);
        } else {
          args.bad_value("a comma-separated list of event, busy, adaptive");
        }
      }
    } else if (arg == "--buffer-size") {
      defaults.buffer_size = static_cast<std::uint32_t>(args.number_value(256, 16 << 20));
    } else if (arg == "--receive-buffers") {
      defaults.receive_buffers = static_cast<std::uint16_t>(args.number_value(1, 4096));
    } else if (arg == "--max-spin") {
      const auto us = cli::number(args.value(), 0, 10'000'000);
      if (!us) args.bad_value("microseconds, 0 to 10000000");
      defaults.max_spin = std::chrono::microseconds(*us);
    } else {
      return false;
    }
    return true;
  }
};

constexpr std::string_view network_usage =
    "  --transport T   rdma or tcp (default tcp); RDMA needs --address of an RDMA device\n"
    "  --address A     where the server listens and the client connects (default 127.0.0.1)\n"
    "  --modes LIST    RDMA completion polling modes, comma-separated: event, busy, adaptive\n"
    "                  (default event); over TCP there is no polling mode and this is ignored\n"
    "  --buffer-size N      socket_options::buffer_size: each stream buffer, 256 to 16M\n"
    "                       (default 64K)\n"
    "  --receive-buffers N  socket_options::receive_buffers: buffers each side (default 32);\n"
    "                       1G in all at most\n"
    "  --max-spin US        socket_options::max_spin: adaptive mode's longest spin in\n"
    "                       microseconds (default 1000)\n";

}  // namespace bench
