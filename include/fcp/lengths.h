// Sequence lengths from users' datasets (`fcp lengths`, docs/lengths.md):
// Megatron indexed datasets (.idx), JSONL token counts, CSV columns and plain
// length files natively; text fields (tokenizer) and Parquet/Arrow are read by
// the Python side (python/fcp/lengths.py), which prints and writes the same
// formats. Errors are InputError naming the file (and line) and field.
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fcp {

enum class DatasetFormat {
  kMegatronIdx,
  kJsonl,
  kCsv,
  kText,
  kParquet,
  kArrow
};

// By extension: .idx/.bin (Megatron; the .idx beside a .bin is read),
// .jsonl/.ndjson/.json (JSON lines), .csv, .parquet/.pq, .arrow/.feather;
// anything else is a length file (one integer per line).
DatasetFormat DetectDatasetFormat(const std::string& path);
// Parquet and Arrow need pyarrow: the Python side reads them.
bool NeedsPython(DatasetFormat format);

// A Megatron-Core indexed dataset's lengths, from its .idx alone (header
// "MMIDIDX\0\0", version 1, dtype code, sequence and document counts, int32
// sequence lengths, int64 pointers, int64 document indices; as written by
// megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder). `documents`:
// one length per document (the sum of its sequences; what a trainer packs),
// else one per sequence. The file's size and indices are checked.
std::vector<int64_t> ReadMegatronIdxLengths(const std::string& path,
                                            bool documents = true);

// Readers keep zero lengths (empty documents) so that callers can count
// them; `fcp lengths` skips them.

// JSON lines: one object per line whose `field` is a token count (integer)
// or the token ids (array: its length). A string field means text, which
// needs a tokenizer (the error says so).
std::vector<int64_t> ReadJsonlLengths(const std::string& path,
                                      const std::string& field);

// CSV with a header row: the integer column `field`.
std::vector<int64_t> ReadCsvLengths(const std::string& path,
                                    const std::string& field);

// The summary and power-of-two histogram `fcp lengths` prints (`empty`:
// zero-length records skipped). Identical to python/fcp/lengths.py's.
std::string LengthReport(std::span<const int64_t> lengths, int64_t empty = 0);
// The length file `--lengths` reads: a comment line, then one length per line.
std::string LengthFileText(std::span<const int64_t> lengths);

}  // namespace fcp
