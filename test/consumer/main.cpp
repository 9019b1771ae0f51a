#include <coverbs/coverbs.hpp>
#include <iostream>

int main() {
  // Touch compiled code (descriptor codec, error category) and headers (the async API).
  const coverbs::remote_buffer r{4096, 42, 64};
  coverbs::remote_buffer parsed;
  if (coverbs::remote_buffer::parse(r.serialize(), parsed) || !(parsed == r)) return 1;
  const auto ec = coverbs::make_error_code(coverbs::wc_errc::remote_access);
  std::cout << "consumer: " << ec.message() << ", " << coverbs::verbs::device::names().size()
            << " RDMA device(s)\n";
  return ec == std::errc::permission_denied ? 0 : 1;
}
