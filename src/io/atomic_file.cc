// AtomicFile: outputs that appear complete or not at all (see
// include/fcp/io.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "fcp/io.h"
#include "io/write_all.h"

namespace fcp {
namespace {

std::string DirectoryOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const std::string& field)
    : path_(path), field_(field) {
  auto fail = [&](const std::string& why) {
    throw InputError(field_,
                     "cannot write '" + EscapeForMessage(path_) + "': " + why);
  };
  if (path.empty()) fail("empty path");
  if (path.back() == '/') fail("is a directory");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    fail("is a directory");
  // An existing device, FIFO or socket (/dev/null, /dev/stdout, a pipe) is
  // written in place: renaming over it would replace the device node.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) fail("is a directory");
    fd_ = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0) fail(std::strerror(errno));
    return;
  }
  // A fixed short name in the destination directory: rename() is atomic only
  // within one file system, and the user's base name may be near NAME_MAX.
  std::string templ = DirectoryOf(path) + "/.fcp-out-XXXXXX";
  fd_ = ::mkstemp(templ.data());
  if (fd_ < 0) fail(std::strerror(errno));
  temp_path_ = templ;
  ::fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::Write(std::string_view data) {
  if (const int error = io::WriteAll(fd_, data); error != 0)
    throw InputError(field_, "cannot write '" + EscapeForMessage(path_) +
                                 "': " + std::strerror(error));
}

void AtomicFile::Commit() {
  auto fail = [&](const std::string& why) {
    throw InputError(field_,
                     "cannot write '" + EscapeForMessage(path_) + "': " + why);
  };
  if (!temp_path_.empty() && ::fsync(fd_) != 0 && errno != EINVAL)
    fail(std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail(std::strerror(errno));
  if (temp_path_.empty()) return;  // written in place
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail(std::strerror(errno));
  temp_path_.clear();
}

void WriteFileAtomically(const std::string& path, std::string_view contents,
                         const std::string& field) {
  AtomicFile file(path, field);
  file.Write(contents);
  file.Commit();
}

}  // namespace fcp
