// kv_client's connection to a kv_server: the hello that describes the table, two-sided
// requests, and the one-sided GET that reads slots with RDMA READ (TCP: the fallback's
// emulated READ) and checks their versions.
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <coverbs/coverbs.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv_protocol.hpp"

namespace kv {

/// What one-sided GETs went through, for the reports.
struct get_stats {
  std::size_t reads = 0;      ///< slot copies taken
  std::size_t retries = 0;    ///< copies that were torn and taken again
  std::size_t fallbacks = 0;  ///< GETs finished by request after `retries` torn copies of a slot
};

struct one_sided_options {
  std::size_t retries = 16;    ///< torn copies of one slot before falling back to a request
  bool check_versions = true;  ///< false only for the stress test's control run
};

/// The server broke the protocol: not worth retrying.
struct protocol_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// The server refused a request as malformed, and closes the connection.
struct refused : protocol_failure {
  using protocol_failure::protocol_failure;
};

/// How far the client got: what its watchdog tells a slow server from a silent one by, and what
/// its progress and failures report.
struct activity {
  std::size_t operations = 0;                   ///< completed requests and reads
  bool connected = false;                       ///< every connection is up
  std::optional<coverbs::transport> transport;  ///< the one in use, once a connection is up
};

class connection {
 public:
  using value = std::vector<std::byte>;

  connection(const boost::asio::any_io_executor& ex, coverbs::transport kind)
      : socket_(ex, coverbs::socket_options{.kind = kind}) {}

  /// Connects and takes the server's hello; then the table's slots can be read.
  /// `servers`: the endpoints a host resolved to, tried in turn.
  boost::asio::awaitable<void> connect(const std::vector<boost::asio::ip::tcp::endpoint>& servers) {
    using boost::asio::use_awaitable;
    co_await coverbs::async_connect(socket_, servers, use_awaitable);
    std::array<std::byte, 256> buffer;
    const std::size_t n = co_await socket_.async_receive(boost::asio::buffer(buffer), use_awaitable);
    std::string why;
    const auto h = parse_hello(std::span(buffer).first(n), why);
    if (!h) throw protocol_failure("bad hello from the server: " + why);
    table_ = h->table;
    region_ = h->region;
    slot_.resize(table_.slot_size());
    slot_memory_ = socket_.register_memory(slot_, coverbs::verbs::access::none);
    // Large enough for a refusal's reason even when values are tiny.
    reply_.resize(response_header_size + std::max<std::size_t>(table_.max_value, 1024));
  }

  const layout& table() const noexcept { return table_; }
  coverbs::socket& socket() noexcept { return socket_; }

  /// What a bench or stress run that meets table_full should say to do about it.
  static constexpr const char* table_full_advice = "use fewer --keys or a server with more --slots";

  /// PUT by request: ok, or table_full.
  boost::asio::awaitable<status> put(std::string_view key, std::span<const std::byte> v) {
    const auto bytes = encode(request{op::put, key, v});
    const response r = co_await call(bytes);
    co_return r.status;
  }
  /// DELETE by request: ok, or not_found.
  boost::asio::awaitable<status> del(std::string_view key) {
    const auto bytes = encode(request{op::del, key, {}});
    const response r = co_await call(bytes);
    co_return r.status;
  }
  /// GET by request.
  boost::asio::awaitable<std::optional<value>> get_two_sided(std::string_view key) {
    const auto bytes = encode(request{op::get, key, {}});
    const response r = co_await call(bytes);
    if (r.status != status::ok) co_return std::nullopt;
    co_return value(r.payload.begin(), r.payload.end());
  }

  /// GET by reading the key's probe sequence, one whole slot per RDMA READ. A torn copy is
  /// read again up to `o.retries` times, then the GET is left to the server.
  boost::asio::awaitable<std::optional<value>> get_one_sided(std::string_view key, get_stats& stats,
                                                             const one_sided_options& o = {}) {
    for (std::uint32_t i = 0; i < table_.probes(); ++i) {
      const std::uint32_t index = table_.probe(key, i);
      const auto remote = region_.sub(static_cast<std::uint32_t>(table_.offset(index)),
                                      static_cast<std::uint32_t>(table_.slot_size()));
      slot_view view;
      slot_check check = slot_check::torn;
      for (std::size_t attempt = 0; check == slot_check::torn; ++attempt) {
        if (attempt > o.retries) {
          ++stats.fallbacks;
          auto v = co_await get_two_sided(key);
          co_return v;
        }
        if (attempt > 0) ++stats.retries;
        co_await socket_.async_read(slot_memory_.slice(0, slot_.size()), remote, boost::asio::use_awaitable);
        ++stats.reads;
        check = decode_slot(table_, slot_, view, o.check_versions);
      }
      if (check == slot_check::invalid)
        throw protocol_failure("slot " + std::to_string(index) + " is garbled");
      if (view.state == slot_state::empty) break;  // puts never skip an empty slot
      if (view.state == slot_state::live && view.key == key)
        co_return value(view.value.begin(), view.value.end());
    }
    co_return std::nullopt;
  }

  /// Sends `request` as it is and returns the reply: for requests the caller made up.
  boost::asio::awaitable<response> call(const std::vector<std::byte>& request) {
    using boost::asio::use_awaitable;
    co_await socket_.async_send(boost::asio::buffer(request), use_awaitable);
    auto [ec, n] =
        co_await socket_.async_receive(boost::asio::buffer(reply_), boost::asio::as_tuple(use_awaitable));
    if (ec) throw boost::system::system_error(ec);
    std::string why;
    const auto r = parse_response(std::span(reply_).first(n), why);
    if (!r) throw protocol_failure(why);
    if (r->status == status::malformed) {
      const auto* text = reinterpret_cast<const char*>(r->payload.data());
      throw refused("the server refused the request as malformed: " + std::string(text, r->payload.size()));
    }
    co_return *r;
  }

 private:
  coverbs::socket socket_;
  layout table_;
  coverbs::remote_buffer region_;
  std::vector<std::byte> slot_, reply_;
  coverbs::registered_memory slot_memory_;
};

}  // namespace kv
