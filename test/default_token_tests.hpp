// Sockets and acceptors whose executor type carries a default completion token
// (`use_awaitable_t<>::as_default_on_t<...>`, rebound_socket.hpp and rebound_acceptor.hpp), as
// Boost's C++20 examples declare tcp::socket and tcp::acceptor, over each transport.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

/// Boost's echo_server_with_default, ported by its type names: no operation names a token.
/// The acceptor yields the defaulted socket type; its peer-endpoint forms report the client;
/// asio::async_read/async_write, messages and coverbs::async_connect take the default too;
/// as_tuple's default reports a refused connect as a value.
void default_token_types(transport kind);

}  // namespace coverbs::test
