// The options file_server and file_client share: transport, window and timeout, parsed and
// checked the same way in both.
#pragma once

#include <chrono>
#include <coverbs/socket.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "../cli.hpp"
#include "protocol.hpp"

namespace ft {

struct tuning {
  coverbs::transport kind = coverbs::transport::automatic;
  std::uint32_t slots = 8;             ///< of the window this side receives into
  std::uint32_t slot_size = 1u << 20;  ///< bytes per slot
  std::chrono::seconds timeout{30};    ///< a peer silent this long is given up
};

/// Takes `arg` (and its value) if it is one of the shared options; false if it is not.
inline bool parse_tuning(cli::arguments& args, std::string_view arg, tuning& t) {
  if (arg == "--transport") {
    const auto k = cli::transport(args.value());
    if (!k) args.bad_value("auto, rdma or tcp");
    t.kind = *k;
  } else if (arg == "--window") {
    const auto n = cli::number(args.value(), 1, max_slots);
    if (!n) args.bad_value("a number of slots from 1 to " + std::to_string(max_slots));
    t.slots = static_cast<std::uint32_t>(*n);
  } else if (arg == "--slot-size") {
    const auto n = cli::number(args.value(), 4096, max_slot_size, true);
    if (!n) args.bad_value("a number of bytes from 4096 to " + std::to_string(max_slot_size));
    t.slot_size = static_cast<std::uint32_t>(*n);
  } else if (arg == "--timeout") {
    const auto n = cli::number(args.value(), 1, 86400);
    if (!n) args.bad_value("a number of seconds from 1 to 86400");
    t.timeout = std::chrono::seconds(*n);
  } else {
    return false;
  }
  return true;
}

}  // namespace ft
