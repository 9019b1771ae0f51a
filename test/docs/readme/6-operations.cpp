// Block 6: operations with several completion tokens.
#include <boost/asio.hpp>
#include <coverbs/coverbs.hpp>
#include <future>
#include <vector>

namespace asio = boost::asio;

asio::awaitable<void> operations(coverbs::async_queue_pair& qp, coverbs::verbs::protection_domain& pd,
                                 const coverbs::remote_buffer& peer_region,
                                 const coverbs::remote_buffer& peer_counter) {
  using namespace coverbs;
  // @README@
}
