// The sending side's buffers, registered on the connection, and the reads, hashes and WRITEs
// under way from them. A buffer is not tied to a window slot: the receiver's credit frees a
// slot, the local completions of a buffer's WRITE and hash free the buffer, so the next reads
// can go on while every slot is in the receiver's hands.
#pragma once

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/random_access_file.hpp>
#include <boost/asio/read_at.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <coverbs/registered_memory.hpp>
#include <coverbs/socket.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "channel.hpp"
#include "protocol.hpp"
#include "registration.hpp"
#include "whole_slot.hpp"

namespace ft {

/// A piece of the file on its way out: `bytes` from `offset`, read into buffer `buffer`.
struct chunk {
  std::uint32_t buffer;
  std::uint64_t offset;
  std::uint32_t bytes;
};

/// Most memory one sender's buffers take unless told otherwise, whatever window the receiver
/// offers: it is the receiver that chooses the window (up to 128 slots of 16 MiB).
constexpr std::size_t default_send_memory = std::size_t{64} << 20;

/// The buffers a transfer reads its file into: how many, and the bytes of each, which is also
/// the most one WRITE carries.
struct buffer_plan {
  std::uint32_t count = 0;
  std::uint32_t size = 0;
};

/// The completions hold these, so neither the memory nor its registration goes away under a
/// read or a WRITE, whatever becomes of the transfer that started it. Used on the connection's
/// thread only.
struct send_buffers {
  /// Reads kept going ahead of the WRITEs, so that a WRITE's post (over Soft-RoCE it does the
  /// transfer's packet work in the posting thread's system call, ~25 ms a MiB in the test bed
  /// VM) does not wait for the next slot's read.
  static constexpr std::uint32_t read_ahead = 2;

  /// The buffers `p` plans, registered on `s`. Throws transfer_error where they cannot be.
  send_buffers(coverbs::socket& s, const buffer_plan& p)
      : count(p.count),
        size(p.size),
        memory(std::size_t{count} * size),
        writing(count, false),
        hashing(count, false),
        reading(count, false),
        read(count),
        wake(s.get_executor()) {
    registration = register_buffers(s, memory, coverbs::verbs::access::none, "send buffers");
  }

  struct read_result {
    coverbs::error_code ec;
    std::size_t bytes = 0;
  };
  std::uint32_t count;                      ///< buffers
  std::uint32_t size;                       ///< bytes each
  std::vector<std::byte> memory;            ///< the buffers, one after another
  coverbs::registered_memory registration;  // after `memory`: deregistered before it is freed
  std::vector<bool> writing;                // a WRITE from this buffer is under way
  std::vector<bool> hashing;                // so is hashing it
  std::vector<bool> reading;                // and the read into it
  std::vector<read_result> read;            // the last read's outcome
  bool hash_failed = false;                 // a hash update failed
  std::uint32_t writes = 0, reads = 0;      // under way
  std::uint64_t sent = 0;                   // bytes whose WRITE completed
  coverbs::error_code failure;              // the first WRITE that failed
  asio::steady_timer wake;                  // cancelled when a read, a hash or a WRITE completes

  /// Where buffer `b` starts in `memory` (and in the registration).
  std::size_t offset(std::uint32_t b) const { return std::size_t{b} * size; }
  /// Buffer `b`'s bytes.
  std::byte* buffer(std::uint32_t b) { return memory.data() + offset(b); }
  /// Where `c` lies in the registration: the local side of its WRITE.
  coverbs::verbs::local_buffer local(const chunk& c) const {
    return registration.slice(offset(c.buffer), c.bytes);
  }
  /// Whether nothing is under way in buffer `b` (a chunk may still wait in it to be sent).
  bool idle(std::uint32_t b) const { return !writing[b] && !hashing[b] && !reading[b]; }
  /// Waits until a read, a hash or a WRITE completes; one that completed before the wait does
  /// not end it, so callers check what they await first.
  asio::awaitable<void> next_completion() {
    wake.expires_at(asio::steady_timer::time_point::max());
    co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
  }
};

/// The buffers for sending `file_size` bytes into `area`: one per slot and `read_ahead` more,
/// but never more than the file has chunks, none larger than the file, and all together no
/// more than `max_memory`, beyond which chunks get fewer, then smaller than a slot (a WRITE
/// may fill a slot in part). A receiver offering a large window for a small file, or a huge
/// one, thus costs the sender no more memory than the file needs, or than it allows.
inline buffer_plan plan_buffers(const window& area, std::uint64_t file_size, std::size_t max_memory) {
  const std::uint64_t chunk = std::max<std::uint64_t>(
      1, std::min<std::uint64_t>({area.slot_size, file_size, std::max<std::size_t>(max_memory, 1)}));
  const std::uint64_t chunks = std::max<std::uint64_t>(1, (file_size + chunk - 1) / chunk);
  const std::uint64_t count =
      std::min<std::uint64_t>({std::uint64_t{area.slots} + send_buffers::read_ahead, chunks,
                               std::max<std::uint64_t>(1, max_memory / chunk)});
  return {static_cast<std::uint32_t>(count), static_cast<std::uint32_t>(chunk)};
}

/// Starts reading `c` into its buffer; `f` records how it went.
inline void start_read(const std::shared_ptr<send_buffers>& f, asio::random_access_file& file,
                       const chunk& c) {
  f->reading[c.buffer] = true;
  ++f->reads;
  // The file's executor is the disk's: the buffers are the connection's.
  asio::async_read_at(
      file, c.offset, asio::buffer(f->buffer(c.buffer), c.bytes), whole_slot,
      asio::bind_executor(f->wake.get_executor(), [f, b = c.buffer](coverbs::error_code ec, std::size_t got) {
        f->reading[b] = false;
        f->read[b] = {ec, got};
        --f->reads;
        f->wake.cancel();
      }));
}

/// Waits for the read of `c`; throws transfer_error if it failed or came short.
inline asio::awaitable<void> finish_read(send_buffers& f, const chunk& c, const std::string& name) {
  while (f.reading[c.buffer]) co_await f.next_completion();
  const auto& [ec, got] = f.read[c.buffer];
  if (ec && ec != asio::error::eof)
    throw transfer_error(transfer_error::origin::local, "cannot read " + name + ": " + ec.message());
  if (got != c.bytes) throw transfer_error(transfer_error::origin::local, name + " shrank while being sent");
}

/// Whether `file` reads a byte at `size`: it holds more than `size` bytes, whatever its size
/// said (a file grown since, or one of /proc's, whose size says 0).
inline bool reads_past(asio::random_access_file& file, std::uint64_t size) {
  std::byte probe;
  boost::system::error_code ec;
  return file.read_some_at(size, asio::buffer(&probe, 1), ec) > 0;
}

/// A buffer with nothing under way and no chunk of `ahead` waiting in it, if any.
inline std::optional<std::uint32_t> idle_buffer(const send_buffers& f, const std::deque<chunk>& ahead) {
  for (std::uint32_t b = 0; b < f.count; ++b) {
    if (f.idle(b) && std::none_of(ahead.begin(), ahead.end(), [b](const chunk& c) { return c.buffer == b; }))
      return b;
  }
  return std::nullopt;
}

}  // namespace ft
