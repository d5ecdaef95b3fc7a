// ByteSource: the bytes of an input (a string, a file, a pipe, stdin) read in
// 64 KiB chunks with the checks every input gets, so a reader can parse while
// it streams instead of loading the whole input first (issue 18: a 200 MB
// batch peaked at 3.7 GB as a JSON DOM).
//
// Checks: at most kMaxInputBytes (2 GiB) in all; a directory or other
// non-readable path is named as such; optionally no NUL byte (JSON text cannot
// contain one, and nlohmann's lexer would silently stop there, accepting
// `{...}\0garbage`). Violations throw InputError(name, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace fcp::io {

inline constexpr uint64_t kMaxInputBytes = uint64_t{1} << 31;

class ByteSource {
 public:
  // Reads `text` (not copied: it must outlive the source); `name` is the field
  // of its errors.
  ByteSource(std::string_view text, std::string name, bool reject_nul);
  // Opens `path` ("-" = stdin, named "stdin" in errors). Pipes, FIFOs and
  // /dev/stdin work: the size is never asked for, only counted.
  ByteSource(const std::string& path, bool reject_nul);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // The next byte without consuming it, or -1 at the end.
  int Peek() {
    if (pos_ == end_ && !Refill()) return -1;
    return static_cast<unsigned char>(*pos_);
  }
  void Skip() { ++pos_; }
  // Appends everything that is left to `out`.
  void ReadAll(std::string& out);
  const std::string& name() const { return name_; }

  // Input iterator over the bytes, for nlohmann::json::sax_parse(first, last).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = char;
    using difference_type = std::ptrdiff_t;
    using pointer = const char*;
    using reference = char;

    Iterator() = default;
    explicit Iterator(ByteSource* source) : source_(source) {}
    char operator*() const { return static_cast<char>(source_->Peek()); }
    Iterator& operator++() {
      source_->Skip();
      return *this;
    }
    bool operator==(const Iterator& other) const {
      return AtEnd() == other.AtEnd();
    }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    bool AtEnd() const { return source_ == nullptr || source_->Peek() < 0; }
    ByteSource* source_ = nullptr;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  // Reads the next chunk; false at the end of the input.
  bool Refill();
  void CheckChunk(const char* data, size_t size);

  std::string name_;
  bool reject_nul_;
  int fd_ = -1;  // -1 for a string source
  bool own_fd_ = false;
  std::vector<char> buffer_;
  const char* pos_ = nullptr;
  const char* end_ = nullptr;
  uint64_t consumed_ = 0;     // bytes of the chunks before the current one
  uint64_t chunk_bytes_ = 0;  // bytes of the current chunk (file sources)
};

}  // namespace fcp::io
