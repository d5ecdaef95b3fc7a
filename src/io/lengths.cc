// Length files: one integer per line, or CSV with a `tokens` column.
#include "fcp/lengths.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fcp/io.h"
#include "io/byte_source.h"
#include "io/csv.h"
#include "io/strict_json.h"

namespace fcp {
namespace {

constexpr int64_t kMaxLength = int64_t{1} << 40;

std::string_view Trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

// Splits one CSV line; double quotes protect commas ("" is a literal quote).
std::vector<std::string> SplitCsv(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

namespace {

int64_t ParseLength(std::string_view text, const std::string& field) {
  text = Trim(text);
  int64_t v = 0;
  const auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range)
    throw InputError(field, "length out of range");
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    throw InputError(field, "expected a positive integer, got \"" +
                                std::string(text.substr(0, 40)) + "\"");
  }
  if (v < 0) throw InputError(field, "length must be >= 0");
  if (v > kMaxLength)
    throw InputError(field, "length " + std::to_string(v) +
                                " exceeds the limit of 2^40 tokens");
  return v;
}

}  // namespace

std::vector<int64_t> ParseLengths(std::string_view text) {
  std::vector<int64_t> lengths;
  int tokens_column = -1;  // >= 0 once a CSV header was seen
  bool first = true;
  size_t line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++line_no;
    if (end - start > kMaxLineBytes) {
      throw InputError("line " + std::to_string(line_no),
                       "longer than " + std::to_string(kMaxLineBytes) +
                           " bytes (the line cap)");
    }
    std::string_view line = Trim(text.substr(start, end - start));
    start = end + 1;
    if (line.empty() || line.front() == '#') {
      if (end == text.size()) break;
      continue;
    }
    const std::string field = "line " + std::to_string(line_no);
    if (first) {
      first = false;
      const bool header =
          line.find_first_not_of("0123456789+-") != std::string_view::npos &&
          line.find(',') != std::string_view::npos;
      const bool word =
          line.find_first_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") !=
          std::string_view::npos;
      if (header || word) {
        const auto cols = SplitCsv(line);
        for (size_t c = 0; c < cols.size(); ++c) {
          if (Trim(cols[c]) == "tokens") tokens_column = static_cast<int>(c);
        }
        if (tokens_column < 0) {
          throw InputError(field, "CSV header has no \"tokens\" column");
        }
        if (end == text.size()) break;
        continue;
      }
    }
    if (tokens_column >= 0) {
      const auto cols = SplitCsv(line);
      if (static_cast<int>(cols.size()) <= tokens_column) {
        throw InputError(field, "missing the tokens column");
      }
      const int64_t len = ParseLength(cols[tokens_column], field);
      if (len > 0) lengths.push_back(len);
    } else {
      const int64_t len = ParseLength(line, field);
      if (len > 0) lengths.push_back(len);
    }
    if (end == text.size()) break;
  }
  return lengths;
}

// ReadFileOrStdin is in byte_source.cc (shared by every input reader).

// The whole input, streamed so that a line past kMaxLineBytes (/dev/zero)
// stops the read there, not at the 2 GiB input cap.
std::string ReadLinesCapped(const std::string& path) {
  io::ByteSource source(path, /*reject_nul=*/false);
  std::string text;
  size_t line_start = 0, line_no = 1;
  for (int c = source.Peek(); c >= 0; c = source.Peek()) {
    source.Skip();
    text.push_back(static_cast<char>(c));
    if (c == '\n') {
      line_start = text.size();
      ++line_no;
    } else if (text.size() - line_start > kMaxLineBytes) {
      throw InputError(path + ": line " + std::to_string(line_no),
                       "longer than " + std::to_string(kMaxLineBytes) +
                           " bytes (the line cap)");
    }
  }
  return text;
}

std::vector<int64_t> ReadLengthsFile(const std::string& path) {
  // A dataset (JSONL, Parquet, Arrow, Megatron .idx) is not a length file:
  // say which command turns it into one rather than fail on its first line.
  const DatasetFormat format = DetectDatasetFormat(path);
  if (format != DatasetFormat::kText && format != DatasetFormat::kCsv) {
    throw InputError(
        path,
        "is a dataset, not a length file: run `fcp lengths " + path +
            " -o lengths.txt` first (docs/lengths.md) and pass lengths.txt");
  }
  const std::string text = ReadLinesCapped(path);
  try {
    auto lengths = ParseLengths(text);
    if (lengths.empty()) throw InputError(path, "no lengths found");
    return lengths;
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.field(),
                     std::string(e.what()).substr(e.field().size() + 2));
  }
}

}  // namespace fcp
