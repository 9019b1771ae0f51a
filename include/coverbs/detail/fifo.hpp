// A first-in first-out queue that keeps its memory. std::deque frees a block and allocates the
// next every few hundred bytes of traffic, so a connection's queues would allocate in steady
// state; this one grows to the largest backlog seen and then only reuses.
#pragma once

#include <algorithm>
#include <boost/circular_buffer.hpp>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace coverbs::detail {

template <class T>
class fifo {
 public:
  bool empty() const noexcept { return items_.empty(); }
  std::size_t size() const noexcept { return items_.size(); }
  T& front() noexcept { return items_.front(); }
  const T& front() const noexcept { return items_.front(); }
  /// The `i`-th oldest element.
  T& operator[](std::size_t i) noexcept { return items_[i]; }
  auto begin() noexcept { return items_.begin(); }
  auto end() noexcept { return items_.end(); }
  auto begin() const noexcept { return items_.begin(); }
  auto end() const noexcept { return items_.end(); }

  /// The element whose `number` member is `number`, for elements numbered consecutively in
  /// the order they came (so the front's tells where any is); null where it has left or has
  /// not come.
  T* find_numbered(std::uint64_t number) noexcept {
    if (items_.empty() || number < items_.front().number) return nullptr;
    const std::uint64_t index = number - items_.front().number;
    return index < items_.size() ? &items_[index] : nullptr;
  }

  void push_back(T value) {
    if (items_.full()) items_.set_capacity(std::max<std::size_t>(initial_capacity, 2 * items_.capacity()));
    items_.push_back(std::move(value));
  }
  void pop_front() noexcept { items_.pop_front(); }
  /// Empties the queue and hands its elements over (their memory goes with them).
  fifo take() noexcept { return std::exchange(*this, fifo()); }

 private:
  static constexpr std::size_t initial_capacity = 16;
  boost::circular_buffer<T> items_;
};

}  // namespace coverbs::detail
