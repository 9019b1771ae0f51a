// kv_client's bench: the same GETs one-sided and two-sided over one connection, one at a
// time, so the two latencies compare directly.
#pragma once

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv_connection.hpp"
#include "percentile.hpp"

namespace kv {

struct bench_options {
  std::size_t ops = 2000, keys = 100, value_size = 64;
  one_sided_options get;
};

struct latency_summary {
  double p50_us = 0, p99_us = 0, ops_per_second = 0;
};

struct bench_result {
  latency_summary one_sided, two_sided;
  get_stats stats;
};

namespace detail {
inline latency_summary summarize(::stats::reservoir<double>& us) {
  return {us.percentile(0.5), us.percentile(0.99), static_cast<double>(us.count()) / (us.sum() / 1e6)};
}
inline std::string bench_key(std::size_t k) {
  return "bench-" + std::to_string(k);
}
inline std::vector<std::byte> bench_value(std::size_t k, std::size_t size) {
  std::vector<std::byte> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>('a' + (k + i) % 26);
  return v;
}
}  // namespace detail

/// PUTs `o.keys` keys, then GETs them `o.ops` times each way, checking every value.
inline boost::asio::awaitable<bench_result> run_bench(connection& c, const bench_options& o,
                                                      activity& progress) {
  for (std::size_t k = 0; k < o.keys; ++k) {
    const auto key = detail::bench_key(k);
    const auto v = detail::bench_value(k, o.value_size);
    if (co_await c.put(key, v) != status::ok) {
      throw std::runtime_error(std::string("the table is full: ") + connection::table_full_advice);
    }
    ++progress.operations;
  }
  bench_result result;
  // --ops goes up to 100 million: a bounded sample of the latencies, not all of them.
  ::stats::reservoir<double> one_sided, two_sided;
  for (int two = 0; two < 2; ++two) {
    auto& samples = two ? two_sided : one_sided;
    for (std::size_t i = 0; i < o.ops; ++i) {
      const std::size_t k = i % o.keys;
      const auto key = detail::bench_key(k);
      const auto t0 = std::chrono::steady_clock::now();
      std::optional<connection::value> v;
      if (two) {  // not a ?: expression: g++ 12 mishandles co_await inside one
        v = co_await c.get_two_sided(key);
      } else {
        v = co_await c.get_one_sided(key, result.stats, o.get);
      }
      samples.add(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      ++progress.operations;
      if (!v || *v != detail::bench_value(k, o.value_size)) {
        throw std::runtime_error(key + ": GET " + (two ? "by request" : "one-sided") +
                                 (v ? " returned another value" : " found nothing") +
                                 " (is another client changing the bench keys?)");
      }
    }
  }
  result.one_sided = detail::summarize(one_sided);
  result.two_sided = detail::summarize(two_sided);
  co_return result;
}

}  // namespace kv
