// Latency percentiles, one definition for the examples and the benchmarks alike, and the
// samples they are taken from kept in bounded memory. Free of coverbs and Boost headers, so
// the plain-Asio benchmark baseline uses it too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace stats {

/// Where the nearest-rank percentile `p` (0 < p <= 1) lies among `n` > 0 sorted samples: the
/// ceil(p·n)-th smallest, the least value with at least a fraction p of them at or below it. So
/// p99 of 2 samples is the larger one, p50 of 2 the smaller one.
inline std::size_t nearest_rank(std::size_t n, double p) {
  // p·n a hair above a whole number from rounding (0.07 × 100 is 7.000000000000001) must not
  // take the next sample.
  const double rank = std::ceil(p * static_cast<double>(n) - 1e-9);
  if (rank < 1) return 0;
  return std::min(n - 1, static_cast<std::size_t>(rank) - 1);
}

/// The nearest-rank percentile `p` of `sorted` (ascending); 0 when there are none.
template <class T>
T percentile(const std::vector<T>& sorted, double p) {
  return sorted.empty() ? T{} : sorted[nearest_rank(sorted.size(), p)];
}

/// Samples in bounded memory, for runs of any length: every one up to `capacity`, then a
/// uniform random sample of that many (Vitter's algorithm R), which percentiles come from: with
/// a million kept, p99.9 is typically within 0.003 percentiles of the exact one. The count,
/// the sum and the largest sample stay exact.
template <class T>
class reservoir {
 public:
  reservoir() : reservoir(1'000'000) {}
  explicit reservoir(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {}

  void add(T sample) {
    max_ = count_ == 0 ? sample : std::max(max_, sample);
    ++count_;
    sum_ += static_cast<double>(sample);
    if (kept_.size() < capacity_) {
      kept_.push_back(sample);
      sorted_ = false;
      return;
    }
    const auto slot = std::uniform_int_distribution<std::size_t>(0, count_ - 1)(random_);
    if (slot < capacity_) {
      kept_[slot] = sample;
      sorted_ = false;
    }
  }

  /// Room for `n` samples (at most the capacity), so that adding them allocates nothing: a
  /// benchmark that counts allocations per operation reserves before it measures.
  void reserve(std::size_t n) { kept_.reserve(std::min(n, capacity_)); }

  std::size_t count() const noexcept { return count_; }
  double sum() const noexcept { return sum_; }
  /// The largest sample; 0 when there are none.
  T max() const noexcept { return max_; }
  /// The nearest-rank percentile `p` of the samples kept; 0 when there are none.
  T percentile(double p) {
    if (!sorted_) std::sort(kept_.begin(), kept_.end());
    sorted_ = true;
    return stats::percentile(kept_, p);
  }

 private:
  std::size_t capacity_, count_ = 0;
  double sum_ = 0;
  T max_{};
  std::vector<T> kept_;
  bool sorted_ = true;
  std::mt19937_64 random_;  // the default seed: which samples stand for the rest is no secret
};

}  // namespace stats
