// The bodies declared in peer_kill_tests.hpp, compiled once for both transports' tests.

#include "peer_kill_tests.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <string>
#include <vector>

#include "coverbs/acceptor.hpp"
#include "fault_peer.hpp"
#include "one_sided_tests.hpp"
#include "test_address.hpp"

extern char** environ;

namespace coverbs::test {

/// A program run as a child process, killed (SIGKILL) and reaped at the latest when destroyed.
class child_process {
 public:
  explicit child_process(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ);
    BOOST_REQUIRE_MESSAGE(rc == 0, "cannot start " << args[0] << ": " << std::strerror(rc));
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    if (pid_ > 0) kill();
  }

  /// False once the program has ended by itself (it is reaped then).
  bool running() {
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
    return pid_ > 0;
  }
  /// Sends SIGKILL and returns the wait status (0 when it had ended already).
  int kill() {
    if (pid_ <= 0) return 0;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

inline bool one_of(const error_code& ec, std::initializer_list<error_code> codes) {
  for (const auto& c : codes) {
    if (ec == c) return true;
  }
  return false;
}

/// Everything the survivor keeps going against the peer; each activity records how it ended.
struct survivor {
  static constexpr std::size_t lanes = 8, lane_bytes = 64 * 1024;

  socket& s;
  remote_buffer region;  ///< fault_peer's; its first half holds the pattern
  local_memory local;
  std::vector<std::byte> read_buffer = std::vector<std::byte>(256 * 1024);
  std::vector<std::byte> write_buffer = std::vector<std::byte>(256 * 1024);
  std::array<std::byte, 64> message{};

  std::uint64_t bytes_read = 0;
  bool stream_corrupt = false, write_pending = false, one_sided_wrong = false;
  std::chrono::steady_clock::time_point write_started;
  int one_sided_ok = 0;
  outcome read_end, write_end, receive_end, immediate_end, send_end;
  std::array<outcome, lanes> lane_end;

  survivor(socket& socket, remote_buffer peer_region)
      : s(socket), region(peer_region), local(socket, lanes * lane_bytes) {}

  void start() {
    read_next();
    s.async_receive(asio::buffer(message), record(receive_end));
    s.async_receive_immediate(record(immediate_end));
    for (std::size_t lane = 0; lane < lanes; ++lane) one_sided_next(lane, 0, 0);
  }

  void read_next() {
    s.async_read_some(asio::buffer(read_buffer), [this](error_code ec, std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) stream_corrupt |= read_buffer[i] != pattern_byte(bytes_read + i);
      bytes_read += n;
      if (ec) return void(read_end = {true, ec, 0});
      read_next();
    });
  }

  void write_next() {
    write_pending = true;
    write_started = std::chrono::steady_clock::now();
    s.async_write_some(asio::buffer(write_buffer), [this](error_code ec, std::size_t) {
      write_pending = false;
      if (ec) return void(write_end = {true, ec, 0});
      write_next();
    });
  }

  // Each lane cycles through a read of the pattern, a write to the second half of the region
  // and a fetch-and-add on a word of its own, whose previous values must count up by one.
  void one_sided_next(std::size_t lane, int step, std::uint64_t expected_word) {
    const auto mine = local.slice(lane * lane_bytes, lane_bytes);
    const std::size_t half = fault_peer_region_size / 2;
    auto next = [this, lane, step](std::uint64_t word) {
      return [this, lane, step, word](error_code ec, auto value) {
        if (ec) return void(lane_end[lane] = {true, ec, 0});
        ++one_sided_ok;
        if (step % 3 == 0) {
          const auto got = std::span(local.bytes).subspan(lane * lane_bytes, lane_bytes);
          for (std::size_t i = 0; i < got.size(); ++i)
            one_sided_wrong |= got[i] != pattern_byte(lane * 4096 + i);
        }
        std::uint64_t expected = word;
        if (step % 3 == 2) {
          one_sided_wrong |= step > 2 && static_cast<std::uint64_t>(value) != word;
          expected = static_cast<std::uint64_t>(value) + 1;
        }
        one_sided_next(lane, step + 1, expected);
      };
    };
    switch (step % 3) {
      case 0:
        return s.async_read(mine, region.sub(static_cast<std::uint32_t>(lane * 4096), lane_bytes),
                            next(expected_word));
      case 1:
        return s.async_write(local.slice(lane * lane_bytes, 4096),
                             region.sub(static_cast<std::uint32_t>(half + lane * 4096), 4096),
                             next(expected_word));
      default: {
        const auto word = static_cast<std::uint32_t>(fault_peer_region_size - 8 * (lane + 1));
        return s.async_fetch_add(local.slice(lane * lane_bytes, 8), region.sub(word, 8), 1,
                                 next(expected_word));
      }
    }
  }

  bool all_ended() const {
    bool lanes_ended = true;
    for (const auto& l : lane_end) lanes_ended &= l.done;
    return read_end.done && write_end.done && receive_end.done && immediate_end.done && send_end.done &&
           lanes_ended;
  }
};

void peer_killed_mid_stream(transport kind, std::chrono::seconds limit) {
  asio::io_context io;
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), {.kind = kind});
  child_process peer({COVERBS_FAULT_PEER, kind == transport::tcp ? "tcp" : "rdma", test_address().to_string(),
                      std::to_string(server.local_endpoint().port())});
  socket s(io);
  outcome accepted, described;
  server.async_accept(s, [&](error_code ec) { accepted = {true, ec, 0}; });
  run_until(
      io, [&] { return accepted.done || !peer.running(); }, limit);
  BOOST_REQUIRE_MESSAGE(accepted.done && !accepted.ec,
                        "fault_peer did not connect: " << accepted.ec.message());
  BOOST_REQUIRE((s.transport_in_use() == kind));
  std::array<std::byte, remote_buffer::wire_size> descriptor{};
  s.async_receive(asio::buffer(descriptor), record(described));
  run_until_done(
      io, [&] { return described.done; }, limit);
  remote_buffer region;
  BOOST_REQUIRE(!described.ec);
  BOOST_REQUIRE(!remote_buffer::parse(descriptor, region));

  survivor v(s, region);
  v.start();
  run_until(
      io, [&] { return v.bytes_read >= (1u << 20) && v.one_sided_ok >= 48; }, limit);
  BOOST_REQUIRE(v.bytes_read >= (1u << 20));
  BOOST_REQUIRE(v.one_sided_ok >= 48);
  // Only now, since over TCP one-sided requests queue behind stream bytes the peer never reads.
  v.write_next();
  auto write_waits = [&] {
    return v.write_pending &&
           std::chrono::steady_clock::now() - v.write_started > std::chrono::milliseconds(200);
  };
  run_until(io, write_waits, limit);
  BOOST_REQUIRE_MESSAGE(write_waits(), "the write never waited for the peer");
  BOOST_REQUIRE(v.read_end.done == false);
  // The peer's pool (RDMA credits) or TCP's buffers are full: a send waits like the write.
  s.async_send(asio::buffer(v.message), record(v.send_end));
  io.restart();
  io.run_for(std::chrono::milliseconds(100));
  const bool send_pending = !v.send_end.done;
  BOOST_TEST_MESSAGE("killing the peer after " << v.bytes_read << " bytes read and " << v.one_sided_ok
                                               << " one-sided operations");
  const int status = peer.kill();
  BOOST_TEST((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));  // it was still running
  const auto killed = std::chrono::steady_clock::now();
  run_until(
      io, [&] { return v.all_ended(); }, limit);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::cout << "peer killed: every pending operation ended " << took << " s later: read "
            << v.read_end.ec.message() << ", write " << v.write_end.ec.message() << ", one-sided "
            << v.lane_end[0].ec.message() << std::endl;
  BOOST_REQUIRE_MESSAGE(v.all_ended(), "operations still pending " << limit.count() << " s after the kill");

  const auto peer_gone = {error_code(asio::error::eof), error_code(asio::error::connection_reset)};
  const auto cannot_send = {error_code(asio::error::broken_pipe), error_code(asio::error::connection_reset)};
  const auto unanswered = {error_code(make_error_code(wc_errc::flushed)),
                           error_code(make_error_code(wc_errc::retry_exceeded))};
  BOOST_TEST(!v.stream_corrupt);
  BOOST_TEST(!v.one_sided_wrong);
  BOOST_TEST(one_of(v.read_end.ec, peer_gone), v.read_end.ec.message());
  BOOST_TEST(one_of(v.receive_end.ec, peer_gone), v.receive_end.ec.message());
  BOOST_TEST(one_of(v.immediate_end.ec, peer_gone), v.immediate_end.ec.message());
  BOOST_TEST(one_of(v.write_end.ec, cannot_send), v.write_end.ec.message());
  if (send_pending) BOOST_TEST(one_of(v.send_end.ec, cannot_send), v.send_end.ec.message());
  for (const auto& lane : v.lane_end) BOOST_TEST(one_of(lane.ec, unanswered), lane.ec.message());

  // Later operations fail at once; closing releases the connection's resources.
  outcome later;
  s.async_read(v.local.slice(0, 64), region.sub(0, 64), record(later));
  run_until_done(
      io, [&] { return later.done; }, limit);
  BOOST_TEST((later.ec == make_error_code(wc_errc::flushed)), later.ec.message());
  std::weak_ptr<detail::stream_core> connection = s.impl();
  s.close();
  run_until(
      io, [&] { return connection.expired(); }, limit);
  BOOST_TEST(connection.expired());

  // The acceptor goes on serving.
  socket client(io, {.kind = kind}), served(io);
  outcome connected, accepted_again;
  client.async_connect(server.local_endpoint(), [&](error_code ec) { connected = {true, ec, 0}; });
  server.async_accept(served, [&](error_code ec) { accepted_again = {true, ec, 0}; });
  run_until_done(
      io, [&] { return connected.done && accepted_again.done; }, limit);
  BOOST_TEST(!connected.ec, connected.ec.message());
  BOOST_TEST(!accepted_again.ec, accepted_again.ec.message());
}

}  // namespace coverbs::test
