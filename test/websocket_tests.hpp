// Boost.Beast's WebSocket stream over a coverbs socket (coverbs/beast.hpp), as over a
// tcp::socket: the upgrade handshake, messages both ways, and the closing handshake with
// its teardown.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// A text message and a 200 KiB binary one echoed; the client closes (normal) and the
/// server's next read ends with websocket::error::closed; the server's socket is then closed by
/// the teardown, as on tcp::socket.
void websocket_echo(transport kind);

/// A stream that owns its socket (`websocket::stream<coverbs::socket>`) and Beast's idle
/// timeout: after one message the client goes quiet, so the server's next read ends with
/// beast::error::timeout, no sooner than the idle timeout after the handshake (without
/// keep-alive pings Beast's timer runs from there), and Beast closes the server's socket
/// (beast_close_socket); the client's read then ends too, with an error, not a hang.
void websocket_idle_timeout(transport kind);

}  // namespace coverbs::test
