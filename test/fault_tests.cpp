// The bodies declared in fault_tests.hpp, compiled once for both transports' tests.

#include "fault_tests.hpp"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>

#include "completion_log.hpp"
#include "connected_pair.hpp"
#include "one_sided_tests.hpp"
#include "resource_usage.hpp"

namespace coverbs::test {

void close_during_one_sided(transport kind, bool requester_closes, close_point when,
                            std::chrono::seconds limit) {
  connected_pair p(kind);
  constexpr std::size_t ops = 400, size = 64 * 1024;
  guarded_region target(p.b, ops * size + 8, all_remote_rights);  // the operations' slots, then a counter
  for (std::size_t i = 0; i < ops * size; ++i) target.region()[i] = static_cast<std::byte>(i % 249);
  target.set_word(ops * size, 0);
  const auto counter = target.remote(ops * size, 8);
  local_memory local(p.a, ops * size);
  socket& closing = requester_closes ? p.a : p.b;
  completion_log log(ops);
  if (when == close_point::in_handler) {
    log.after_each = [&] {
      if (log.order.size() == 10) closing.close();
    };
  }
  for (std::size_t i = 0; i < ops; ++i) {
    const auto mine = local.slice(i * size, size);
    switch (i % 3) {
      case 0: p.a.async_read(mine, target.remote(i * size, size), log.handler(i)); break;
      case 1: p.a.async_write(mine, target.remote(i * size, size), log.handler(i)); break;
      default: p.a.async_fetch_add(local.slice(i * size, 8), counter, 1, log.handler(i)); break;
    }
  }
  if (when == close_point::at_once) closing.close();
  run_until_done(
      p.io, [&] { return log.all_done(); }, limit);

  std::vector<std::size_t> in_order(ops);
  std::iota(in_order.begin(), in_order.end(), 0);
  BOOST_TEST(log.order == in_order, boost::test_tools::per_element());
  std::size_t succeeded = 0;
  while (succeeded < ops && !log.results[succeeded].ec) ++succeeded;
  std::cout << (requester_closes ? "requester" : "responder")
            << (when == close_point::at_once ? " closed at once: " : " closed in a handler: ") << succeeded
            << " of " << ops << " operations succeeded, the rest ended with "
            << log.results[ops - 1].ec.message() << std::endl;
  const bool ended_at_once = requester_closes || kind == transport::tcp;
  if (when == close_point::at_once && ended_at_once) BOOST_TEST(succeeded < ops);  // some were queued
  if (when == close_point::in_handler) BOOST_TEST(succeeded >= 10u);
  std::uint64_t adds = 0;
  for (std::size_t i = 0; i < ops; ++i) {
    const outcome& o = log.results[i];
    BOOST_TEST_CONTEXT("operation " << i) {
      if (i >= succeeded) {
        BOOST_TEST(
            (o.ec == make_error_code(wc_errc::flushed) || o.ec == make_error_code(wc_errc::retry_exceeded) ||
             (requester_closes && o.ec == asio::error::operation_aborted)),
            o.ec.message());
        continue;
      }
      if (i % 3 == 0) {
        BOOST_TEST(o.value == size);
        for (std::size_t j = 0; j < size; ++j) {
          if (local.bytes[i * size + j] != static_cast<std::byte>((i * size + j) % 249)) {
            BOOST_ERROR("read " << i << " brought wrong bytes");
            break;
          }
        }
      } else if (i % 3 == 2) {
        BOOST_TEST(o.value == adds++);  // the atomics took effect once each, in order
      }
    }
  }
  BOOST_TEST(target.guards_untouched());
  if (!requester_closes) {  // the connection has failed (over RDMA, soon): a new operation ends at once
    const auto deadline = std::chrono::steady_clock::now() + limit;
    outcome later;
    do {
      later = {};
      p.a.async_read(local.slice(0, 64), target.remote(0, 64), record(later));
      run_until_done(
          p.io, [&] { return later.done; }, limit);
    } while (!later.ec && !ended_at_once && std::chrono::steady_clock::now() < deadline);
    BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
  }
}

void slow_reader_holds_the_writer_back(transport kind, const slow_reader_setup& setup,
                                       std::chrono::seconds limit) {
  const std::size_t total = setup.total, ahead_limit = setup.ahead_limit;
  const auto pause = setup.pause;
  connected_pair p(kind, setup.options);
  auto longest_write = std::chrono::steady_clock::duration::zero();
  bool corrupt = false;
  // Byte `o` of the stream is pattern[o % period]: a prime period, so a chunk lost, repeated or
  // reordered shows. Whole spans are copied and compared (memcpy/memcmp), which keeps a
  // sanitized -O0 build from spending seconds on 128 MiB byte by byte.
  constexpr std::size_t period = 251, chunk_size = 256 * 1024;
  std::vector<std::byte> pattern(period + std::max(chunk_size, setup.read_size));
  for (std::size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<std::byte>(static_cast<unsigned char>((i % period) * 7 + 1));
  auto pattern_at = [&](std::size_t offset) { return pattern.data() + offset % period; };
  std::vector<std::byte> chunk(chunk_size), buffer(setup.read_size);
  // Live heap bytes, which the sanitizers' allocators report too (resident memory would keep
  // their quarantines): what the transport holds beyond these buffers, coroutine frames aside.
  const std::size_t baseline = heap_bytes();
  std::size_t written = 0, read = 0, most_ahead = 0, peak = baseline;
  const auto started = std::chrono::steady_clock::now();
  run_coroutine(
      p.io,
      [&]() -> asio::awaitable<void> {
        auto writer = [&]() -> asio::awaitable<void> {
          while (written < total) {
            std::memcpy(chunk.data(), pattern_at(written), chunk.size());
            const auto t = std::chrono::steady_clock::now();
            written += co_await asio::async_write(p.a, asio::buffer(chunk), asio::use_awaitable);
            longest_write = std::max(longest_write, std::chrono::steady_clock::now() - t);
            most_ahead = std::max(most_ahead, written - read);
          }
        };
        auto reader = [&]() -> asio::awaitable<void> {
          asio::steady_timer timer(p.io);
          while (read < total) {
            const std::size_t n = co_await p.b.async_read_some(asio::buffer(buffer), asio::use_awaitable);
            corrupt |= std::memcmp(buffer.data(), pattern_at(read), n) != 0;
            read += n;
            peak = std::max(peak, heap_bytes());
            timer.expires_after(pause);
            co_await timer.async_wait(asio::use_awaitable);
          }
        };
        co_await (writer() && reader());
      },
      limit);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "slow reader: " << total / (1 << 20) << " MiB in " << seconds << " s; the writer was at most "
            << most_ahead / 1024 << " KiB ahead, waited up to "
            << std::chrono::duration_cast<std::chrono::milliseconds>(longest_write).count()
            << " ms in one write; heap +" << (peak - baseline) / 1024 << " KiB" << std::endl;
  BOOST_TEST(read == total);
  BOOST_TEST(!corrupt);
  BOOST_TEST(most_ahead <= ahead_limit);
  BOOST_TEST(longest_write >= pause);  // a write waited for the reader
  BOOST_TEST(peak - baseline <= ahead_limit);
}

void sends_wait_for_the_receiver(transport kind, std::size_t pool, std::chrono::seconds limit) {
  socket_options options{.receive_buffers = 8, .buffer_size = 16 * 1024};
  connected_pair p(kind, options);
  auto message = [](std::size_t i) {
    return std::vector<std::byte>(4000 + i % 8000, static_cast<std::byte>(i));
  };
  constexpr std::size_t most = 8192;  // TCP holds about 16 MiB: ~2000 such messages
  std::vector<std::vector<std::byte>> sent;
  outcome waiting;
  while (sent.size() < most) {
    sent.push_back(message(sent.size()));
    waiting = {};
    p.a.async_send(asio::buffer(sent.back()), record(waiting));
    // The pool's worth must get through, however slow the machine; past it, a send still
    // pending after a second waits for the receiver.
    const bool must_complete = sent.size() <= pool;
    run_until(
        p.io, [&] { return waiting.done; }, must_complete ? limit : std::chrono::seconds(1));
    if (!waiting.done) break;
    BOOST_REQUIRE_MESSAGE(!waiting.ec, "send " << sent.size() << ": " << waiting.ec.message());
  }
  std::cout << "sends: " << sent.size() - 1 << " completed before one waited for the receiver" << std::endl;
  BOOST_REQUIRE_MESSAGE(!waiting.done, "the sender was never held back");
  if (pool != 0) BOOST_TEST(sent.size() - 1 == pool);

  std::size_t received = 0;
  bool wrong = false;
  run_coroutine(
      p.io,
      [&]() -> asio::awaitable<void> {
        std::vector<std::byte> buffer(options.buffer_size);
        auto check = [&](std::size_t n) {
          wrong |= n != sent[received].size() ||
                   !std::equal(sent[received].begin(), sent[received].end(), buffer.begin());
          ++received;
        };
        while (received < sent.size())
          check(co_await p.b.async_receive(asio::buffer(buffer), asio::use_awaitable));
        // Then both at once, for as many again.
        const std::size_t end = 2 * sent.size();
        auto sender = [&]() -> asio::awaitable<void> {
          while (sent.size() < end) {
            sent.push_back(message(sent.size()));
            co_await p.a.async_send(asio::buffer(sent.back()), asio::use_awaitable);
          }
        };
        auto receiver = [&]() -> asio::awaitable<void> {
          while (received < end) check(co_await p.b.async_receive(asio::buffer(buffer), asio::use_awaitable));
        };
        co_await (sender() && receiver());
      },
      limit);
  BOOST_TEST(waiting.done);
  BOOST_TEST(!waiting.ec, waiting.ec.message());
  BOOST_TEST(received == sent.size());
  BOOST_TEST(!wrong);
}

void one_sided_beyond_the_queue_depth(transport kind, std::size_t ops, std::chrono::seconds limit) {
  connected_pair p(kind, {.receive_buffers = 2});
  constexpr std::size_t slot = 64;
  guarded_region target(p.b, ops * slot + 8, all_remote_rights);
  target.set_word(ops * slot, 0);
  local_memory local(p.a, 2 * ops * slot);
  for (std::size_t i = 0; i < ops * slot; ++i) local.bytes[i] = static_cast<std::byte>(i / slot + i);
  const auto counter = target.remote(ops * slot, 8);
  completion_log writes(ops), reads(ops);
  for (std::size_t i = 0; i < ops; ++i) {
    if (i % 2 == 0) {
      p.a.async_write(local.slice(i * slot, slot), target.remote(i * slot, slot), writes.handler(i));
    } else {
      p.a.async_fetch_add(local.slice(i * slot, 8), counter, 1, writes.handler(i));
    }
  }
  run_until_done(
      p.io, [&] { return writes.all_done(); }, limit);
  for (std::size_t i = 0; i < ops; ++i) {
    p.a.async_read(local.slice((ops + i) * slot, slot), target.remote(i * slot, slot), reads.handler(i));
  }
  run_until_done(
      p.io, [&] { return reads.all_done(); }, limit);

  std::vector<std::size_t> in_order(ops);
  std::iota(in_order.begin(), in_order.end(), 0);
  BOOST_TEST(writes.order == in_order, boost::test_tools::per_element());
  BOOST_TEST(reads.order == in_order, boost::test_tools::per_element());
  std::size_t failed = 0, wrong = 0;
  for (std::size_t i = 0; i < ops; ++i) {
    failed += writes.results[i].ec || reads.results[i].ec;
    const std::uint64_t expected = i % 2 == 0 ? slot : i / 2;  // each fetch-and-add saw the ones before
    wrong += writes.results[i].value != expected;
    if (i % 2 == 0) {
      wrong += !std::equal(local.bytes.begin() + i * slot, local.bytes.begin() + (i + 1) * slot,
                           local.bytes.begin() + (ops + i) * slot);
    }
  }
  BOOST_TEST(failed == 0u);
  BOOST_TEST(wrong == 0u);
  BOOST_TEST(target.word(ops * slot) == ops / 2);
  BOOST_TEST(target.guards_untouched());
}

void closing_the_acceptor_refuses_untaken_connections(transport kind, std::chrono::seconds limit) {
  asio::io_context io;
  socket_options options{.kind = kind};
  std::optional<acceptor> server;
  server.emplace(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  const auto endpoint = server->local_endpoint();
  outcome cancelled, kept_connected, kept_accepted, connected, ended;
  server->async_accept([&](error_code ec, socket) { cancelled = {true, ec, 0}; });
  server->cancel();  // the listeners stay armed and take the next connection anyway
  socket kept(io, options);
  kept.async_connect(endpoint, [&](error_code ec) { kept_connected = {true, ec, 0}; });
  io.run_for(std::chrono::milliseconds(500));  // it arrives with nobody waiting
  std::optional<socket> taken;
  server->async_accept([&](error_code ec, socket s) {
    kept_accepted = {true, ec, 0};
    taken.emplace(std::move(s));
  });
  run_until_done(
      io, [&] { return cancelled.done && kept_connected.done && kept_accepted.done; }, limit);
  BOOST_TEST((cancelled.ec == asio::error::operation_aborted), cancelled.ec.message());
  BOOST_TEST(!kept_connected.ec, kept_connected.ec.message());
  BOOST_TEST(!kept_accepted.ec, kept_accepted.ec.message());

  socket client(io, options);
  client.async_connect(endpoint, [&](error_code ec) { connected = {true, ec, 0}; });
  io.restart();
  io.run_for(std::chrono::milliseconds(500));  // nobody takes it
  std::array<char, 8> buffer{};
  if (connected.done) {  // TCP: the kernel's backlog completed it
    BOOST_TEST(!connected.ec, connected.ec.message());
    client.async_read_some(asio::buffer(buffer), record(ended));
  }
  server.reset();
  run_until_done(
      io, [&] { return connected.done && (connected.ec || ended.done); }, limit);
  const error_code learned = connected.ec ? connected.ec : ended.ec;
  BOOST_TEST((learned == asio::error::connection_refused), learned.message());
  BOOST_TEST(taken->is_open());  // the connection taken is not affected
}

}  // namespace coverbs::test
