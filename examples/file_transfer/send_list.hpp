// What `file_client send` sends: the files named, and the regular files of the directories
// named, checked before connecting, so that a typo costs no connection.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft {

struct send_item {
  std::filesystem::path path;
  std::string name;  ///< what the server stores it as
};

/// The files to send, each under its own name or `as`; nothing (after an error message on
/// stderr) when one is missing or unreadable. A directory gives its regular files, sorted,
/// hidden ones aside (the server refuses names with a leading '.'); no subdirectories.
inline std::optional<std::vector<send_item>> send_list(std::string_view program,
                                                       const std::vector<std::string>& operands,
                                                       const std::optional<std::string>& as) {
  namespace fs = std::filesystem;
  std::vector<send_item> items;
  auto add = [&](const fs::path& p) {
    if (::access(p.c_str(), R_OK) != 0) {
      std::cerr << program << ": cannot send " << p.string() << ": " << std::strerror(errno) << "\n";
      return false;
    }
    items.push_back({p, as.value_or(p.filename().string())});
    return true;
  };
  for (const auto& operand : operands) {
    const fs::path p = operand;
    std::error_code ec;
    const auto status = fs::status(p, ec);
    if (fs::is_regular_file(status)) {
      if (!add(p)) return {};
    } else if (fs::is_directory(status)) {
      std::vector<fs::path> files;
      for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
        const auto name = it->path().filename().string();
        if (it->is_regular_file(ec) && name.front() != '.') files.push_back(it->path());
      }
      if (ec) {
        std::cerr << program << ": cannot list " << operand << ": " << ec.message() << "\n";
        return {};
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        if (!add(f)) return {};
      }
    } else {
      const std::string why = ec ? ec.message() : "not a regular file or directory";
      std::cerr << program << ": cannot send " << operand << ": " << why << "\n";
      return {};
    }
  }
  // The server stores each under its name: a second file of the same name would replace the
  // first, which would look sent.
  if (as && items.size() > 1) {
    std::cerr << program << ": --as names one file, and " << operands.front() << " holds " << items.size()
              << "\n";
    return {};
  }
  std::unordered_map<std::string_view, const send_item*> by_name;  // a directory may hold many
  for (const auto& item : items) {
    const auto [first, fresh] = by_name.try_emplace(item.name, &item);
    if (fresh) continue;
    std::cerr << program << ": cannot send both " << first->second->path.string() << " and "
              << item.path.string() << ": the server would store both as " << item.name << "\n";
    return {};
  }
  return items;
}

}  // namespace ft
