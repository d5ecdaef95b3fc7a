// WriteTextFile: output files are written completely or not at all (issue 18:
// a full disk or an unwritable path ended in exit 0 with the output lost), and
// io::WriteAll, the write loop it shares with AtomicFile; CheckOutputDirectory,
// the check before a long run.
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

void CheckOutputDirectory(const std::string& path, const std::string& field) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(field, "cannot write '" + EscapeForMessage(path) +
                                "': no directory '" + EscapeForMessage(dir) +
                                "'");
}

// The one output-file policy (issue 30): AtomicFile writes devices and FIFOs
// in place and replaces anything else atomically, so an old file survives a
// failed write instead of being truncated first.
void WriteTextFile(const std::string& path, std::string_view text) {
  if (path.empty()) throw InputError("output", "empty file name");
  WriteFileAtomically(path, text, path);
}

}  // namespace fcp
