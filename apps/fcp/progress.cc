#include "progress.h"

#include <unistd.h>

namespace fcp::cli {

Progress::Progress(bool enabled, std::FILE* out)
    : Progress(enabled, out, out != nullptr && isatty(fileno(out)) == 1) {}

Progress::Progress(bool enabled, std::FILE* out, bool terminal)
    : enabled_(enabled && out != nullptr), out_(out), terminal_(terminal) {}

Progress::~Progress() { Finish(); }

void Progress::Update(const std::string& message) {
  if (!enabled_) return;
  std::string line;
  line.reserve(message.size());
  for (unsigned char c : message)
    line += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  if (terminal_) {
    // Rewrite the line; pad with spaces over a longer previous message.
    const size_t pad =
        last_width_ > line.size() ? last_width_ - line.size() : 0;
    std::fprintf(out_, "\r%s%s", line.c_str(), std::string(pad, ' ').c_str());
    last_width_ = line.size();
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::Finish() {
  if (enabled_ && terminal_ && last_width_ > 0) {
    std::fputc('\n', out_);
    std::fflush(out_);
    last_width_ = 0;
  }
}

std::function<void(const std::string&)> Progress::Callback() {
  return [this](const std::string& message) { Update(message); };
}

}  // namespace fcp::cli
