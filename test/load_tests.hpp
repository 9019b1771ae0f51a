// Stream correctness under load: many concurrent connections, random read and write sizes,
// a checksum of everything each way.
#pragma once

#include <cstddef>

#include "coverbs/socket.hpp"

namespace coverbs::test {

void many_connections(transport kind, int connections, std::size_t bytes_each, socket_options options = {});

}  // namespace coverbs::test
