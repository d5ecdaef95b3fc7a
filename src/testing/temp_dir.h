// A fresh directory (mkdtemp under the system temp dir) for a test, removed
// with everything in it when the object goes out of scope.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace fcp::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fcp-test") {
    std::string templ =
        (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX"))
            .string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `bytes` to `name` in the directory; returns its path.
  std::string Write(const std::string& name, const std::string& bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace fcp::testing
