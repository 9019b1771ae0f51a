// Block 5: the completion service and a queue pair.
#include <boost/asio.hpp>
#include <coverbs/coverbs.hpp>

void open_a_queue_pair(const coverbs::verbs::queue_pair_address& peer_address) {
  // @README@
}
