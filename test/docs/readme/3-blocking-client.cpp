// Block 3: a blocking client.
#include <boost/asio.hpp>
#include <coverbs/coverbs.hpp>
#include <string>

namespace asio = boost::asio;

std::size_t blocking_client(asio::io_context& io, asio::ip::tcp::resolver& resolver, const std::string& host,
                            const std::string& request, std::string& reply) {
  // @README@
  return n;
}
