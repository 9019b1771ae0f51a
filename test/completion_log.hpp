// Records how many operations started at once complete: each one's result, and the order in
// which their handlers ran.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "one_sided_tests.hpp"

namespace coverbs::test {

struct completion_log {
  std::vector<outcome> results;
  std::vector<std::size_t> order;
  std::function<void()> after_each;  ///< runs inside each handler, after it was recorded

  explicit completion_log(std::size_t n) : results(n) {}
  /// The handler of operation `i` (size and value signatures alike).
  auto handler(std::size_t i) {
    return [this, i](error_code ec, auto value) {
      results[i] = {true, ec, static_cast<std::uint64_t>(value)};
      order.push_back(i);
      if (after_each) after_each();
    };
  }
  bool all_done() const { return order.size() == results.size(); }
};

}  // namespace coverbs::test
