// A file being received: written under a temporary name in the target directory and given
// its final name only once it is complete, so an interrupted transfer never leaves a file
// that looks whole. A crash leaves at most a `.NAME.part-XXXXXX` file behind.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/random_access_file.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

// Files go through io_uring: the library defines BOOST_ASIO_HAS_IO_URING for its users.
#if !defined(BOOST_ASIO_HAS_FILE)
#error "Asio's files are off: build with BOOST_ASIO_HAS_IO_URING (coverbs::coverbs sets it)"
#endif

namespace ft {

namespace asio = boost::asio;

/// What part_file adds to a name: mkstemp replaces the six X's with letters and digits.
inline constexpr std::string_view part_suffix = ".part-XXXXXX";

/// The regular files in `dir` named as part_file names files being received
/// (`.NAME.part-XXXXXX`, mkstemp's six letters and digits): those a server killed mid-transfer
/// (SIGKILL, a crash) left, unless one is receiving them now. A directory that cannot be read
/// (whole or in part) gives what was read.
inline std::vector<std::string> part_names(const std::filesystem::path& dir) {
  constexpr std::string_view mark = part_suffix.substr(0, part_suffix.size() - 6);  // ".part-"
  std::vector<std::string> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto at = name.rfind(mark);
    const bool named = name.starts_with('.') && at != std::string::npos && at > 1 &&
                       name.size() == at + part_suffix.size() &&
                       std::all_of(name.begin() + at + mark.size(), name.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
                       });
    std::error_code type_ec;
    if (named && it->is_regular_file(type_ec)) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

class part_file {
 public:
  /// Creates `dir/.NAME.part-XXXXXX` and reserves `size` bytes for it, so a disk too small,
  /// or a directory where the file is to go, is reported before any data moves. Throws
  /// std::system_error.
  part_file(const asio::any_io_executor& ex, const std::filesystem::path& dir, const std::string& name,
            std::uint64_t size)
      : file_(ex), final_(dir / name) {
    // The rename would fail, after the whole transfer (a symbolic link is replaced, not followed).
    struct stat there {};
    if (::lstat(final_.c_str(), &there) == 0 && S_ISDIR(there.st_mode))
      throw std::system_error(EISDIR, std::generic_category(), "cannot replace " + final_.string());
    // Long names are cut in the temporary one: NAME_MAX applies to it too.
    std::string pattern = (dir / ("." + name.substr(0, 200) + std::string(part_suffix))).string();
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0)
      throw std::system_error(errno, std::generic_category(), "cannot create a file in " + dir.string());
    temp_ = pattern;
    file_.assign(fd);
    if (size > 0 && ::fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0 && errno != EOPNOTSUPP) {
      const int err = errno;
      remove();
      throw std::system_error(err, std::generic_category(),
                              "cannot store " + std::to_string(size) + " bytes in " + dir.string());
    }
  }
  part_file(const part_file&) = delete;
  part_file& operator=(const part_file&) = delete;
  ~part_file() {
    if (!committed_) remove();
  }

  asio::random_access_file& file() noexcept { return file_; }
  const std::filesystem::path& final_path() const noexcept { return final_; }

  /// Flushes the data to the disk (on `blocking`, off the caller's event loop), gives the file
  /// the permissions a new file gets (mkstemp's are 0600), and renames it to its final name,
  /// replacing any file of that name. Throws std::system_error.
  asio::awaitable<void> commit(asio::thread_pool::executor_type blocking) {
    const int fd = file_.native_handle();
    // Before the rename: after a power loss, the final name must never show a file whose
    // data did not reach the disk.
    const int err = co_await asio::co_spawn(
        blocking, [fd]() -> asio::awaitable<int> { co_return ::fdatasync(fd) == 0 ? 0 : errno; },
        asio::use_awaitable);
    if (err != 0) throw std::system_error(err, std::generic_category(), "cannot write " + final_.string());
    if (::fchmod(fd, 0666 & ~umask_value()) != 0 || ::rename(temp_.c_str(), final_.c_str()) != 0) {
      throw std::system_error(errno, std::generic_category(), "cannot rename to " + final_.string());
    }
    committed_ = true;
    file_.close();
  }

 private:
  void remove() noexcept {
    boost::system::error_code ignored;
    file_.close(ignored);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }
  static mode_t umask_value() {
    static const mode_t mask = [] {
      const mode_t m = ::umask(0);
      ::umask(m);
      return m;
    }();
    return mask;
  }

  asio::random_access_file file_;
  std::filesystem::path final_;
  std::string temp_;
  bool committed_ = false;
};

}  // namespace ft
