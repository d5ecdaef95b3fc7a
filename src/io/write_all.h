// The write loop shared by the output files (WriteTextFile, AtomicFile).
// Thread-safety: reentrant.
#pragma once

#include <string_view>

namespace fcp::io {

// Writes all of `data` to `fd`, retrying short writes and EINTR. Returns 0, or
// the errno of the write that failed (EIO when write() wrote nothing).
int WriteAll(int fd, std::string_view data);

}  // namespace fcp::io
