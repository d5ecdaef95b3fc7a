// ByteSource and ReadFileOrStdin: every input file of the project goes
// through here (size cap, directory check, NUL check, pipe support).
#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "fcp/io.h"
#include "fcp/types.h"

namespace fcp::io {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 16;

std::string SystemError(int error) { return std::strerror(error); }

}  // namespace

ByteSource::ByteSource(std::string_view text, std::string name, bool reject_nul)
    : name_(std::move(name)), reject_nul_(reject_nul) {
  CheckChunk(text.data(), text.size());
  pos_ = text.data();
  end_ = text.data() + text.size();
}

ByteSource::ByteSource(const std::string& path, bool reject_nul)
    : name_(path == "-" ? "stdin" : path),
      reject_nul_(reject_nul),
      buffer_(kChunkBytes) {
  if (path.empty()) throw InputError("input", "empty file name");
  if (path == "-") {
    fd_ = STDIN_FILENO;
  } else {
    // A FIFO blocks here until a writer opens it, as with `cat`.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) throw InputError(path, "cannot open: " + SystemError(errno));
    own_fd_ = true;
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    if (own_fd_) ::close(fd_);
    throw InputError(name_, "cannot read: " + SystemError(error));
  }
  if (S_ISDIR(st.st_mode)) {
    if (own_fd_) ::close(fd_);
    throw InputError(name_, "is a directory, not a file");
  }
  if (S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > kMaxInputBytes) {
    if (own_fd_) ::close(fd_);
    throw InputError(name_, "larger than 2 GiB");
  }
}

ByteSource::~ByteSource() {
  if (own_fd_) ::close(fd_);
}

void ByteSource::CheckChunk(const char* data, size_t size) {
  if (consumed_ + size > kMaxInputBytes)
    throw InputError(name_, "larger than 2 GiB");
  if (reject_nul_ && size > 0) {
    if (const void* nul = std::memchr(data, '\0', size)) {
      const auto offset = consumed_ + static_cast<uint64_t>(
                                          static_cast<const char*>(nul) - data);
      throw InputError(name_, "NUL byte at offset " + std::to_string(offset) +
                                  " (JSON text cannot contain one)");
    }
  }
}

bool ByteSource::Refill() {
  if (fd_ < 0) return false;  // a string source is one chunk
  consumed_ += chunk_bytes_;
  chunk_bytes_ = 0;
  ssize_t n;
  do {
    n = ::read(fd_, buffer_.data(), buffer_.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    // EISDIR arrives here on systems where open+fstat did not tell.
    throw InputError(name_, errno == EISDIR
                                ? std::string("is a directory, not a file")
                                : "read failed: " + SystemError(errno));
  }
  pos_ = buffer_.data();
  end_ = buffer_.data();
  if (n == 0) return false;
  CheckChunk(buffer_.data(), static_cast<size_t>(n));
  chunk_bytes_ = static_cast<uint64_t>(n);
  end_ = buffer_.data() + n;
  return true;
}

void ByteSource::ReadAll(std::string& out) {
  while (Peek() >= 0) {
    out.append(pos_, end_);
    pos_ = end_;
  }
}

}  // namespace fcp::io

namespace fcp {

std::string ReadFileOrStdin(const std::string& path) {
  io::ByteSource source(path, /*reject_nul=*/false);
  std::string data;
  source.ReadAll(data);
  return data;
}

}  // namespace fcp
