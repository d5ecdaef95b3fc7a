// EscapeForMessage: every error line the project prints is one line of
// printable text, whatever bytes the input put into it (issue 18: a newline in
// a model name gave several stderr lines, CR and ANSI escapes reached the
// terminal, a NUL cut the message short).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fcp/types.h"

namespace fcp {
namespace {

constexpr size_t kMaxMessageBytes = 4096;
constexpr std::string_view kTruncated = " [truncated]";

void AppendHexByte(std::string& out, unsigned char byte) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", byte);
  out += buf;
}

void AppendCodePoint(std::string& out, uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  out += buf;
}

// Code points a terminal or viewer treats as control, line break or text
// direction change (the last: "Trojan Source" reordering).
bool IsUnsafeCodePoint(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

// Length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no
// overlongs, no surrogates, <= U+10FFFF), 0 if there is none; its code point
// in `cp`.
size_t Utf8Sequence(std::string_view text, size_t i, uint32_t& cp) {
  const auto byte = [&](size_t k) {
    return static_cast<unsigned char>(text[k]);
  };
  const unsigned char b0 = byte(i);
  size_t len = 0;
  uint32_t min = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2, cp = b0 & 0x1f, min = 0x80;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3, cp = b0 & 0x0f, min = 0x800;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

}  // namespace

std::string EscapeForMessage(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    // Cut long texts; the margin keeps an already cut text unchanged.
    if (out.size() >= kMaxMessageBytes && text.size() - i > kTruncated.size()) {
      out += kTruncated;
      break;
    }
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7f) {
        AppendHexByte(out, c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = Utf8Sequence(text, i, cp);
    if (len == 0) {
      AppendHexByte(out, c);
      ++i;
    } else if (IsUnsafeCodePoint(cp)) {
      AppendCodePoint(out, cp);
      i += len;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace fcp
