// A scratch directory for tests that write files.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace tierflow::testing {

// A fresh directory under the system temp directory, removed with its contents.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view tag)
      : path_(std::filesystem::temp_directory_path() /
              fmt::format("tierflow-test-{}-{}", tag, static_cast<long>(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }
  [[nodiscard]] size_t entry_count() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path_),
                                             std::filesystem::directory_iterator{}));
  }
  /// Names of the entries in the directory, sorted.
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace tierflow::testing
