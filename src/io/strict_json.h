// Internal to the readers: strict JSON parsing (batch_json.cc) and the caps
// every length reader shares with python/fcp/lengths.py (issue 30).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fcp {

// One JSON document parsed as `fcp plan` parses its input: nesting at most 16
// containers deep, no duplicate keys, no NUL byte, nothing after the value, at
// most `max_values` values (memory stays proportional to them).
// InputError(what, ...) naming the cap otherwise.
nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what,
                               size_t max_values);

// Caps every length reader applies, C++ and Python (python/fcp/lengths.py has
// the same constants): an input's bytes (io::kMaxInputBytes, 2 GiB), one
// line's bytes, and a JSON lines record's nesting (16, as `fcp plan`'s input).
// Errors name the cap. Lengths in text (length files, CSV cells) follow one
// grammar: optional '-', ASCII digits ('+5', '1_000' and non-ASCII digits are
// not integers), surrounding blanks ignored.
inline constexpr size_t kMaxLineBytes = size_t{1} << 26;

}  // namespace fcp
