// Sequence lengths from datasets (include/fcp/lengths.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fcp/io.h"
#include "fcp/lengths.h"
#include "io/byte_source.h"
#include "io/csv.h"
#include "io/strict_json.h"

namespace fcp {
namespace {

constexpr int64_t kMaxLength = int64_t{1} << 40;
// Megatron's .idx header: magic (9 bytes), version u64, dtype code u8,
// sequence count u64, document count u64 (indexed_dataset.py,
// _IndexReader.__init__: "offset = 34").
constexpr char kIdxMagic[] = "MMIDIDX\0\0";
constexpr size_t kIdxMagicBytes = 9;
constexpr size_t kIdxHeaderBytes = 34;

std::string Lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Extension(const std::string& path) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return "";
  return Lower(path.substr(dot + 1));
}

std::string Where(const std::string& path) { return EscapeForMessage(path); }

uint64_t LittleU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

// The next line of `source` (without its '\n') into `line`; false at the end.
// Lines are capped at kMaxLineBytes, the whole input at 2 GiB (ByteSource).
bool NextLine(io::ByteSource& source, std::string& line, size_t line_no) {
  line.clear();
  int c = source.Peek();
  if (c < 0) return false;
  while (c >= 0 && c != '\n') {
    if (line.size() == kMaxLineBytes) {
      throw InputError(
          fmt::format("{} line {}", source.name(), line_no),
          fmt::format("longer than {} bytes (the line cap)", kMaxLineBytes));
    }
    line.push_back(static_cast<char>(c));
    source.Skip();
    c = source.Peek();
  }
  if (c == '\n') source.Skip();
  return true;
}

int64_t CheckedLength(int64_t v, const std::string& where) {
  if (v < 0) throw InputError(where, "length must be >= 0");
  if (v > kMaxLength) throw InputError(where, "length must be <= 2^40");
  return v;
}

}  // namespace

DatasetFormat DetectDatasetFormat(const std::string& path) {
  const std::string ext = Extension(path);
  if (ext == "idx" || ext == "bin") return DatasetFormat::kMegatronIdx;
  if (ext == "jsonl" || ext == "ndjson" || ext == "json")
    return DatasetFormat::kJsonl;
  if (ext == "csv") return DatasetFormat::kCsv;
  if (ext == "parquet" || ext == "pq") return DatasetFormat::kParquet;
  if (ext == "arrow" || ext == "feather") return DatasetFormat::kArrow;
  return DatasetFormat::kText;
}

bool NeedsPython(DatasetFormat format) {
  return format == DatasetFormat::kParquet || format == DatasetFormat::kArrow;
}

// Long because: one streamed read of the .idx layout (header, lengths,
// pointers, document index) in file order.
std::vector<int64_t> ReadMegatronIdxLengths(const std::string& given,
                                            bool documents) {
  std::string path = given;
  if (Extension(path) == "bin") path = path.substr(0, path.size() - 3) + "idx";
  const std::string where = Where(path);
  // Streamed: only the lengths and document indices are read (the pointers
  // are skipped), so an index of any size needs 8 bytes per sequence.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(where, "cannot open file");
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  in.seekg(0);
  unsigned char header[kIdxHeaderBytes];
  if (file_size < static_cast<std::streamoff>(kIdxHeaderBytes) ||
      !in.read(reinterpret_cast<char*>(header), kIdxHeaderBytes) ||
      std::memcmp(header, kIdxMagic, kIdxMagicBytes) != 0)
    throw InputError(
        where, "not a Megatron indexed dataset index (no MMIDIDX header)");
  const uint64_t version = LittleU64(header + 9);
  if (version != 1)
    throw InputError(
        where,
        fmt::format("unsupported .idx version {} (expected 1)", version));
  const unsigned dtype_code = header[17];
  if (dtype_code < 1 || dtype_code > 8)
    throw InputError(where,
                     fmt::format("unknown token dtype code {}", dtype_code));
  const uint64_t sequences = LittleU64(header + 18);
  const uint64_t docs = LittleU64(header + 26);
  // Body: int32 lengths + int64 pointers per sequence, int64 per document
  // index, optionally an int8 mode per sequence (multimodal datasets).
  const uint64_t body = static_cast<uint64_t>(file_size) - kIdxHeaderBytes;
  if (sequences > body / 12 || docs > body / 8 ||
      12 * sequences + 8 * docs > body)
    throw InputError(
        where, fmt::format("truncated: header announces {} sequences and {} "
                           "document indices, file has {} bytes",
                           sequences, docs, file_size));
  const uint64_t expected = 12 * sequences + 8 * docs;
  if (body != expected && body != expected + sequences)
    throw InputError(
        where,
        fmt::format("size {} bytes does not match the header ({} sequences, "
                    "{} document indices)",
                    file_size, sequences, docs));
  auto read_le = [&](uint64_t count, int width, auto&& consume) {
    std::vector<unsigned char> buf;
    constexpr uint64_t kChunk = 1 << 16;
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min(kChunk, count - done);
      buf.resize(n * static_cast<uint64_t>(width));
      if (!in.read(reinterpret_cast<char*>(buf.data()),
                   static_cast<std::streamsize>(buf.size())))
        throw InputError(where, "read failed");
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t v = 0;
        for (int b = width - 1; b >= 0; --b) v = (v << 8) | buf[i * width + b];
        consume(done + i, v);
      }
      done += n;
    }
  };
  std::vector<int64_t> seq_len(sequences);
  read_le(sequences, 4, [&](uint64_t i, uint64_t u) {
    const auto v = static_cast<int32_t>(static_cast<uint32_t>(u));
    if (v < 0)
      throw InputError(where,
                       fmt::format("sequence {} has length {} < 0", i, v));
    seq_len[i] = v;
  });
  if (!documents) return seq_len;
  // Document indices: sequence index where each document starts, then the
  // end (IndexedDatasetBuilder starts with [0] and appends the sequence count
  // at each end_document).
  in.seekg(static_cast<std::streamoff>(kIdxHeaderBytes + 12 * sequences));
  std::vector<int64_t> out;
  uint64_t prev = 0;
  read_le(docs, 8, [&](uint64_t k, uint64_t idx) {
    if (idx > sequences || idx < prev || (k == 0 && idx != 0))
      throw InputError(
          where, fmt::format("document index {} = {} is not increasing within "
                             "[0, {}]",
                             k, idx, sequences));
    if (k > 0) {
      int64_t sum = 0;
      for (uint64_t s = prev; s < idx; ++s) sum += seq_len[s];
      out.push_back(
          CheckedLength(sum, where + " document " + std::to_string(k - 1)));
    }
    prev = idx;
  });
  if (prev != sequences)
    throw InputError(
        where, fmt::format("{} sequences after the last document end (use "
                           "--idx-unit sequence to read sequences)",
                           sequences - prev));
  return out;
}

std::vector<int64_t> ReadJsonlLengths(const std::string& path,
                                      const std::string& field) {
  io::ByteSource in(path, /*reject_nul=*/false);
  std::vector<int64_t> out;
  std::string line;
  size_t line_no = 0;
  while (NextLine(in, line, ++line_no)) {
    const std::string where = fmt::format("{} line {}", Where(path), line_no);
    if (TrimSpace(line).empty()) continue;
    nlohmann::json record;
    try {
      // Strict, as `fcp plan` reads JSON: nesting capped (a deep record was a
      // stack overflow), duplicate keys rejected.
      record = ParseJsonStrict(line, "record", kMaxLineBytes);
    } catch (const InputError& e) {
      const std::string why =
          std::string(e.what()).substr(e.field().size() + 2);
      throw InputError(where, "not a JSON object (" + why + ")");
    }
    if (!record.is_object()) throw InputError(where, "not a JSON object");
    const auto it = record.find(field);
    if (it == record.end())
      throw InputError(where + ": " + EscapeForMessage(field),
                       "missing (choose the field with --field)");
    const std::string at = where + ": " + EscapeForMessage(field);
    if (it->is_number_integer()) {
      out.push_back(CheckedLength(it->get<int64_t>(), at));
    } else if (it->is_number_unsigned()) {
      throw InputError(at, "length must be <= 2^40");
    } else if (it->is_array()) {
      out.push_back(CheckedLength(static_cast<int64_t>(it->size()), at));
    } else if (it->is_string()) {
      throw InputError(
          at, "is text: give --tokenizer tokenizer.json to count its tokens");
    } else {
      throw InputError(at,
                       "expected a token count (integer) or token ids (array)");
    }
  }
  return out;
}

std::vector<int64_t> ReadCsvLengths(const std::string& path,
                                    const std::string& field) {
  io::ByteSource in(path, /*reject_nul=*/false);
  std::vector<int64_t> out;
  std::string line;
  size_t line_no = 0;
  int column = -1;
  while (NextLine(in, line, ++line_no)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (TrimSpace(line).empty()) continue;
    const std::string where = fmt::format("{} line {}", Where(path), line_no);
    const auto cols = SplitCsv(line);
    if (column < 0) {
      for (size_t c = 0; c < cols.size(); ++c)
        if (TrimSpace(cols[c]) == field) column = static_cast<int>(c);
      if (column < 0)
        throw InputError(where, "CSV header has no column \"" +
                                    EscapeForMessage(field) +
                                    "\" (choose it with --field)");
      continue;
    }
    if (static_cast<int>(cols.size()) <= column)
      throw InputError(where,
                       "missing column \"" + EscapeForMessage(field) + "\"");
    const std::string_view text = TrimSpace(cols[static_cast<size_t>(column)]);
    int64_t v = 0;
    const auto [ptr, ec] =
        std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
      throw InputError(where, "expected an integer token count, got \"" +
                                  EscapeForMessage(text.substr(0, 40)) + "\"");
    out.push_back(CheckedLength(v, where));
  }
  if (column < 0) throw InputError(Where(path), "empty CSV file");
  return out;
}

std::string LengthReport(std::span<const int64_t> lengths, int64_t empty) {
  std::vector<int64_t> sorted(lengths.begin(), lengths.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  int64_t total = 0;
  for (int64_t v : sorted) total += v;
  std::string out = fmt::format("{} sequences, {} tokens", n, total);
  if (empty > 0) out += fmt::format(" ({} empty records skipped)", empty);
  out += "\n";
  if (n == 0) return out;
  // Nearest-rank percentiles.
  auto pct = [&](double p) {
    const auto rank =
        static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
    return sorted[std::max<size_t>(rank, 1) - 1];
  };
  out += fmt::format(
      "min {}  p50 {}  p90 {}  p99 {}  max {}  mean {:.1f} (tokens)\n",
      sorted.front(), pct(50), pct(90), pct(99), sorted.back(),
      static_cast<double>(total) / static_cast<double>(n));
  // Power-of-two buckets [2^k, 2^(k+1)).
  auto bucket = [](int64_t v) {
    int k = 0;
    while (k < 62 && (int64_t{1} << (k + 1)) <= v) ++k;
    return k;
  };
  const int lo = bucket(sorted.front()), hi = bucket(sorted.back());
  std::vector<size_t> counts(static_cast<size_t>(hi - lo + 1), 0);
  for (int64_t v : sorted) ++counts[static_cast<size_t>(bucket(v) - lo)];
  const size_t most = *std::max_element(counts.begin(), counts.end());
  out +=
      fmt::format("{:<24} {:>10} {:>7}\n", "length (tokens)", "count", "share");
  for (int k = lo; k <= hi; ++k) {
    const size_t c = counts[static_cast<size_t>(k - lo)];
    const std::string range =
        fmt::format("[{}, {})", int64_t{1} << k, int64_t{1} << (k + 1));
    const size_t bar = most ? (c * 40 + most - 1) / most : 0;
    out += fmt::format("{:<24} {:>10} {:>6.1f}% {}\n", range, c,
                       100.0 * static_cast<double>(c) / static_cast<double>(n),
                       std::string(bar, '#'));
  }
  return out;
}

std::string LengthFileText(std::span<const int64_t> lengths) {
  std::string out = fmt::format(
      "# {} sequence lengths (tokens), one per line; written by fcp "
      "lengths\n",
      lengths.size());
  for (int64_t v : lengths) {
    out += std::to_string(v);
    out += '\n';
  }
  return out;
}

}  // namespace fcp
