// Progress of long commands on stderr: on a terminal one line rewritten in
// place; otherwise (a pipe, a log file) one plain line per update, so logs
// stay readable. Control characters in a message are shown as '?', so a
// message never spans lines or moves the cursor. Not thread-safe: call from
// one thread (the library calls its progress callbacks from the caller's).
#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace fcp::cli {

class Progress {
 public:
  // `enabled` false (e.g. --quiet): every call is a no-op. `out` is stderr
  // unless a test passes another stream; `terminal` then says how to draw.
  explicit Progress(bool enabled, std::FILE* out = stderr);
  Progress(bool enabled, std::FILE* out, bool terminal);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Update(const std::string& message);
  // Ends an in-place line with a newline (no-op otherwise); the destructor
  // calls it.
  void Finish();
  // A callback for the library's `progress` options; valid while *this lives.
  std::function<void(const std::string&)> Callback();

 private:
  bool enabled_;
  std::FILE* out_;
  bool terminal_;
  size_t last_width_ = 0;
};

}  // namespace fcp::cli
