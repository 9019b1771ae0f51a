// What every benchmark program shares: its command line, and results as lines a script reads.
// Deliberately free of coverbs headers, so the plain-Asio baseline includes it too.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/system/system_error.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bench {

using clock_type = std::chrono::steady_clock;

/// Heap allocations so far, where the program includes alloc_counter.hpp (else stays 0).
inline std::atomic<std::size_t> allocations{0};

[[noreturn]] inline void usage_error(std::string_view program, const std::string& message) {
  std::cerr << program << ": " << message << "\n"
            << "Try '" << program << " --help' for the options.\n";
  std::exit(2);
}

/// A whole number within [low, high], with an optional K or M suffix (powers of 1024) where
/// `suffixed` (not for a duration, where "1m" would read as a millisecond).
inline std::optional<std::size_t> number(std::string_view text, std::size_t low, std::size_t high,
                                         bool suffixed = true) {
  std::size_t scale = 1;
  if (suffixed && !text.empty() && (text.back() == 'K' || text.back() == 'k')) scale = 1024;
  if (suffixed && !text.empty() && (text.back() == 'M' || text.back() == 'm')) scale = 1024 * 1024;
  if (scale != 1) text.remove_suffix(1);
  std::size_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return {};
  value *= scale;
  if (value < low || value > high) return {};
  return value;
}

/// Comma-separated words, e.g. "64,4K,64K" or "event,busy".
inline std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    const auto comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return parts;
}

/// Walks argv; `value()` takes the argument after the current option or exits with usage.
class arguments {
 public:
  arguments(std::string_view program, int argc, char** argv) : program_(program), argc_(argc), argv_(argv) {}
  bool next() { return ++i_ < argc_; }
  std::string_view current() const { return argv_[i_]; }
  std::string_view value() {
    if (i_ + 1 >= argc_) usage_error(program_, std::string(current()) + " needs a value");
    return argv_[++i_];
  }
  [[noreturn]] void bad_value(std::string_view what) const {
    usage_error(program_,
                std::string(argv_[i_ - 1]) + " takes " + std::string(what) + ", not '" + argv_[i_] + "'");
  }
  std::size_t number_value(std::size_t low, std::size_t high) {
    const auto n = number(value(), low, high);
    if (!n) bad_value("a number from " + std::to_string(low) + " to " + std::to_string(high));
    return *n;
  }
  /// A comma-separated list of `what` (sizes, counts) within [low, high], K and M allowed.
  std::vector<std::size_t> list_value(std::size_t low, std::size_t high, std::string_view what = "sizes") {
    std::vector<std::size_t> out;
    for (auto part : split(value())) {
      const auto n = number(part, low, high);
      if (!n) bad_value(std::string(what) + " from " + std::to_string(low) + " to " + std::to_string(high));
      out.push_back(*n);
    }
    return out;
  }

 private:
  std::string_view program_;
  int argc_;
  char** argv_;
  int i_ = 0;
};

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

/// Sorts `samples` and returns the value below which `p` of them lie (nearest rank).
inline double percentile(std::vector<double>& samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const auto rank = static_cast<std::size_t>(p * static_cast<double>(samples.size() - 1) + 0.5);
  return samples[std::min(rank, samples.size() - 1)];
}

/// Latency figures as perftest prints them: the median (its t_typical), p99 and p99.9, in µs.
inline void emit_latency(const case_id& c, std::vector<double>& us) {
  emit(c, "p50_us", percentile(us, 0.5));
  emit(c, "p99_us", percentile(us, 0.99));
  emit(c, "p999_us", percentile(us, 0.999));
}

/// Bytes per second in perftest's unit: MB/sec there is 2^20 bytes per second.
inline double mib_per_s(std::size_t bytes, clock_type::duration took) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0) / std::chrono::duration<double>(took).count();
}

inline double micros(clock_type::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace bench
