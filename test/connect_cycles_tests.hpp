// Connect/close cycles shared by every transport: a client connects through the acceptor, one
// message goes each way, both ends close; over and over. After a warm-up nothing the process
// holds may grow: file descriptors, RDMA objects (queue pairs, memory regions, ...), live heap.
#pragma once

#include "coverbs/socket.hpp"

namespace coverbs::test {

void connect_close_cycles(transport kind, socket_options options = {});

}  // namespace coverbs::test
