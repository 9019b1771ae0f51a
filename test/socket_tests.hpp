// Socket-level test cases run over each transport: the shared stream bodies through a real
// acceptor and connect, the ported Asio echo program, and connection errors.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

void socket_suite_bulk(transport kind, std::size_t size);

void socket_suite_lines(transport kind);

void socket_suite_close(transport kind);

void socket_suite_lazy(transport kind);

void socket_suite_small_writes(transport kind);

void socket_suite_cancelled_read(transport kind);

void socket_suite_cancelled_write(transport kind, std::size_t size);

void socket_suite_cancelled_registered_write(transport kind, std::size_t size);

void socket_suite_registered_writes(transport kind, std::size_t size);

void socket_suite_registered_messages(transport kind, bool zero_copy);

/// The Asio echo program, unchanged, over coverbs types: several concurrent clients.
void ported_echo(transport kind);

/// Socket options as a TCP program sets them. Over TCP they reach the connection's socket
/// (no_delay off and on, keep_alive, a receive buffer size, which Asio reports as set); over
/// RDMA no_delay and reuse_address are taken and always read true, anything else is
/// operation_not_supported;
/// a socket not open gives bad_descriptor; the throwing overloads throw the same. The
/// connection still carries lines afterwards.
void socket_options_as_asio(transport kind);

/// What Asio programs reach through their socket and acceptor types besides the members:
/// socket_base's names (`tcp::socket::shutdown_both`, `tcp::acceptor::reuse_address`, ...),
/// lowest_layer(), the acceptor's (context, endpoint, reuse_address) constructor and its
/// error_code overloads, each as on tcp::socket and tcp::acceptor.
void asio_names_and_overloads(transport kind);

/// available(): the bytes a read takes at once, as tcp::socket::available; messages are not
/// stream bytes and are not counted.
void available_bytes(transport kind);

/// An acceptor set up step by step, as Asio servers often do (open, set_option, bind,
/// listen), then serving the echo program; each step's errors as on tcp::acceptor. Options
/// read back (over RDMA alone reuse_address reads true, keep_alive is refused); before bind()
/// the endpoint is the family's any address and port 0, and listen() binds to a port the
/// system picks, which a client reaches.
void acceptor_set_up_step_by_step(transport kind);

/// Nobody listens: the connect fails with connection_refused, promptly.
void refused(transport kind);

/// A client bound before connecting, as with tcp::socket's open and bind: the connection
/// leaves from that address and port (the socket reports them, the server sees them), and
/// the binding holds for each endpoint coverbs::async_connect tries. An address this machine
/// lacks is refused at once, so is one of another family than open()'s; a port a connection
/// holds gives address_in_use at connect; a socket cannot be opened twice, nor bound twice or
/// once connected; a connect that succeeded uses the binding up.
void bound_before_connecting(transport kind);

/// Options set between open() and connect, as Asio clients set them: refused where not open,
/// refused at once where a transport the socket may use refuses them (an option the kernel
/// does not know; over RDMA, and so under automatic, anything but no_delay and
/// reuse_address), kept otherwise and found on the connection (over TCP the user's
/// no_delay(false) over the library's default, also after automatic fell back to TCP); a
/// close forgets them.
void options_before_connecting(transport kind);

/// coverbs::async_connect over a range, as Asio code connects to a resolver's results: an
/// endpoint that refuses is passed over for the next, and the one connected to is reported; a
/// range where none accepts fails with the last attempt's error, an empty one with not_found,
/// and never inside the call.
void connect_to_first_that_accepts(transport kind);

/// A connect to a listener that never answers, raced against a timer with `||`: the timer
/// wins, the connect ends with operation_aborted and leaves the socket closed and reusable.
/// The same with a cancellation signal, with close() or cancel() from a timer (Asio's usual
/// connect timeouts; cancel() keeps open()), and for coverbs::async_connect over a range,
/// which then tries no further.
void connect_cancelled_by_timer(transport kind);

}  // namespace coverbs::test
