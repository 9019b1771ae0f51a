// A fixed-capacity copy of an Asio buffer sequence, so a pending operation can keep it without
// templates or allocation.
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

namespace coverbs::detail {

/// Room for `N` buffers that construction leaves unset. An array of Asio buffers zeroes every
/// element (their default constructors): hundreds of instructions per operation for room that
/// mostly stays unused. Only slots stored to are read.
template <class Buffer, std::size_t N>
union buffer_slots {
  buffer_slots() noexcept {}  // NOLINT(modernize-use-equals-default): defaulted, it is deleted

  Buffer& operator[](std::size_t i) noexcept { return items[i]; }
  const Buffer& operator[](std::size_t i) const noexcept { return items[i]; }
  /// Stores `b` in slot `i`: the one place slots are written. (Until C++26's trivial unions,
  /// P3074, the language has no way to begin one element's lifetime in a union's array member
  /// whose type has a default constructor of its own; the buffers are plain values, and
  /// compilers treat them so.)
  void set(std::size_t i, const Buffer& b) noexcept { items[i] = b; }

  Buffer items[N];
};

/// An array with buffer_slots' set(), for buffers that are not plain values.
template <class Buffer, std::size_t N>
struct buffer_array : std::array<Buffer, N> {
  void set(std::size_t i, const Buffer& b) { (*this)[i] = b; }
};

/// buffer_slots where buffers are plain values; an array where Asio's buffer debugging (on
/// with _GLIBCXX_DEBUG) gives them a std::function to check their memory with (there, copies
/// allocate, and a failure to allocate in a noexcept copy below ends the program).
template <class Buffer, std::size_t N>
using buffer_storage =
    std::conditional_t<std::is_trivially_copyable_v<Buffer> && std::is_trivially_destructible_v<Buffer>,
                       buffer_slots<Buffer, N>, buffer_array<Buffer, N>>;

template <class Buffer>
class buffer_list {
 public:
  static constexpr std::size_t capacity = 16;

  /// Takes at most `capacity` buffers of `sequence`, skipping empty ones; a *_some operation
  /// may move fewer bytes than offered, so the rest of a longer sequence can wait (a message
  /// cannot: see truncated).
  template <class Sequence>
  explicit buffer_list(const Sequence& sequence) {
    auto it = boost::asio::buffer_sequence_begin(sequence);
    const auto end = boost::asio::buffer_sequence_end(sequence);
    for (; it != end && count_ < capacity; ++it) {
      Buffer b(*it);
      if (b.size() > 0) buffers_.set(count_++, b);
    }
    for (; it != end && !truncated_; ++it) truncated_ = Buffer(*it).size() > 0;
  }
  buffer_list() = default;
  /// Copies only the buffers still held.
  buffer_list(const buffer_list& other) noexcept { *this = other; }
  buffer_list& operator=(const buffer_list& other) noexcept {
    const std::size_t from = other.first_, to = other.count_;
    // To the front, in order: onto itself too, where each slot is read before it is written.
    for (std::size_t i = from; i < to; ++i) buffers_.set(i - from, other.buffers_[i]);
    count_ = to - from;
    first_ = 0;
    truncated_ = other.truncated_;
    return *this;
  }
  /// Whether the sequence held more than `capacity` non-empty buffers, so that the list holds
  /// only part of it.
  bool truncated() const noexcept { return truncated_; }

  std::size_t bytes() const noexcept {
    std::size_t total = 0;
    for (std::size_t i = first_; i < count_; ++i) total += buffers_[i].size();
    return total;
  }
  bool empty() const noexcept { return first_ == count_; }

  /// The first `limit` bytes (fewer if the list holds fewer) as buffers in `out` (room for
  /// `capacity`), consuming nothing; returns how many buffers that took.
  std::size_t view_front(std::size_t limit, std::span<Buffer> out) const noexcept {
    return visit_front(limit, [&](std::size_t i, Buffer b) { out[i] = b; });
  }

  /// Calls `see(index, piece)` for each buffer of the first `limit` bytes, as view_front
  /// would store them; returns how many it saw.
  template <class See>
  std::size_t visit_front(std::size_t limit, See see) const noexcept {
    std::size_t used = 0;
    for (std::size_t i = first_; i < count_ && limit > 0; ++i) {
      const Buffer piece(buffers_[i].data(), std::min(limit, buffers_[i].size()));
      see(used++, piece);
      limit -= piece.size();
    }
    return used;
  }

  /// Copies up to `n` bytes from the front into `out`, consuming them; returns the count.
  std::size_t take(std::byte* out, std::size_t n) noexcept {
    return consume_front(
        n, [&](const Buffer& b, std::size_t done, std::size_t k) { std::memcpy(out + done, b.data(), k); });
  }

  /// Copies up to `n` bytes, from `from` bytes into the list on, into `out`, consuming
  /// nothing; returns the count.
  std::size_t copy(std::size_t from, std::size_t n, std::byte* out) const noexcept {
    buffer_list rest = *this;
    rest.consume(from);
    return rest.take(out, n);
  }

  /// Drops up to `n` bytes from the front (they were used where they are).
  void consume(std::size_t n) noexcept {
    consume_front(n, [](const Buffer&, std::size_t, std::size_t) {});
  }

  /// Copies up to `n` bytes of `in` into the front, consuming that space; returns the count.
  std::size_t put(const std::byte* in, std::size_t n) noexcept
    requires std::is_same_v<Buffer, boost::asio::mutable_buffer>
  {
    return consume_front(
        n, [&](const Buffer& b, std::size_t done, std::size_t k) { std::memcpy(b.data(), in + done, k); });
  }

 private:
  /// Consumes up to `n` bytes from the front; `use(piece, bytes_before, length)` sees the first
  /// `length` bytes of each piece before they go. Returns the bytes consumed.
  template <class Use>
  std::size_t consume_front(std::size_t n, Use use) noexcept {
    std::size_t done = 0;
    while (done < n && first_ < count_) {
      auto& b = buffers_[first_];
      const std::size_t k = std::min(n - done, b.size());
      use(b, done, k);
      done += k;
      b += k;
      if (b.size() == 0) ++first_;
    }
    return done;
  }

  buffer_storage<Buffer, capacity> buffers_;
  std::size_t count_ = 0;
  std::size_t first_ = 0;
  bool truncated_ = false;
};

using const_buffer_list = buffer_list<boost::asio::const_buffer>;
using mutable_buffer_list = buffer_list<boost::asio::mutable_buffer>;

}  // namespace coverbs::detail
