// Preloaded into a file-transfer program by file_transfer_test.sh: fdatasync first sleeps
// COVERBS_SLOW_SYNC_SECONDS, as a slow disk (or NFS, or a full page cache) makes it take.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

extern "C" int fdatasync(int fd) {
  using sync_fn = int (*)(int);
  static const auto real = reinterpret_cast<sync_fn>(dlsym(RTLD_NEXT, "fdatasync"));
  if (const char* seconds = std::getenv("COVERBS_SLOW_SYNC_SECONDS")) {
    sleep(static_cast<unsigned>(std::atoi(seconds)));
  }
  return real(fd);
}
