// What every benchmark program shares: its command line, and results as lines a script reads.
// Deliberately free of coverbs headers, so the plain-Asio baseline includes it too. Options are
// read as the examples read theirs (examples/command_line.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../examples/command_line.hpp"
#include "../examples/percentile.hpp"
#include "../test/allocation_count.hpp"

namespace bench {

using clock_type = std::chrono::steady_clock;

/// Heap allocations so far, where the program includes test/allocation_counter.hpp (else 0).
using coverbs::test::allocations;

using cli::arguments;
using cli::split;
using cli::usage_error;

/// An exception's what(), without the code and source location Boost appends to a system
/// error's ("bind: Cannot assign requested address [system:99 at .../file.hpp:161 in ...]").
inline std::string describe(const std::exception& e) {
  std::string what = e.what();
  if (auto* b = dynamic_cast<const boost::system::system_error*>(&e)) {
    what = what.substr(0, what.find(" [" + b->code().to_string()));
  }
  return what;
}

/// Identifies one measured case in the machine-readable output.
struct case_id {
  std::string_view bench;      ///< pingpong, read, write, stream, echo
  std::string_view impl;       ///< coverbs, asio, or a perftest tool (written by bench/run)
  std::string_view transport;  ///< rdma or tcp
  std::string_view mode;       ///< polling mode, or "-" where there is none
  std::size_t size;            ///< message or write size in bytes
  std::size_t connections;
};

/// One line per figure: `csv,bench,impl,transport,mode,size,connections,metric,value`.
/// bench/run collects these lines; everything else the programs print is for people.
inline void emit(const case_id& c, std::string_view metric, double value) {
  std::printf("csv,%.*s,%.*s,%.*s,%.*s,%zu,%zu,%.*s,%.6g\n", int(c.bench.size()), c.bench.data(),
              int(c.impl.size()), c.impl.data(), int(c.transport.size()), c.transport.data(),
              int(c.mode.size()), c.mode.data(), c.size, c.connections, int(metric.size()), metric.data(),
              value);
  std::fflush(stdout);
}

/// Latency samples of one case in bounded memory, whatever --iterations asks for: every one up
/// to a million, a uniform sample of a million beyond (percentiles nearest rank, as the
/// examples report theirs). Reserve before measuring: adding then allocates nothing.
using latency_samples = stats::reservoir<double>;

/// Latency figures as perftest prints them: the median (its t_typical), p99 and p99.9, in µs.
inline void emit_latency(const case_id& c, latency_samples& us) {
  emit(c, "p50_us", us.percentile(0.5));
  emit(c, "p99_us", us.percentile(0.99));
  emit(c, "p999_us", us.percentile(0.999));
}

/// Bytes per second in perftest's unit: MB/sec there is 2^20 bytes per second.
inline double mib_per_s(std::size_t bytes, clock_type::duration took) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0) / std::chrono::duration<double>(took).count();
}

inline double micros(clock_type::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace bench
