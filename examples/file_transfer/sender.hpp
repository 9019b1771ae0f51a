// The sending half of a connection's data path: reads a file through io_uring (a few slots
// ahead, on the disk's thread), computes its checksum on the way (on a thread of its own), and
// moves the bytes into the receiver's window with RDMA WRITE with immediate, several slots in
// flight, reusing a slot when the receiver credits it back.
#pragma once

#include <boost/asio/random_access_file.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "channel.hpp"
#include "hasher.hpp"
#include "progress.hpp"
#include "send_buffers.hpp"

namespace ft {

class sender {
 public:
  /// Its buffers take at most `max_memory` bytes (plan_buffers).
  explicit sender(channel& ch, std::size_t max_memory = default_send_memory)
      : ch_(ch), max_memory_(max_memory) {}

  /// Makes the buffers for sending `file_size` bytes into a window of `slots` slots of
  /// `slot_size` bytes before the receiver offers one (allocating and registering them takes a
  /// while, and the receiver is busy creating the file meanwhile); `send` makes them again if
  /// its window needs more. Throws std::system_error.
  void prepare(std::uint32_t slots, std::uint32_t slot_size, std::uint64_t file_size) {
    fit_buffers(plan_buffers({slots, slot_size, {}}, file_size, max_memory_));
  }

  /// Sends `size` bytes of `file` (called `name` in errors) to where the receiver's `area`
  /// says, then `done` with their digest, and waits for the receiver's verdict. Returns the
  /// digest; throws transfer_error.
  asio::awaitable<digest> send(asio::random_access_file& file, std::uint64_t size, const std::string& name,
                               const window& area, checksum_kind check, const progress_fn& progress) {
    hasher hash(ch_.socket().get_executor(), check);  // before send_window's hashes: outlives them
    co_await send_window(file, size, name, area, hash, progress);
    // A file that grew meanwhile would arrive cut to its old size, verified: refused instead,
    // as one that shrank is.
    if (reads_past(file, size))
      throw transfer_error(transfer_error::origin::local, name + " grew while being sent");
    auto [ec, sum] = co_await hash.async_finish(asio::as_tuple(asio::use_awaitable));
    // The last update's handler ran before this one: the hasher completes in order.
    if (ec || buffers_->hash_failed) throw_hash_failure(name, check);
    co_await ch_.send(msg::done(sum));
    for (;;) {  // credits still on their way are of no use now, and busy says only "wait"
      const message m = co_await ch_.receive();
      if (m.kind == type::ok) co_return sum;
      if (m.kind == type::error)
        throw transfer_error(transfer_error::origin::peer, ch_.peer() + ": " + m.text);
      if (m.kind != type::credit && m.kind != type::busy)
        throw transfer_error(transfer_error::origin::connection, "the " + ch_.peer() + " broke the protocol");
    }
  }

 private:
  // A slot the receiver granted: one of `free`, or the next one it credits.
  asio::awaitable<std::uint32_t> granted_slot(std::vector<std::uint32_t>& free, std::vector<bool>& granted,
                                              const window& area) {
    while (free.empty()) {
      const message m = co_await ch_.receive();
      if (m.kind == type::error)
        throw transfer_error(transfer_error::origin::peer, ch_.peer() + ": " + m.text);
      if (m.kind != type::credit)
        throw transfer_error(transfer_error::origin::connection, "the " + ch_.peer() + " broke the protocol");
      for (auto s : m.slots) {
        if (s >= area.slots || granted[s])
          throw transfer_error(transfer_error::origin::connection,
                               "the " + ch_.peer() + " credited a bad slot");
        granted[s] = true;
        free.push_back(s);
      }
    }
    const std::uint32_t slot = free.back();
    free.pop_back();
    granted[slot] = false;
    co_return slot;
  }

  // Buffers for `plan`, made anew unless those there are as many and as large or more (all
  // within max_memory_ too) and no read goes on into them (a failed transfer may have left
  // some).
  void fit_buffers(const buffer_plan& plan) {
    if (!buffers_ || buffers_->count < plan.count || buffers_->size < plan.size || buffers_->reads > 0) {
      buffers_.reset();  // first: unless a completion holds them still, the old ones are freed
      buffers_ = std::make_shared<send_buffers>(ch_.socket(), plan);
    }
  }

  asio::awaitable<void> send_window(asio::random_access_file& file, std::uint64_t size,
                                    const std::string& name, const window& area, hasher& hash,
                                    const progress_fn& progress) {
    const buffer_plan plan = plan_buffers(area, size, max_memory_);
    fit_buffers(plan);
    buffers_->sent = 0;
    buffers_->hashing.assign(buffers_->count, false);  // a failed transfer's hasher dropped the rest
    std::shared_ptr<send_buffers> f = buffers_;        // the completions hold it too
    std::vector<std::uint32_t> free;
    for (std::uint32_t s = area.slots; s > 0; --s) free.push_back(s - 1);
    std::vector<bool> granted(area.slots, true);
    std::deque<chunk> ahead;  // read or being read, in file order
    std::uint64_t read_to = 0, offset = 0;
    while (offset < size) {
      while (read_to < size && ahead.size() < send_buffers::read_ahead) {
        const auto b = idle_buffer(*f, ahead);
        if (!b) break;
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(plan.size, size - read_to));
        ahead.push_back({*b, read_to, n});
        start_read(f, file, ahead.back());
        read_to += n;
      }
      if (ahead.empty()) {  // every buffer is being sent or hashed
        co_await f->next_completion();
      } else {
        const std::uint32_t slot = co_await granted_slot(free, granted, area);
        const chunk c = ahead.front();
        co_await finish_read(*f, c, name);
        ahead.pop_front();
        if (f->failure) co_await ch_.failed(f->failure);
        if (f->hash_failed) throw_hash_failure(name, hash.kind());
        const std::span bytes(f->buffer(c.buffer), c.bytes);
        f->hashing[c.buffer] = true;
        hash.async_update(bytes, [f, b = c.buffer](coverbs::error_code ec) {
          f->hashing[b] = false;
          if (ec) f->hash_failed = true;
          f->wake.cancel();
        });
        f->writing[c.buffer] = true;
        ++f->writes;
        const std::uint32_t at = slot * area.slot_size;
        ch_.socket().async_write_with_immediate(
            f->local(c), area.where.sub(at, c.bytes), immediate(slot, c.bytes),
            [f, b = c.buffer, n = c.bytes](coverbs::error_code ec, std::size_t) {
              f->writing[b] = false;
              --f->writes;
              if (ec && !f->failure) f->failure = ec;
              if (!ec) f->sent += n;
              f->wake.cancel();
            });
        offset += c.bytes;
      }
      if (f->failure) co_await ch_.failed(f->failure);
      ch_.activity();
      progress(f->sent);
    }
    while (f->writes > 0) {
      co_await f->next_completion();
      ch_.activity();
      progress(f->sent);
    }
    if (f->failure) co_await ch_.failed(f->failure);
  }

  channel& ch_;
  std::size_t max_memory_;
  std::shared_ptr<send_buffers> buffers_;
};

}  // namespace ft
