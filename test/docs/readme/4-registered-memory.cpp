// Block 4: registered memory and its descriptor.
#include <array>
#include <boost/asio.hpp>
#include <coverbs/coverbs.hpp>
#include <vector>

namespace asio = boost::asio;

void send_descriptor_to_peer(const std::array<std::byte, coverbs::remote_buffer::wire_size>&);

asio::awaitable<std::size_t> registered_memory(coverbs::socket& socket,
                                               const coverbs::registered_memory& local,
                                               const coverbs::remote_buffer& descriptor) {
  // @README@
  co_return n;
}
