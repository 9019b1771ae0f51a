// The bodies declared in socket_tests.hpp, compiled once for both transports' tests.

#include "socket_tests.hpp"

#include <netinet/in.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/buffered_read_stream.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "connected_pair.hpp"
#include "coverbs/connect.hpp"
#include "echo_program.hpp"
#include "stream_tests.hpp"

namespace coverbs::test {

void socket_suite_bulk(transport kind, std::size_t size) {
  connected_pair p(kind);
  BOOST_TEST(p.a.remote_endpoint().port() == p.listener->local_endpoint().port());
  bulk_both_ways(p.io, p.a, p.b, size);
}

void socket_suite_lines(transport kind) {
  connected_pair p(kind);
  lines_then_eof(p.io, p.a, p.b);
}

void socket_suite_close(transport kind) {
  connected_pair p(kind);
  close_aborts_pending_and_peer_sees_eof(p.io, p.a, p.b);
}

void socket_suite_lazy(transport kind) {
  connected_pair p(kind);
  lazy_operation_acts_on_the_socket_when_started(p.io, p.a, p.b);
}

void socket_suite_small_writes(transport kind) {
  connected_pair p(kind);
  small_writes_keep_asio_rules(p.io, p.a, p.b);
}

void socket_suite_cancelled_read(transport kind) {
  connected_pair p(kind);
  read_cancelled_by_timer_leaves_connection_usable(p.io, p.a, p.b);
}

void socket_suite_cancelled_write(transport kind, std::size_t size) {
  connected_pair p(kind);
  write_cancelled_by_timer_moves_what_it_reports(p.io, p.a, p.b, size);
}

void socket_suite_cancelled_registered_write(transport kind, std::size_t size) {
  connected_pair p(kind);
  registered_write_cancelled_in_flight(p.io, p.a, p.b, size);
}

void socket_suite_registered_writes(transport kind, std::size_t size) {
  connected_pair p(kind);
  writes_from_registered_memory(p.io, p.a, p.b, size);
}

void socket_suite_registered_messages(transport kind, bool zero_copy) {
  connected_pair p(kind, {.zero_copy_messages = zero_copy});
  messages_from_registered_memory(p.io, p.a, p.b);
  if (zero_copy) uncopied_message_and_write_at_once(p.io, p.a, p.b);
}

/// The Asio echo program, unchanged, over coverbs types: several concurrent clients.
void ported_echo(transport kind) {
  namespace asio = boost::asio;
  asio::io_context io;
  socket_options options{.kind = kind};
  acceptor server(io, asio::ip::tcp::endpoint(test_address(), 0), options);
  constexpr int clients = 4;
  asio::co_spawn(io, echo::server(server, clients), asio::detached);
  std::vector<std::string> replies(clients);
  std::vector<std::unique_ptr<socket>> sockets;
  int finished = 0;
  for (int i = 0; i < clients; ++i) {
    sockets.push_back(std::make_unique<socket>(io, options));
    std::vector<std::string> lines{"hello " + std::to_string(i),
                                   std::string(10000, 'a' + static_cast<char>(i)), "bye"};
    asio::co_spawn(io, echo::client(*sockets.back(), server.local_endpoint(), lines),
                   [&, i](std::exception_ptr e, std::string r) {
                     if (e) std::rethrow_exception(e);
                     replies[static_cast<std::size_t>(i)] = std::move(r);
                     if (++finished == clients) io.stop();
                   });
  }
  io.run_for(std::chrono::seconds(60));
  BOOST_REQUIRE(finished == clients);
  for (int i = 0; i < clients; ++i) {
    BOOST_TEST(replies[static_cast<std::size_t>(i)] == "hello " + std::to_string(i) + "\n" +
                                                           std::string(10000, 'a' + static_cast<char>(i)) +
                                                           "\nbye\n");
    BOOST_TEST((sockets[static_cast<std::size_t>(i)]->transport_in_use() == kind));
  }
}

/// Socket options as a TCP program sets them. Over TCP they reach the connection's socket
/// (no_delay off and on, keep_alive, a receive buffer size, which Asio reports as set); over
/// RDMA no_delay and reuse_address are taken and always read true, anything else is
/// operation_not_supported;
/// a socket not open gives bad_descriptor; the throwing overloads throw the same. The
/// connection still carries lines afterwards.
void socket_options_as_asio(transport kind) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  connected_pair p(kind);
  error_code ec = asio::error::would_block;
  p.a.set_option(tcp::no_delay(true), ec);
  BOOST_TEST(!ec, ec.message());
  tcp::no_delay delay(false);
  p.a.get_option(delay, ec);
  BOOST_TEST(!ec, ec.message());
  BOOST_TEST(delay.value());
  p.a.set_option(tcp::no_delay(false), ec);
  BOOST_TEST(!ec, ec.message());
  p.a.get_option(delay);
  BOOST_TEST(delay.value() == (kind == transport::rdma));  // RDMA never holds a send back
  p.a.set_option(asio::socket_base::keep_alive(true), ec);
  if (kind == transport::tcp) {
    BOOST_TEST(!ec, ec.message());
    asio::socket_base::keep_alive keep_alive(false);
    p.a.get_option(keep_alive);
    BOOST_TEST(keep_alive.value());
    p.a.set_option(asio::socket_base::receive_buffer_size(96 * 1024));
    asio::socket_base::receive_buffer_size size;
    p.a.get_option(size);
    BOOST_TEST(size.value() == 96 * 1024);
    p.a.set_option(tcp::no_delay(true));
  } else {
    BOOST_TEST((ec == asio::error::operation_not_supported), ec.message());
    asio::socket_base::keep_alive keep_alive;
    BOOST_CHECK_THROW(p.a.get_option(keep_alive), boost::system::system_error);
    BOOST_CHECK_THROW(p.a.set_option(asio::socket_base::linger(true, 1)), boost::system::system_error);
  }
  p.a.set_option(asio::socket_base::reuse_address(true));
  asio::socket_base::reuse_address reuse(false);
  p.a.get_option(reuse);
  BOOST_TEST(reuse.value());
  socket closed(p.io, {.kind = kind});
  closed.set_option(tcp::no_delay(true), ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  BOOST_CHECK_THROW(closed.get_option(delay), boost::system::system_error);
  lines_then_eof(p.io, p.a, p.b);
}

/// What Asio programs reach through their socket and acceptor types besides the members:
/// socket_base's names (`tcp::socket::shutdown_both`, `tcp::acceptor::reuse_address`, ...),
/// lowest_layer(), the constructor shapes (protocol, endpoint, reuse_address) and the error_code
/// overloads, each as on tcp::socket and tcp::acceptor.
void asio_names_and_overloads(transport kind) {
  namespace asio = boost::asio;
  using tcp_socket = socket;
  using tcp_acceptor = acceptor;
  static_assert(tcp_socket::shutdown_both == asio::socket_base::shutdown_both);
  static_assert(std::is_same_v<tcp_socket::keep_alive, asio::socket_base::keep_alive>);
  static_assert(std::is_same_v<tcp_acceptor::reuse_address, asio::socket_base::reuse_address>);
  connected_pair p(kind);
  BOOST_TEST(&p.a.lowest_layer() == &p.a);
  error_code ec = asio::error::would_block;
  p.a.lowest_layer().set_option(tcp_socket::keep_alive(true), ec);
  BOOST_TEST((kind == transport::tcp ? !ec : ec == asio::error::operation_not_supported), ec.message());

  // tcp::socket's and tcp::acceptor's other constructor shapes: opened for a protocol, opened
  // and bound, and (executor, endpoint, reuse_address).
  const socket_options same{.kind = kind};
  // (is_open() stays false until connected, as documented; local_endpoint() shows the open.)
  tcp_socket opened(p.io, asio::ip::tcp::v4(), same);
  ec = asio::error::would_block;
  BOOST_TEST((opened.local_endpoint(ec) == asio::ip::tcp::endpoint(asio::ip::tcp::v4(), 0)));
  BOOST_TEST(!ec, ec.message());
  const asio::ip::tcp::endpoint here(test_address(), 0);
  tcp_socket bound_socket(p.io.get_executor(), here, same);
  BOOST_TEST((bound_socket.local_endpoint() == here));
  tcp_acceptor unbound(p.io, asio::ip::tcp::v4(), same);
  BOOST_TEST(unbound.is_open());
  static_assert(std::is_constructible_v<tcp_socket, asio::io_context&, asio::ip::tcp::endpoint>);
  static_assert(std::is_constructible_v<tcp_acceptor, asio::io_context&, asio::ip::tcp>);
  [[maybe_unused]] tcp_socket defaulted(p.io, {}), defaulted_on_executor(p.io.get_executor(), {});
  tcp_acceptor on_executor(p.io.get_executor(), asio::ip::tcp::endpoint(test_address(), 0), true);
  BOOST_TEST(on_executor.local_endpoint().port() != 0);

  tcp_acceptor second(p.io, asio::ip::tcp::endpoint(test_address(), 0), true);
  ec = asio::error::would_block;
  const auto bound = second.local_endpoint(ec);
  BOOST_TEST(!ec, ec.message());
  BOOST_TEST(bound.port() != 0);
  ec = asio::error::would_block;
  second.cancel(ec);
  BOOST_TEST(!ec, ec.message());
  ec = asio::error::would_block;
  second.close(ec);
  BOOST_TEST(!ec, ec.message());
  BOOST_TEST(!second.is_open());
  BOOST_TEST((second.local_endpoint(ec) == asio::ip::tcp::endpoint()));
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  ec = {};
  second.cancel(ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  BOOST_CHECK_THROW(second.local_endpoint(), boost::system::system_error);

  // A stream wrapper over the socket (it needs lowest_layer_type), then shutdown_both
  // through the socket's own name: the peer reads the bytes, then eof.
  asio::buffered_read_stream<socket&> buffered(p.b);
  BOOST_TEST(&buffered.lowest_layer() == &p.b);
  std::optional<error_code> written, end;
  asio::async_write(p.a, asio::buffer("abc", 3), [&](error_code e, std::size_t) { written = e; });
  p.io.restart();
  while (!written && p.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  BOOST_REQUIRE(written.has_value());
  BOOST_TEST(!*written, written->message());
  p.a.shutdown(tcp_socket::shutdown_both);
  std::string got;
  asio::async_read(buffered, asio::dynamic_buffer(got), [&](error_code e, std::size_t) { end = e; });
  p.io.restart();  // out of work once the write was done, as with nothing else pending on it
  while (!end && p.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  BOOST_REQUIRE(end.has_value());
  BOOST_TEST((*end == asio::error::eof), end->message());
  BOOST_TEST(got == "abc");
}

/// available(): the bytes a read takes at once, as tcp::socket::available; messages are not
/// stream bytes and are not counted.
void available_bytes(transport kind) {
  namespace asio = boost::asio;
  connected_pair p(kind);
  socket closed(p.io, {.kind = kind});
  error_code ec;
  BOOST_TEST(closed.available(ec) == 0u);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  BOOST_CHECK_THROW(closed.available(), boost::system::system_error);
  BOOST_TEST(p.a.available() == 0u);

  // A message first, then 11 stream bytes behind it: once those are here, the message is too.
  int sent = 0;
  p.b.async_send(asio::buffer("msg", 3), [&](error_code e, std::size_t) { sent += !e; });
  asio::async_write(p.b, asio::buffer("hello world", 11), [&](error_code e, std::size_t) { sent += !e; });
  const auto until = [&](auto done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      p.io.restart();
      p.io.run_one_for(std::chrono::milliseconds(50));
    }
    return done();
  };
  BOOST_REQUIRE(until([&] { return sent == 2 && p.a.available() > 0; }));
  BOOST_REQUIRE(until([&] { return p.a.available() == 11; }));  // all of it, and not the message

  char part[4];
  std::optional<std::size_t> got;
  p.a.async_read_some(asio::buffer(part), [&](error_code e, std::size_t n) { got = e ? 0 : n; });
  BOOST_REQUIRE(until([&] { return got.has_value(); }));
  BOOST_TEST(*got == 4u);
  BOOST_TEST(std::string(part, 4) == "hell");
  BOOST_TEST(p.a.available() == 7u);
  std::string rest(7, '\0');
  got.reset();
  p.a.async_read_some(asio::buffer(rest), [&](error_code e, std::size_t n) { got = e ? 0 : n; });
  BOOST_REQUIRE(until([&] { return got.has_value(); }));
  BOOST_TEST(*got == 7u);
  BOOST_TEST(rest == "o world");
  BOOST_TEST(p.a.available() == 0u);
  std::array<char, 3> message{};
  got.reset();
  p.a.async_receive(asio::buffer(message), [&](error_code e, std::size_t n) { got = e ? 0 : n; });
  BOOST_REQUIRE(until([&] { return got.has_value(); }));
  BOOST_TEST(std::string(message.data(), *got) == "msg");
}

/// An acceptor set up step by step, as Asio servers often do (open, set_option, bind,
/// listen), then serving the echo program; each step's errors as on tcp::acceptor.
void acceptor_set_up_step_by_step(transport kind) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  acceptor server(io, {.kind = kind});
  BOOST_TEST(!server.is_open());
  error_code ec;
  server.bind(tcp::endpoint(test_address(), 0), ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  server.open(tcp::v4());
  BOOST_TEST(server.is_open());
  server.open(tcp::v4(), ec);
  BOOST_TEST((ec == asio::error::already_open), ec.message());
  std::optional<error_code> early;  // accepting before listen() fails at once, as accept(2)
  server.async_accept([&](error_code e, socket) { early = e; });
  io.run_for(std::chrono::seconds(5));
  BOOST_REQUIRE(early.has_value());
  BOOST_TEST((*early == asio::error::invalid_argument), early->message());
  io.restart();
  server.set_option(acceptor::reuse_address(true));
  server.set_option(asio::socket_base::keep_alive(true), ec);
  BOOST_TEST((kind == transport::rdma ? ec == asio::error::operation_not_supported : !ec), ec.message());
  acceptor::reuse_address reuse(false);
  server.get_option(reuse);
  BOOST_TEST(reuse.value());
  asio::socket_base::keep_alive alive(false);
  server.get_option(alive, ec);
  BOOST_TEST((kind == transport::rdma ? ec == asio::error::operation_not_supported : !ec && alive.value()),
             ec.message());
  server.set_option(tcp::no_delay(true));  // RDMA alone takes it too, changing nothing
  tcp::no_delay no_delay(false);
  server.get_option(no_delay);
  BOOST_TEST(no_delay.value());
  server.bind(tcp::endpoint(test_address(), 0));
  server.listen();
  const tcp::endpoint bound = server.local_endpoint();
  BOOST_TEST(bound.port() != 0);

  acceptor rival(io, {.kind = kind});
  rival.open(tcp::v4());
  rival.bind(bound, ec);
  BOOST_TEST((ec == asio::error::address_in_use), ec.message());
  BOOST_CHECK_THROW(rival.bind(bound), boost::system::system_error);

  // Moved from, an acceptor is closed and can be opened again on the same executor.
  acceptor moved = std::move(server);
  BOOST_TEST(!server.is_open());
  server.get_option(reuse, ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  server.open(tcp::v4());
  server.bind(tcp::endpoint(test_address(), 0));
  server.close();
  // Before bind(), the family's any address and port 0; listen() binds there, to a port the
  // system picks, as listen(2) does.
  acceptor v6(io, {.kind = kind});
  v6.open(tcp::v6());
  BOOST_TEST((v6.local_endpoint() == tcp::endpoint(tcp::v6(), 0)));
  acceptor unbound(io, {.kind = kind});
  unbound.open(tcp::v4());
  unbound.listen();
  const tcp::endpoint picked = unbound.local_endpoint();
  BOOST_TEST(picked.address().is_unspecified());
  BOOST_TEST(picked.port() != 0);

  asio::co_spawn(io, echo::server(moved, 1), asio::detached);
  asio::co_spawn(io, echo::server(unbound, 1), asio::detached);
  socket client(io, {.kind = kind}), second(io, {.kind = kind});
  std::optional<std::string> replies, second_replies;
  const auto keep = [&](std::optional<std::string>& into) {
    return [&](std::exception_ptr e, std::string r) {
      if (e) std::rethrow_exception(e);
      into = std::move(r);
    };
  };
  asio::co_spawn(io, echo::client(client, bound, {"step", "by step"}), keep(replies));
  asio::co_spawn(io, echo::client(second, tcp::endpoint(test_address(), picked.port()), {"unbound"}),
                 keep(second_replies));
  run_until(io, [&] { return replies && second_replies; });
  BOOST_REQUIRE(replies.has_value());
  BOOST_REQUIRE(second_replies.has_value());
  BOOST_TEST(*replies == "step\nby step\n");
  BOOST_TEST(*second_replies == "unbound\n");
  BOOST_TEST((client.transport_in_use() == kind));
  BOOST_TEST((second.transport_in_use() == kind));
}

/// Nobody listens: the connect fails with connection_refused, promptly.
void refused(transport kind) {
  namespace asio = boost::asio;
  asio::io_context io;
  const refusing_port nobody(io);
  socket s(io, {.kind = kind});
  error_code result = asio::error::would_block;
  s.async_connect(nobody.endpoint(), [&](error_code ec) { result = ec; });
  io.run_for(std::chrono::seconds(30));
  BOOST_TEST((result == asio::error::connection_refused), result.message());
  BOOST_TEST(!s.is_open());
}

void bound_before_connecting(transport kind) {
  namespace asio = boost::asio;
  using asio::ip::tcp;
  asio::io_context io;
  acceptor server(io, tcp::endpoint(test_address(), 0), {.kind = kind});
  std::vector<tcp::endpoint> seen;  // each accepted connection's remote endpoint
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 3; ++i) {
          auto peer = co_await server.async_accept(asio::use_awaitable);
          seen.push_back(peer.remote_endpoint());
        }
      },
      asio::detached);
  // Two free ports: one to connect from, one where nothing listens.
  const unsigned short from_port = free_port_except(io, {server.local_endpoint().port()});
  const tcp::endpoint from(test_address(), from_port);
  const refusing_port nobody(io, {server.local_endpoint().port(), from_port});
  const tcp::endpoint refusing = nobody.endpoint();
  const tcp::endpoint serving(test_address(), server.local_endpoint().port());

  socket s(io, {.kind = kind});
  error_code ec;
  // TEST-NET-1 is no address of this machine (unless it lets any address be bound).
  std::ifstream nonlocal_bind("/proc/sys/net/ipv4/ip_nonlocal_bind");
  if (int any = 0; !(nonlocal_bind >> any) || any == 0) {
    s.bind(tcp::endpoint(asio::ip::make_address("192.0.2.1"), 0), ec);
    BOOST_TEST((ec == boost::system::errc::address_not_available), ec.message());
    BOOST_CHECK_THROW(s.bind(tcp::endpoint(asio::ip::make_address("192.0.2.1"), 0)),
                      boost::system::system_error);
  }
  s.local_endpoint(ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  s.open(tcp::v6());
  BOOST_TEST(s.local_endpoint() == tcp::endpoint(tcp::v6(), 0));  // as Asio's before a bind
  s.bind(from, ec);  // another family than open()'s
  BOOST_TEST((ec == asio::error::invalid_argument), ec.message());
  s.open(tcp::v4(), ec);
  BOOST_TEST((ec == asio::error::already_open), ec.message());
  s.close();
  s.bind(tcp::endpoint(test_address(), 0));
  BOOST_TEST(s.local_endpoint() == tcp::endpoint(test_address(), 0));  // the connect picks the port
  s.close();
  s.local_endpoint(ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  s.open(from.protocol());
  s.bind(from);
  BOOST_TEST(s.local_endpoint() == from);
  std::optional<error_code> connected;
  tcp::endpoint connected_to;
  coverbs::async_connect(s, std::vector<tcp::endpoint>{refusing, serving},
                         [&](error_code e, tcp::endpoint to) {
                           connected = e;
                           connected_to = to;
                         });
  run_until(
      io, [&] { return connected && !seen.empty(); }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE((connected == error_code()), connected.value_or(asio::error::would_block).message());
  BOOST_TEST(connected_to == serving);
  BOOST_TEST((s.transport_in_use() == kind));
  BOOST_TEST(s.local_endpoint() == from);
  BOOST_TEST_REQUIRE(seen.size() == 1u);
  BOOST_TEST(seen[0] == from);

  socket t(io, {.kind = kind});  // the same port, while s holds it
  t.bind(from);
  t.connect(serving, ec);
  BOOST_TEST((ec == asio::error::address_in_use), ec.message());
  BOOST_TEST(!t.is_open());
  t.bind(from, ec);  // still bound: a second bind is refused, as by bind(2)
  BOOST_TEST((ec == asio::error::invalid_argument), ec.message());
  BOOST_TEST(t.local_endpoint() == from);

  // Over RDMA a taken port is tried again for a second (a previous attempt's id may still be
  // letting it go); close() meanwhile ends the connect at once, aborted. TCP's bind fails
  // before the close comes.
  socket u(io, {.kind = kind});
  u.bind(from);
  std::optional<error_code> gave_up;
  u.async_connect(serving, [&](error_code e) { gave_up = e; });
  asio::steady_timer soon(io, std::chrono::milliseconds(100));
  soon.async_wait([&](error_code) { u.close(); });
  run_until(
      io, [&] { return gave_up.has_value(); }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(gave_up.has_value());
  BOOST_TEST(
      (*gave_up == (kind == transport::rdma ? asio::error::operation_aborted : asio::error::address_in_use)),
      gave_up->message());
  BOOST_TEST(!u.is_open());

  s.bind(tcp::endpoint(test_address(), 0), ec);
  BOOST_TEST((ec == asio::error::invalid_argument), ec.message());
  s.open(tcp::v4(), ec);
  BOOST_TEST((ec == asio::error::already_open), ec.message());

  s.close();  // the connect used the binding up: the next leaves from a port the system picks
  s.connect(serving);
  run_until(
      io, [&] { return seen.size() == 2; }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(seen.size() == 2u);
  BOOST_TEST(s.local_endpoint().port() != from.port());
  BOOST_TEST(seen[1] == s.local_endpoint());
  s.close();

  // The wildcard address with a fixed port: the route chooses the address (and over RDMA the
  // device), the port stays. `from` may linger in TCP's TIME_WAIT: a port free now.
  const unsigned short fixed = free_port_except(io, {serving.port()});
  socket w(io, {.kind = kind});
  w.bind(tcp::endpoint(asio::ip::address_v4::any(), fixed));
  w.connect(serving);
  run_until(
      io, [&] { return seen.size() == 3; }, std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(seen.size() == 3u);
  BOOST_TEST(w.local_endpoint() == tcp::endpoint(test_address(), fixed));
  BOOST_TEST(seen[2] == w.local_endpoint());
  BOOST_TEST((w.transport_in_use() == kind));
}

namespace {
// An option no kernel knows (TCP level, name 0x7fff), as a Settable- and GettableSocketOption.
struct unknown_option {
  int value = 1;
  template <class Protocol>
  int level(const Protocol&) const {
    return IPPROTO_TCP;
  }
  template <class Protocol>
  int name(const Protocol&) const {
    return 0x7fff;
  }
  template <class Protocol>
  const void* data(const Protocol&) const {
    return &value;
  }
  template <class Protocol>
  void* data(const Protocol&) {
    return &value;
  }
  template <class Protocol>
  std::size_t size(const Protocol&) const {
    return sizeof value;
  }
  template <class Protocol>
  void resize(const Protocol&, std::size_t) {}
};
}  // namespace

void options_before_connecting(transport kind) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  acceptor server(io, tcp::endpoint(test_address(), 0), {.kind = kind});
  const int connections = kind == transport::tcp ? 4 : 3;
  std::vector<socket> accepted;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < connections; ++i)
          accepted.push_back(co_await server.async_accept(asio::use_awaitable));
      },
      asio::detached);
  const tcp::endpoint serving(test_address(), server.local_endpoint().port());

  socket s(io, {.kind = kind});
  error_code ec;
  s.set_option(tcp::no_delay(false), ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  tcp::no_delay delay(false);
  s.get_option(delay, ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  s.open(serving.protocol());
  // Read before anything is set: what a connection starts with (no_delay is the library's).
  s.get_option(delay);
  BOOST_TEST(delay.value());
  asio::socket_base::reuse_address reuse(kind == transport::tcp);
  s.get_option(reuse);
  BOOST_TEST(reuse.value() == (kind == transport::rdma));
  asio::socket_base::receive_buffer_size room(0);
  s.get_option(room, ec);
  BOOST_TEST((kind == transport::tcp ? !ec && room.value() > 0 : ec == asio::error::operation_not_supported),
             ec.message());
  unknown_option unknown;
  s.get_option(unknown, ec);
  BOOST_TEST((ec == (kind == transport::tcp ? asio::error::no_protocol_option
                                            : asio::error::operation_not_supported)),
             ec.message());
  s.set_option(unknown_option{}, ec);
  BOOST_TEST((ec == (kind == transport::tcp ? asio::error::no_protocol_option
                                            : asio::error::operation_not_supported)),
             ec.message());
  s.set_option(asio::socket_base::keep_alive(true), ec);
  BOOST_TEST((kind == transport::tcp ? !ec : ec == asio::error::operation_not_supported), ec.message());
  s.set_option(tcp::no_delay(false));
  s.set_option(asio::socket_base::reuse_address(true));
  if (kind == transport::tcp) s.set_option(asio::socket_base::receive_buffer_size(96 * 1024));
  // What is kept reads back before the connect, while it is under way, and on the connection.
  const auto kept_reads_back = [&] {
    tcp::no_delay no_delay(true);
    s.get_option(no_delay);
    BOOST_TEST(no_delay.value() == (kind == transport::rdma));  // over TCP the user's, not the library's
    asio::socket_base::reuse_address reuse_address(false);
    s.get_option(reuse_address);
    BOOST_TEST(reuse_address.value());
    if (kind == transport::tcp) {
      asio::socket_base::keep_alive keep_alive(false);
      s.get_option(keep_alive);
      BOOST_TEST(keep_alive.value());
      asio::socket_base::receive_buffer_size size(0);
      s.get_option(size);
      BOOST_TEST(size.value() == 96 * 1024);  // as asked, though Linux reports it doubled
    }
  };
  kept_reads_back();
  std::optional<error_code> connected;
  s.async_connect(serving, [&](error_code e) { connected = e; });
  kept_reads_back();
  run_until(io, [&] { return connected.has_value(); });
  BOOST_TEST_REQUIRE((connected == error_code()), connected.value_or(asio::error::would_block).message());
  kept_reads_back();
  s.close();

  // close() forgets what was set: this connection has the library's no_delay.
  s.open(serving.protocol());
  s.set_option(tcp::no_delay(false));
  s.close();
  s.get_option(delay, ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());
  s.connect(serving);
  s.get_option(delay);
  BOOST_TEST(delay.value());
  s.close();

  // A connect without open() or bind() has the peer's family meanwhile, as tcp::socket's
  // async_connect opens one; a failed connect leaves the socket closed again.
  connected.reset();
  s.async_connect(serving, [&](error_code e) { connected = e; });
  BOOST_TEST(s.local_endpoint() == tcp::endpoint(serving.protocol(), 0));
  delay = tcp::no_delay(false);
  s.get_option(delay);
  BOOST_TEST(delay.value());
  run_until(io, [&] { return connected.has_value(); });
  BOOST_TEST_REQUIRE((connected == error_code()), connected.value_or(asio::error::would_block).message());
  BOOST_TEST(s.local_endpoint().port() != 0);
  s.close();
  connected.reset();
  const refusing_port nobody(io, {serving.port()});
  s.async_connect(nobody.endpoint(), [&](error_code e) { connected = e; });
  run_until(io, [&] { return connected.has_value(); });
  BOOST_TEST((connected.has_value() && connected != error_code()));
  s.local_endpoint(ec);
  BOOST_TEST((ec == asio::error::bad_descriptor), ec.message());

  if (kind == transport::tcp) {
    // automatic: refused where RDMA would refuse it, even if TCP is what connects; what is
    // kept reaches the TCP connection (RDMA is not tried on a machine without a device, and
    // is refused by this TCP-only server where there is one).
    socket either(io);
    either.open(serving.protocol());
    either.set_option(asio::socket_base::keep_alive(true), ec);
    BOOST_TEST((ec == asio::error::operation_not_supported), ec.message());
    asio::socket_base::keep_alive keep_alive(false);
    either.get_option(keep_alive, ec);
    BOOST_TEST((ec == asio::error::operation_not_supported), ec.message());
    either.get_option(delay);
    BOOST_TEST(delay.value());
    either.set_option(tcp::no_delay(false));
    either.get_option(delay);
    BOOST_TEST(!delay.value());
    either.connect(serving);
    BOOST_TEST((either.transport_in_use() == transport::tcp));
    either.get_option(delay);
    BOOST_TEST(!delay.value());
  }
  run_until(
      io, [&] { return accepted.size() == static_cast<std::size_t>(connections); }, std::chrono::seconds(60));
  BOOST_TEST(accepted.size() == static_cast<std::size_t>(connections));
}

/// coverbs::async_connect over a range, as Asio code connects to a resolver's results: an
/// endpoint that refuses is passed over for the next, and the one connected to is reported; a
/// range where none accepts fails with the last attempt's error, an empty one with not_found,
/// and never inside the call.
void connect_to_first_that_accepts(transport kind) {
  namespace asio = boost::asio;
  using asio::ip::tcp;
  asio::io_context io;
  acceptor server(io, tcp::endpoint(test_address(), 0), {.kind = kind});
  asio::co_spawn(io, echo::server(server, 1), asio::detached);
  const refusing_port nobody(io, {server.local_endpoint().port()});
  const tcp::endpoint refusing = nobody.endpoint();
  tcp::resolver resolver(io);
  const auto resolved =
      resolver.resolve(test_address().to_string(), std::to_string(server.local_endpoint().port()),
                       tcp::resolver::numeric_host | tcp::resolver::numeric_service);
  BOOST_REQUIRE(resolved.size() == 1u);
  socket s(io, {.kind = kind}), t(io, {.kind = kind}), u(io, {.kind = kind});
  std::optional<error_code> empty;
  coverbs::async_connect(u, std::vector<tcp::endpoint>{}, [&](error_code ec, tcp::endpoint) { empty = ec; });
  BOOST_TEST(!empty.has_value());
  std::optional<error_code> connected, none_accepts;
  tcp::endpoint connected_to;
  transport used = transport::automatic;
  std::string echoed;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::vector<tcp::endpoint> refusing_twice(2, refusing);
        auto [ec, to] =
            co_await coverbs::async_connect(t, refusing_twice, asio::as_tuple(asio::use_awaitable));
        none_accepts = ec;
        BOOST_TEST((to == tcp::endpoint()));
        BOOST_TEST(!t.is_open());
        std::vector<tcp::endpoint> candidates(1, refusing);
        for (const auto& entry : resolved) candidates.push_back(entry);
        std::tie(ec, connected_to) =
            co_await coverbs::async_connect(s, candidates, asio::as_tuple(asio::use_awaitable));
        connected = ec;
        if (ec) co_return;
        used = s.transport_in_use();
        co_await asio::async_write(s, asio::buffer(std::string_view("over the second\n")),
                                   asio::use_awaitable);
        asio::streambuf buf;
        const std::size_t n = co_await asio::async_read_until(s, buf, '\n', asio::use_awaitable);
        echoed.assign(asio::buffers_begin(buf.data()),
                      asio::buffers_begin(buf.data()) + static_cast<long>(n));
        s.close();
      },
      [&](std::exception_ptr e) {
        io.stop();
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(60));
  BOOST_TEST((empty == asio::error::not_found));
  BOOST_TEST((none_accepts == asio::error::connection_refused),
             none_accepts.value_or(error_code()).message());
  BOOST_TEST((connected == error_code()), connected.value_or(asio::error::would_block).message());
  BOOST_TEST(connected_to == resolved.begin()->endpoint());
  BOOST_TEST(echoed == "over the second\n");
  BOOST_TEST((used == kind));
}

/// A connect to a listener that never answers, raced against a timer with `||`: the timer
/// wins, the connect ends with operation_aborted and leaves the socket closed and reusable.
/// The same with a cancellation signal, with close() or cancel() from a timer (Asio's usual
/// connect timeouts; cancel() keeps open()), and for coverbs::async_connect over a range,
/// which then tries no further.
void connect_cancelled_by_timer(transport kind) {
  namespace asio = boost::asio;
  using namespace asio::experimental::awaitable_operators;
  asio::io_context io;
  // RDMA: a cm listener whose requests nobody takes. TCP: a listener with a full backlog,
  // which drops further SYNs, so the connect keeps retrying.
  std::optional<cm::id> rdma_listener;
  std::optional<asio::ip::tcp::acceptor> tcp_listener;
  std::vector<asio::ip::tcp::socket> fillers;
  unsigned short port = 0;
  if (kind == transport::rdma) {
    rdma_listener.emplace(io.get_executor());
    rdma_listener->bind(asio::ip::tcp::endpoint(test_address(), 0));
    rdma_listener->listen(16);  // room for both attempts: a full backlog refuses
    port = rdma_listener->local_endpoint().port();
  } else {
    tcp_listener.emplace(io, asio::ip::tcp::endpoint(test_address(), 0));
    tcp_listener->listen(0);
    port = tcp_listener->local_endpoint().port();
    for (int i = 0; i < 2; ++i) {
      fillers.emplace_back(io).async_connect(tcp_listener->local_endpoint(), [](error_code) {});
    }
  }
  socket s(io, {.kind = kind});
  asio::steady_timer timer(io, std::chrono::milliseconds(300));
  std::optional<std::size_t> winner;
  auto started = std::chrono::steady_clock::now(), ended = started;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto r =
            co_await (s.async_connect(asio::ip::tcp::endpoint(test_address(), port), asio::use_awaitable) ||
                      timer.async_wait(asio::use_awaitable));
        winner = r.index();
        ended = std::chrono::steady_clock::now();
        io.stop();  // the filler that never got in still waits
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(20));
  BOOST_REQUIRE(winner.has_value());
  BOOST_TEST(*winner == 1u);  // the timer
  BOOST_TEST(std::chrono::duration_cast<std::chrono::milliseconds>(ended - started).count() < 3000);
  BOOST_TEST(!s.is_open());

  // With a callback and a cancellation signal, the connect reports operation_aborted.
  io.restart();
  asio::cancellation_signal signal;
  error_code result = asio::error::would_block;
  s.async_connect(asio::ip::tcp::endpoint(test_address(), port),
                  asio::bind_cancellation_slot(signal.slot(), [&](error_code ec) {
                    result = ec;
                    io.stop();
                  }));
  timer.expires_after(std::chrono::milliseconds(300));
  timer.async_wait([&](error_code) { signal.emit(asio::cancellation_type::terminal); });
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
  BOOST_TEST(!s.is_open());

  io.restart();
  result = asio::error::would_block;
  s.async_connect(asio::ip::tcp::endpoint(test_address(), port), [&](error_code ec) {
    result = ec;
    io.stop();
  });
  timer.expires_after(std::chrono::milliseconds(300));
  timer.async_wait([&](error_code) { s.close(); });
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
  BOOST_TEST(!s.is_open());

  // cancel() from a timer ends it too, as on tcp::socket; unlike close() it keeps open() and
  // bind().
  io.restart();
  result = asio::error::would_block;
  s.open(asio::ip::tcp::v4());
  s.bind(asio::ip::tcp::endpoint(test_address(), 0));
  s.async_connect(asio::ip::tcp::endpoint(test_address(), port), [&](error_code ec) {
    result = ec;
    io.stop();
  });
  timer.expires_after(std::chrono::milliseconds(300));
  error_code cancelled = asio::error::would_block;
  timer.async_wait([&](error_code) { s.cancel(cancelled); });
  io.run_for(std::chrono::seconds(20));
  BOOST_TEST(!cancelled, cancelled.message());
  BOOST_TEST((result == asio::error::operation_aborted), result.message());
  BOOST_TEST(!s.is_open());
  error_code reopened;
  s.open(asio::ip::tcp::v4(), reopened);
  BOOST_TEST((reopened == asio::error::already_open), reopened.message());
  s.bind(asio::ip::tcp::endpoint(test_address(), 0), reopened);
  BOOST_TEST((reopened == asio::error::invalid_argument), reopened.message());  // still bound
  s.close();

  // Were the cancel to move the range on, the second attempt would hold `||` past the limit.
  io.restart();
  winner.reset();
  timer.expires_after(std::chrono::milliseconds(300));
  started = std::chrono::steady_clock::now();
  std::optional<asio::ip::tcp::endpoint> reported;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::vector<asio::ip::tcp::endpoint> silent(2, asio::ip::tcp::endpoint(test_address(), port));
        auto r = co_await (coverbs::async_connect(s, silent, asio::use_awaitable) ||
                           timer.async_wait(asio::use_awaitable));
        winner = r.index();
        ended = std::chrono::steady_clock::now();
        io.stop();
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(20));
  BOOST_REQUIRE(winner.has_value());
  BOOST_TEST(*winner == 1u);
  BOOST_TEST(std::chrono::duration_cast<std::chrono::milliseconds>(ended - started).count() < 3000);
  BOOST_TEST(!s.is_open());
}

}  // namespace coverbs::test
