// Per-operation cost of the async verbs layer against a raw post/poll loop on the same device,
// and heap allocations per operation in steady state (the target is zero).
#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <coverbs/coverbs.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../examples/command_line.hpp"
// Counting every allocation in the process is how "no heap allocation per operation" is shown.
#include "../test/allocation_counter.hpp"

namespace asio = boost::asio;
using namespace coverbs;
using coverbs::test::allocations;
using clock_type = std::chrono::steady_clock;

namespace {

struct result {
  std::string name;
  std::string impl, mode;  ///< for bench/run's csv lines: raw or coverbs; polling mode and token
  double ns_per_op;
  double allocs_per_op;
};

struct stage {
  verbs::device dev = verbs::device::open();
  verbs::gid_entry gid = dev.default_gid();
  verbs::protection_domain pd{dev};
  std::vector<std::byte> mem = std::vector<std::byte>(1 << 16);
  verbs::memory_region mr{pd, mem, verbs::access::local_write | verbs::access::remote_write |
                                       verbs::access::remote_read};
};

// The baseline: what a hand-written verbs program does, with nothing between it and the device.
result raw_write_loop(stage& s, std::size_t iterations, std::size_t size) {
  verbs::completion_queue cq(s.dev, 256);
  verbs::queue_pair a(s.pd, cq, cq), b(s.pd, cq, cq);
  a.connect(b.address(s.gid), {.local_gid = s.gid});
  b.connect(a.address(s.gid), {.local_gid = s.gid});
  const auto local = s.mr.slice(0, size);
  const auto remote = s.mr.remote(32768, size);
  auto one = [&] {
    ibv_sge sge{reinterpret_cast<std::uint64_t>(local.data), local.size, local.lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote.address;
    wr.wr.rdma.rkey = remote.rkey;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(a.native_handle(), &wr, &bad); rc != 0) {
      throw std::system_error(rc, std::system_category(), "raw ibv_post_send");
    }
    std::array<ibv_wc, 1> wc{};
    while (cq.poll(wc) == 0) {
    }
    if (wc[0].status != IBV_WC_SUCCESS) {
      throw std::runtime_error(std::string("raw RDMA WRITE: ") + ibv_wc_status_str(wc[0].status));
    }
  };
  for (std::size_t i = 0; i < iterations / 10 + 1; ++i) one();
  const std::size_t before = allocations.load();
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < iterations; ++i) one();
  const double ns = std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
  const std::size_t allocated = allocations.load() - before;  // before building the result's string
  return {"raw ibv_post_send + ibv_poll_cq", "raw", "busy", ns / static_cast<double>(iterations),
          static_cast<double>(allocated) / static_cast<double>(iterations)};
}

// The same writes through coverbs, one after another, in the given polling mode.
result async_write_loop(stage& s, std::size_t iterations, std::size_t size, polling_mode mode,
                        bool coroutine) {
  asio::io_context io;
  completion_service service(io.get_executor(), s.dev, {.mode = mode});
  async_queue_pair a(service, s.pd), b(service, s.pd);
  a.connect(b.address(s.gid), {.local_gid = s.gid});
  b.connect(a.address(s.gid), {.local_gid = s.gid});
  const auto local = s.mr.slice(0, size);
  const auto remote = s.mr.remote(32768, size);
  const std::size_t warmup = iterations / 10 + 1;
  // The window is [warm-up end, start of the last operation): set-up and teardown stay out.
  std::size_t before = 0, after = 0;
  clock_type::time_point start, end;
  auto mark = [&](std::size_t i) {
    if (i == warmup) {
      before = allocations.load();
      start = clock_type::now();
    } else if (i == warmup + iterations - 1) {
      after = allocations.load();
      end = clock_type::now();
    }
  };
  if (coroutine) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          for (std::size_t i = 0; i < warmup + iterations; ++i) {
            mark(i);
            co_await async_write(a, local, remote, asio::use_awaitable);
          }
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);  // out of io.run, to main's report
        });
  } else {
    // A plain function-object handler: the cheapest completion token Asio offers.
    struct chain {
      std::size_t total;
      async_queue_pair* qp;
      verbs::local_buffer local;
      remote_buffer remote;
      std::function<void(std::size_t)>* mark;
      std::size_t* i;
      void operator()(error_code ec, std::size_t) const {
        if (ec) throw boost::system::system_error(ec, "async_write");  // out of io.run
        if (++*i < total) {
          (*mark)(*i);
          async_write(*qp, local, remote, *this);
        }
      }
    };
    std::size_t i = 0;
    std::function<void(std::size_t)> mark_fn = mark;
    mark(0);
    async_write(a, local, remote, chain{warmup + iterations, &a, local, remote, &mark_fn, &i});
    io.run();
  }
  io.run();
  const double measured = static_cast<double>(iterations - 1);
  const double ns = std::chrono::duration<double, std::nano>(end - start).count();
  const char* mode_name = mode == polling_mode::event ? "event" : mode == polling_mode::busy ? "busy" : "adaptive";
  const char* token = coroutine ? "co_await" : "callback";
  return {std::string("coverbs async_write, ") + token + ", " + mode_name, "coverbs",
          std::string(mode_name) + "-" + token, ns / measured, static_cast<double>(after - before) / measured};
}

constexpr std::string_view usage =
    "usage: verbs_ops_bench [--iterations N] [--size BYTES] [--raw-last] [--quick]\n"
    "Times sequential RDMA WRITEs (64 bytes by default) through coverbs (each polling mode,\n"
    "coroutine and callback) against a raw ibv_post_send/ibv_poll_cq loop on the same device,\n"
    "and counts heap allocations per operation after warm-up. Needs an RDMA device (run it in\n"
    "the test bed VM).\n"
    "Prints a table and, for bench/run, lines 'csv,verbs,IMPL,rdma,MODE,SIZE,1,METRIC,VALUE'\n"
    "(IMPL raw or coverbs, MODE like busy-co_await; METRIC ns_per_op or allocs_per_op).\n"
    "  --iterations N   WRITEs per case, at least 2 (default 20000)\n"
    "  --size BYTES     bytes per WRITE, 1 to 32768, K allowed (default 64)\n"
    "  --raw-last       the raw loop after coverbs' cases, not before (bench/run alternates, so\n"
    "                   that a machine speeding up or slowing down favours neither)\n"
    "  --quick          500 WRITEs per case: only checks that every case runs\n";

}  // namespace

int main(int argc, char** argv) {
  std::size_t iterations = 20000, size = 64;
  bool raw_last = false;
  cli::arguments args("verbs_ops_bench", argc, argv);
  while (args.next()) {
    const auto arg = args.current();
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      return 0;
    } else if (arg == "--iterations") {
      iterations = args.number_value(2, std::size_t{1} << 30);  // the window needs two marks
    } else if (arg == "--size") {
      size = args.number_value(1, 32768);
    } else if (arg == "--raw-last") {
      raw_last = true;
    } else if (arg == "--quick") {
      iterations = 500;
    } else {
      cli::unknown_argument("verbs_ops_bench", arg);
    }
  }
  if (!coverbs::test::counter_trusted("verbs_ops_bench")) return 1;
  try {
    stage s;
    std::vector<result> results;
    if (!raw_last) results.push_back(raw_write_loop(s, iterations, size));
    for (auto mode : {polling_mode::busy, polling_mode::adaptive, polling_mode::event}) {
      results.push_back(async_write_loop(s, iterations, size, mode, true));
      results.push_back(async_write_loop(s, iterations, size, mode, false));
    }
    if (raw_last)
      results.insert(results.begin(), raw_write_loop(s, iterations, size));  // the table's first row
    std::printf("device %s, %zu sequential RDMA WRITEs of %zu bytes each\n\n", s.dev.name().c_str(), iterations, size);
    std::printf("| case | ns/op | ratio to raw | heap allocations/op |\n|---|---:|---:|---:|\n");
    for (const auto& r : results) {
      std::printf("| %s | %.0f | %.2f | %.4f |\n", r.name.c_str(), r.ns_per_op, r.ns_per_op / results[0].ns_per_op,
                  r.allocs_per_op);
    }
    for (const auto& r : results) {
      std::printf("csv,verbs,%s,rdma,%s,%zu,1,ns_per_op,%.1f\n", r.impl.c_str(), r.mode.c_str(), size, r.ns_per_op);
      if (r.impl == "coverbs") {
        std::printf("csv,verbs,coverbs,rdma,%s,%zu,1,allocs_per_op,%.4f\n", r.mode.c_str(), size, r.allocs_per_op);
      }
    }
    bool steady = true;
    for (const auto& r : results) steady = steady && r.allocs_per_op == 0.0;
    std::printf("\nsteady-state heap allocations: %s\n", steady ? "none" : "SOME (see table)");
    return steady ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "verbs_ops_bench: " << e.what() << "\n";
    return 1;
  }
}
