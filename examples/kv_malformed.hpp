// Requests kv_server must refuse, one per rule of kv_protocol.hpp, for kv_client's
// bad-request check. Built by hand: kv::encode only makes valid ones.
#pragma once

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv_protocol.hpp"

namespace kv {

inline const std::set<std::string> malformed_kinds = {"short",        "version", "op",      "key-length",
                                                      "value-length", "length",  "oversize"};

inline std::vector<std::byte> malformed_request(const std::string& kind, const layout& t) {
  auto header = [](unsigned version, unsigned op, unsigned key, std::uint32_t value) {
    std::vector<std::byte> out;
    wire::put_le(out, version, 1);
    wire::put_le(out, op, 1);
    wire::put_le(out, key, 2);
    wire::put_le(out, value, 4);
    return out;
  };
  auto with_key = [](std::vector<std::byte> out, std::size_t n) {
    out.resize(out.size() + n, std::byte{'k'});
    return out;
  };
  if (kind == "short") return {std::byte{1}, std::byte{2}, std::byte{1}};
  if (kind == "version") return with_key(header(9, 2, 1, 0), 1);
  if (kind == "op") return with_key(header(1, 7, 1, 0), 1);
  if (kind == "key-length") return with_key(header(1, 2, t.max_key + 1u, 0), t.max_key + 1u);
  if (kind == "value-length") return with_key(header(1, 1, 1, t.max_value + 1), 1);
  if (kind == "length") return with_key(header(1, 2, 3, 0), 5);
  if (kind == "oversize") return with_key(header(1, 1, 1, 0), request_header_size + t.max_key + t.max_value);
  throw std::logic_error("unknown malformed request kind");  // parse() lets only the above through
}

}  // namespace kv
