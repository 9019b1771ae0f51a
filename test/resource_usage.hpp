// What a process holds, as the kernel and the allocator count it: open file descriptors, RDMA
// objects, live heap bytes and resident memory. Leak tests compare two snapshots.
#pragma once

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <string>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// From the sanitizer runtime; g++ ships no header that declares it.
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

namespace coverbs::test {

struct resource_usage {
  std::size_t fds = 0;
  /// The kernel's count of this process's RDMA objects by type (qp, mr, ...); empty for TCP.
  std::map<std::string, std::size_t> rdma;
  std::size_t heap_bytes = 0;  ///< allocated and not yet freed
  std::size_t rss_kib = 0;

  friend std::ostream& operator<<(std::ostream& out, const resource_usage& u) {
    out << "fds " << u.fds;
    for (const auto& [type, count] : u.rdma) out << ", " << type << ' ' << count;
    return out << ", heap " << u.heap_bytes << " B, rss " << u.rss_kib << " KiB";
  }
};

inline std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;  // the directory iterator's own descriptor
}

inline std::size_t rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) return std::stoul(line.substr(6));
  }
  return 0;
}

/// Live heap bytes. Under ASan and TSan freed blocks sit in a quarantine and glibc's malloc is
/// not in use, so ask the sanitizer's allocator instead.
inline std::size_t heap_bytes() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
#endif
}

/// How many objects of `type` (qp, mr, pd, cq, cm_id) this process holds, from the kernel's
/// resource tracking as iproute2's `rdma` tool reports it (one JSON record per object).
inline std::size_t rdma_objects(const std::string& type) {
  const std::string command = "rdma -j resource show " + type + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  std::string output;
  char chunk[4096];
  for (std::size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;) output.append(chunk, n);
  if (pclose(pipe) != 0) throw std::runtime_error(command + " failed: " + output);
  const std::string mine = "\"pid\":" + std::to_string(getpid());
  std::size_t count = 0;
  for (auto at = output.find(mine); at != std::string::npos; at = output.find(mine, at + 1)) {
    const char next = at + mine.size() < output.size() ? output[at + mine.size()] : '}';
    if (next == ',' || next == '}') ++count;
  }
  return count;
}

inline resource_usage measure_usage(bool with_rdma) {
  resource_usage u;
  u.fds = open_fds();
  u.heap_bytes = heap_bytes();
  u.rss_kib = rss_kib();
  if (with_rdma) {
    for (const char* type : {"qp", "cq", "mr", "pd", "cm_id"}) u.rdma[type] = rdma_objects(type);
  }
  return u;
}

}  // namespace coverbs::test
