// The bodies declared in allocation_tests.hpp, compiled once for both transports' tests.

#include "allocation_tests.hpp"

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/test/unit_test.hpp>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include "allocation_counter.hpp"
#include "connected_pair.hpp"

namespace coverbs::test {
namespace steady_state {
namespace asio = boost::asio;

/// Counts rounds of a chain of operations and the allocations made in the measured ones.
struct rounds {
  explicit rounds(asio::io_context& context) : io(context) {}
  asio::io_context& io;
  int warmup = 200;
  int measured = 1000;
  int done = 0;
  std::size_t mark = 0;
  std::size_t allocated = 0;
  error_code failure;

  /// Ends a round; false when the chain must stop (all rounds done, or `ec` failed it).
  bool next(error_code ec) {
    if (ec) {
      failure = ec;
      io.stop();
      return false;
    }
    ++done;
    if (done == warmup) mark = allocations.load();
    if (done < warmup + measured) return true;
    allocated = allocations.load() - mark;
    io.stop();
    return false;
  }
};

/// The peer's half of a round runs until the connection closes; then its operations end with
/// one of these (bad_descriptor: one started after the test closed the socket).
inline void keep(error_code ec) {
  if (ec && ec != asio::error::operation_aborted && ec != asio::error::eof &&
      ec != asio::error::bad_descriptor) {
    BOOST_ERROR("peer: " << ec.message());
  }
}

// How an echo moves its bytes: whole messages, or stream bytes.
struct message_io {
  template <class Handler>
  static void put(socket& s, asio::const_buffer b, Handler&& h) {
    s.async_send(b, std::forward<Handler>(h));
  }
  template <class Handler>
  static void get(socket& s, asio::mutable_buffer b, Handler&& h) {
    s.async_receive(b, std::forward<Handler>(h));
  }
};
struct stream_io {
  template <class Handler>
  static void put(socket& s, asio::const_buffer b, Handler&& h) {
    s.async_write_some(b, std::forward<Handler>(h));
  }
  template <class Handler>
  static void get(socket& s, asio::mutable_buffer b, Handler&& h) {
    s.async_read_some(b, std::forward<Handler>(h));
  }
};

/// The client sends 64 bytes and reads the echo; the server echoes what it gets.
template <class Io>
struct echo {
  echo(connected_pair& pair, rounds& counted) : p(pair), r(counted) {}
  connected_pair& p;
  rounds& r;
  std::array<std::byte, 64> out{}, in_a{}, in_b{};
  void client() {
    Io::put(p.a, asio::buffer(out), [this](error_code ec, std::size_t) {
      if (ec) return void(r.next(ec));
      Io::get(p.a, asio::buffer(in_a), [this](error_code ec, std::size_t) {
        if (r.next(ec)) client();
      });
    });
  }
  void server() {
    Io::get(p.b, asio::buffer(in_b), [this](error_code ec, std::size_t n) {
      if (ec) return keep(ec);
      Io::put(p.b, asio::buffer(in_b.data(), n), [this](error_code ec, std::size_t) {
        if (ec) return keep(ec);
        server();
      });
    });
  }
  void start() {
    server();
    client();
  }
};

struct one_sided {
  one_sided(connected_pair& pair, rounds& counted) : p(pair), r(counted) {}
  connected_pair& p;
  rounds& r;
  std::vector<std::byte> exposed = std::vector<std::byte>(4096), local_memory = std::vector<std::byte>(4096);
  registered_memory target = p.b.register_memory(
      exposed, verbs::access::remote_read | verbs::access::remote_write | verbs::access::remote_atomic);
  registered_memory local = p.a.register_memory(local_memory, verbs::access::none);
  void client() {
    p.a.async_write(local.slice(0, 64), target.remote(0, 64), [this](error_code ec, std::size_t) {
      if (ec) return void(r.next(ec));
      p.a.async_read(local.slice(64, 64), target.remote(0, 64), [this](error_code ec, std::size_t) {
        if (ec) return void(r.next(ec));
        p.a.async_fetch_add(local.slice(128, 8), target.remote(256, 8), 1,
                            [this](error_code ec, std::uint64_t) {
                              if (ec) return void(r.next(ec));
                              p.a.async_compare_swap(local.slice(136, 8), target.remote(264, 8), 0, 1,
                                                     [this](error_code ec, std::uint64_t) {
                                                       if (r.next(ec)) client();
                                                     });
                            });
      });
    });
  }
  void start() { client(); }
};

struct immediates {
  immediates(connected_pair& pair, rounds& counted) : p(pair), r(counted) {}
  connected_pair& p;
  rounds& r;
  std::vector<std::byte> exposed = std::vector<std::byte>(4096), local_memory = std::vector<std::byte>(4096);
  registered_memory target = p.b.register_memory(exposed, verbs::access::remote_write);
  registered_memory local = p.a.register_memory(local_memory, verbs::access::none);
  // The receiver answers each immediate with a message, so that writes never pile up there.
  std::array<std::byte, 4> ack{}, ack_in{};
  void client() {
    p.a.async_write_with_immediate(
        local.slice(0, 64), target.remote(0, 64), 7, [this](error_code ec, std::size_t) {
          if (ec) return void(r.next(ec));
          p.a.async_receive(asio::buffer(ack_in), [this](error_code ec, std::size_t) {
            if (r.next(ec)) client();
          });
        });
  }
  void server() {
    p.b.async_receive_immediate([this](error_code ec, std::uint32_t) {
      if (ec) return keep(ec);
      p.b.async_send(asio::buffer(ack), [this](error_code ec, std::size_t) {
        if (ec) return keep(ec);
        server();
      });
    });
  }
  void start() {
    server();
    client();
  }
};

/// The counter must see allocations of every kind, or every count below would pass for nothing.
inline void counter_works() {
  BOOST_REQUIRE_MESSAGE(counter_sees_allocations(), "allocation_counter.hpp misses allocations");
}

template <class Chain>
void count(transport kind, const std::string& what) {
  counter_works();
  connected_pair p(kind);
  rounds r(p.io);
  Chain chain(p, r);
  chain.start();
  // run(), as a program does: run_for() runs one handler at a time, and Asio's per-thread
  // cache of memory lives only as long as one call into the scheduler.
  asio::steady_timer watchdog(p.io, std::chrono::seconds(120));
  watchdog.async_wait([&](error_code ec) {
    if (!ec) p.io.stop();
  });
  p.io.restart();
  p.io.run();
  watchdog.cancel();
  BOOST_TEST_INFO(what);
  BOOST_TEST(!r.failure, "failed: " << r.failure.message());
  BOOST_TEST(r.done == r.warmup + r.measured);
  BOOST_TEST(r.allocated == 0u, r.allocated << " allocations in " << r.measured << " rounds of " << what);
}

}  // namespace steady_state

/// Every kind of socket operation, each in its own run.
void steady_state_operations_allocate_nothing(transport kind) {
  steady_state::count<steady_state::echo<steady_state::message_io>>(kind, "send/receive");
  steady_state::count<steady_state::echo<steady_state::stream_io>>(kind, "write_some/read_some");
  steady_state::count<steady_state::one_sided>(kind, "write/read/fetch_add/compare_swap");
  steady_state::count<steady_state::immediates>(kind, "write_with_immediate/receive_immediate");
}

}  // namespace coverbs::test
