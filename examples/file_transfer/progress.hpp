// Progress of one file: on a terminal a bar redrawn at most 10 times a second, elsewhere a
// plain line at every tenth of the file, and a summary line at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "checksum.hpp"

namespace ft {

/// Told the bytes done so far, as a transfer goes.
using progress_fn = std::function<void(std::uint64_t done)>;

inline std::string mib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return text;
}

/// "256.0 MiB in 1.21 s, 211.6 MiB/s, xxh128 HEX": how a finished transfer is reported.
inline std::string summary(std::uint64_t bytes, std::chrono::steady_clock::time_point start,
                           const digest& sum) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char text[96];
  std::snprintf(text, sizeof text, "%s MiB in %.2f s, %.1f MiB/s", mib(bytes).c_str(), s,
                s > 0 ? static_cast<double>(bytes) / (1 << 20) / s : 0.0);
  return std::string(text) + ", " + describe(sum);
}

class progress {
 public:
  using clock = std::chrono::steady_clock;

  progress(std::string program, std::string name, std::uint64_t total, bool terminal)
      : program_(std::move(program)), name_(std::move(name)), total_(total), terminal_(terminal) {}

  /// Restarts the clock: the data starts moving now.
  void start() { start_ = drawn_ = clock::now(); }

  void update(std::uint64_t done) {
    done_ = done;
    const auto now = clock::now();
    if (terminal_) {
      if (now - drawn_ >= std::chrono::milliseconds(100) || done == total_) draw_bar(now);
    } else if (total_ > 0) {
      const auto tenth = done * 10 / total_;
      if (tenth > tenths_ && done < total_) {
        tenths_ = tenth;
        std::ostringstream line;
        line << program_ << ": " << name_ << ": " << tenth * 10 << "% (" << mib(done) << " of " << mib(total_)
             << " MiB), " << rate(now) << " MiB/s\n";
        std::cout << line.str() << std::flush;
      }
    }
  }

  /// The summary line, e.g. "sent big.bin: 256.0 MiB in 1.21 s, 211.6 MiB/s, xxh128 ...".
  void finish(const std::string& verb, const digest& sum) {
    end_bar();
    std::ostringstream line;
    line << program_ << ": " << verb << " " << name_ << ": " << summary(total_, start_, sum) << "\n";
    std::cout << line.str() << std::flush;
  }

  /// Ends a bar left on the line, so an error message starts on a fresh one.
  void end_bar() {
    if (bar_shown_) std::cout << "\n" << std::flush;
    bar_shown_ = false;
  }

 private:
  std::string rate(clock::time_point now) const {
    const double s = std::chrono::duration<double>(now - start_).count();
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", s > 0 ? static_cast<double>(done_) / (1 << 20) / s : 0.0);
    return text;
  }

  void draw_bar(clock::time_point now) {
    drawn_ = now;
    constexpr int width = 30;
    const double part = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const int filled = static_cast<int>(part * width);
    const double s = std::chrono::duration<double>(now - start_).count();
    const double per_second = s > 0 ? static_cast<double>(done_) / s : 0;
    std::string eta = "--:--";
    if (per_second > 0) {
      const auto left = static_cast<long>(static_cast<double>(total_ - done_) / per_second);
      char text[32];
      std::snprintf(text, sizeof text, "%ld:%02ld", left / 60, left % 60);
      eta = text;
    }
    std::ostringstream line;
    line << '\r' << name_ << " [" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
         << static_cast<int>(part * 100) << "%  " << mib(done_) << "/" << mib(total_) << " MiB  " << rate(now)
         << " MiB/s  ETA " << eta << "\x1b[K";
    std::cout << line.str() << std::flush;
    bar_shown_ = true;
  }

  std::string program_, name_;
  std::uint64_t total_, done_ = 0, tenths_ = 0;
  bool terminal_, bar_shown_ = false;
  clock::time_point start_ = clock::now(), drawn_ = start_;
};

}  // namespace ft
