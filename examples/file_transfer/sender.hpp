// The sending half of a connection's data path: reads a file through io_uring, computes its
// checksum on the way (on a thread of its own, while the next slot is read), and moves the bytes into the
// receiver's window with RDMA WRITE with immediate, several slots in flight, reusing a slot when the receiver
// credits it back.
#pragma once

#include <boost/asio/random_access_file.hpp>
#include <boost/asio/read_at.hpp>
#include <boost/asio/steady_timer.hpp>
#include <coverbs/registered_memory.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "channel.hpp"
#include "hasher.hpp"
#include "progress.hpp"
#include "whole_slot.hpp"

namespace ft {

class sender {
 public:
  explicit sender(channel& ch) : ch_(ch) {}

  /// Sends `size` bytes of `file` (called `name` in errors) to where the receiver's `area`
  /// says, then `done` with their digest, and waits for the receiver's verdict. Returns the
  /// digest; throws transfer_error.
  asio::awaitable<digest> send(asio::random_access_file& file, std::uint64_t size, const std::string& name,
                               const window& area, checksum_kind check, const progress_fn& progress) {
    hasher hash(ch_.socket().get_executor(), check);  // before send_window's hashes: outlives them
    co_await send_window(file, size, name, area, hash, progress);
    auto [ec, sum] = co_await hash.async_finish(asio::as_tuple(asio::use_awaitable));
    if (ec) throw_hash_failure(name, check);
    co_await ch_.send(msg::done(sum));
    for (;;) {  // credits still on their way are of no use now
      const message m = co_await ch_.receive();
      if (m.kind == type::ok) co_return sum;
      if (m.kind == type::error)
        throw transfer_error(transfer_error::origin::peer, ch_.peer() + ": " + m.text);
      if (m.kind != type::credit)
        throw transfer_error(transfer_error::origin::connection, "the " + ch_.peer() + " broke the protocol");
    }
  }

 private:
  // The local side of the window, and the WRITEs under way from it. Their completions hold
  // it, so neither the memory nor its registration goes away under a WRITE, whatever
  // becomes of the transfer that started it.
  struct flight {
    flight(coverbs::socket& s, const window& w)
        : area(w),
          memory(std::size_t{w.slots} * w.slot_size),
          busy(w.slots, false),
          hashing(w.slots, false),
          wake(s.get_executor()) {
      registration = s.register_memory(memory, coverbs::verbs::access::none);
    }
    window area;
    std::vector<std::byte> memory;
    coverbs::registered_memory registration;  // after `memory`: deregistered before it is freed
    std::vector<bool> busy;                   // a WRITE from this slot's buffer is under way
    std::vector<bool> hashing;                // so is hashing it
    bool hash_failed = false;
    std::uint32_t writing = 0;
    std::uint64_t sent = 0;  // bytes whose WRITE completed
    coverbs::error_code failure;
    asio::steady_timer wake;  // cancelled when a WRITE completes

    asio::awaitable<void> next_completion() {
      wake.expires_at(asio::steady_timer::time_point::max());
      co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  };

  asio::awaitable<void> read_chunk(asio::random_access_file& file, std::uint64_t offset, std::byte* into,
                                   std::size_t n, const std::string& name) {
    auto [ec, got] = co_await asio::async_read_at(file, offset, asio::buffer(into, n), whole_slot,
                                                  asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::eof)
      throw transfer_error(transfer_error::origin::local, name + " shrank while being sent");
    if (ec) throw transfer_error(transfer_error::origin::local, "cannot read " + name + ": " + ec.message());
    if (got != n) throw transfer_error(transfer_error::origin::local, name + " shrank while being sent");
  }

  asio::awaitable<void> send_window(asio::random_access_file& file, std::uint64_t size,
                                    const std::string& name, const window& area, hasher& hash,
                                    const progress_fn& progress) {
    if (!flight_ || flight_->area.slots != area.slots || flight_->area.slot_size != area.slot_size) {
      flight_ = std::make_shared<flight>(ch_.socket(), area);
    }
    flight_->area = area;
    flight_->sent = 0;
    flight_->hashing.assign(area.slots, false);  // a failed transfer's hasher dropped the rest
    std::shared_ptr<flight> f = flight_;
    std::vector<std::uint32_t> free;
    for (std::uint32_t s = area.slots; s > 0; --s) free.push_back(s - 1);
    std::vector<bool> granted(area.slots, true);
    std::uint64_t offset = 0;
    while (offset < size) {
      while (free.empty()) {
        const message m = co_await ch_.receive();
        if (m.kind == type::error)
          throw transfer_error(transfer_error::origin::peer, ch_.peer() + ": " + m.text);
        if (m.kind != type::credit)
          throw transfer_error(transfer_error::origin::connection,
                               "the " + ch_.peer() + " broke the protocol");
        for (auto s : m.slots) {
          if (s >= area.slots || granted[s]) {
            throw transfer_error(transfer_error::origin::connection,
                                 "the " + ch_.peer() + " credited a bad slot");
          }
          granted[s] = true;
          free.push_back(s);
        }
      }
      if (f->failure) co_await ch_.failed(f->failure);
      const std::uint32_t slot = free.back();
      free.pop_back();
      granted[slot] = false;
      // The receiver may credit a slot before this side has seen its WRITE complete, or hashed it.
      while ((f->busy[slot] || f->hashing[slot]) && !f->failure) co_await f->next_completion();
      if (f->failure) co_await ch_.failed(f->failure);
      if (f->hash_failed) throw_hash_failure(name, hash.kind());

      const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(area.slot_size, size - offset));
      const std::size_t at = std::size_t{slot} * area.slot_size;
      co_await read_chunk(file, offset, f->memory.data() + at, n, name);
      f->hashing[slot] = true;
      hash.async_update(std::span(f->memory.data() + at, n), [f, slot](coverbs::error_code ec) {
        f->hashing[slot] = false;
        if (ec) f->hash_failed = true;
        f->wake.cancel();
      });
      f->busy[slot] = true;
      ++f->writing;
      ch_.socket().async_write_with_immediate(
          f->registration.slice(at, n), area.where.sub(static_cast<std::uint32_t>(at), n), immediate(slot, n),
          [f, slot, n](coverbs::error_code ec, std::size_t) {
            f->busy[slot] = false;
            --f->writing;
            if (ec && !f->failure) f->failure = ec;
            if (!ec) f->sent += n;
            f->wake.cancel();
          });
      offset += n;
      ch_.activity();
      progress(f->sent);
    }
    while (f->writing > 0) {
      co_await f->next_completion();
      ch_.activity();
      progress(f->sent);
    }
    if (f->failure) co_await ch_.failed(f->failure);
  }

  channel& ch_;
  std::shared_ptr<flight> flight_;
};

}  // namespace ft
