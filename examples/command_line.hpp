// Command lines that report bad input the same way in every program, examples and benchmarks
// alike: a message naming the program, a pointer to --help, exit status 2. Free of coverbs
// headers, so the plain-Asio benchmark baseline uses it too.
#pragma once

#include <charconv>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cli {

[[noreturn]] inline void usage_error(std::string_view program, const std::string& message) {
  std::cerr << program << ": " << message << "\n"
            << "Try '" << program << " --help' for the options.\n";
  std::exit(2);
}

/// Refuses `arg`: an option not known, or a word where none is taken.
[[noreturn]] inline void unknown_argument(std::string_view program, std::string_view arg) {
  usage_error(program,
              (arg.starts_with('-') ? "unknown option '" : "unexpected argument '") + std::string(arg) + "'");
}

/// A whole decimal number within [low, high]; nothing else (no sign, no trailing text), but
/// with a K or M suffix (powers of 1024) where `suffixed`, as sizes take.
inline std::optional<std::size_t> number(std::string_view text, std::size_t low, std::size_t high,
                                         bool suffixed = false) {
  std::size_t scale = 1;
  if (suffixed && !text.empty() && (text.back() == 'K' || text.back() == 'k')) scale = 1024;
  if (suffixed && !text.empty() && (text.back() == 'M' || text.back() == 'm')) scale = 1024 * 1024;
  if (scale != 1) text.remove_suffix(1);
  std::size_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return {};
  if (value > high / scale) return {};
  value *= scale;
  if (value < low) return {};
  return value;
}

/// Comma-separated words, e.g. "64,4K,64K" or "event,busy". Empty words are kept ("" is one,
/// "64," two), so that every caller refuses them as it refuses any word it does not know:
/// dropped, they would make a benchmark quietly run fewer cases, or none.
inline std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return parts;
    text.remove_prefix(comma + 1);
  }
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
  /// Refuses the current argument: an option not known, or a word where none is taken.
  [[noreturn]] void unknown() const { unknown_argument(program_, current()); }
  [[noreturn]] void bad_value(std::string_view what) const {
    usage_error(program_,
                std::string(argv_[i_ - 1]) + " takes " + std::string(what) + ", not '" + argv_[i_] + "'");
  }
  /// The value as a number within [low, high], K and M allowed.
  std::size_t number_value(std::size_t low, std::size_t high) {
    const auto n = number(value(), low, high, true);
    if (!n) bad_value("a number from " + std::to_string(low) + " to " + std::to_string(high));
    return *n;
  }
  /// The value as a comma-separated list of `what` (sizes, counts) within [low, high], K and M
  /// allowed; an empty list or element is a usage error.
  std::vector<std::size_t> list_value(std::size_t low, std::size_t high, std::string_view what = "sizes") {
    std::vector<std::size_t> out;
    for (auto part : split(value())) {
      const auto n = number(part, low, high, true);
      if (!n) {
        bad_value("a comma-separated list of " + std::string(what) + " from " + std::to_string(low) + " to " +
                  std::to_string(high));
      }
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

}  // namespace cli
