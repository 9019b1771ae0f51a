// TLS over a coverbs socket: boost::asio::ssl::stream layered on it as on a tcp::socket, with a
// certificate the client verifies, so a TLS server ports by changing type names too.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// Handshake (the client verifying the server's certificate and name), 256 KiB each way in
/// TLS records, then close_notify both ways; the payload arrives intact on both sides.
void tls_echo(transport kind);

/// The client trusts another certificate; then the right one, but under another name.
void tls_wrong_certificate_fails(transport kind);

}  // namespace coverbs::test
