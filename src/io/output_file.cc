// WriteTextFile: output files are written completely or not at all (issue 18:
// a full disk or an unwritable path ended in exit 0 with the output lost), and
// io::WriteAll, the write loop it shares with AtomicFile.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "fcp/io.h"
#include "fcp/types.h"
#include "io/write_all.h"

namespace fcp {

int io::WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

void WriteTextFile(const std::string& path, std::string_view text) {
  if (path.empty()) throw InputError("output", "empty file name");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0) throw InputError(path, std::string("cannot write: ") + std::strerror(errno));
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  int error = io::WriteAll(fd, text);
  // close() reports deferred errors (NFS, quota) for regular files.
  if (::close(fd) != 0 && error == 0 && errno != EINTR) error = errno;
  if (error != 0) {
    // Nothing half-written: a partial regular file is removed (its old
    // content was already truncated away by the open).
    if (regular) ::unlink(path.c_str());
    throw InputError(path, std::string("cannot write: ") + std::strerror(error));
  }
}

}  // namespace fcp
