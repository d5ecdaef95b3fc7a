// libFuzzer target: the length-file reader (fcp::ParseLengths).
//
// Properties: ParseLengths returns or throws fcp::InputError naming a line
// ("line N"); every returned length is in [1, 2^40]; the number of lengths
// never exceeds the number of lines; parsing is deterministic.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/io.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "lengths_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<int64_t> lengths;
  try {
    lengths = fcp::ParseLengths(text);
  } catch (const fcp::InputError& e) {
    if (e.field().rfind("line ", 0) != 0)
      Fail("InputError does not name a line", e.what());
    return 0;
  }
  size_t lines = 1;
  for (char c : text) lines += c == '\n';
  if (lengths.size() > lines)
    Fail("more lengths than lines", std::to_string(lengths.size()));
  for (int64_t len : lengths) {
    if (len < 1 || len > (int64_t{1} << 40))
      Fail("length out of range", std::to_string(len));
  }
  if (fcp::ParseLengths(text) != lengths) Fail("non-deterministic", "");
  return 0;
}
