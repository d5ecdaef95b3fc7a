// Synthetic sequence-length generators for the paper's datasets (docs/design.md
// §6) and sampling from real length files. Every generator is seeded and uses
// its own RNG (splitmix64 + xoshiro256**, Box-Muller), so the same (dataset,
// count, seed, options) gives the same batch on every platform and standard
// library. Parameters and sources are documented in src/sim/datasets.cc and
// docs/simulator.md. Thread-safety: all functions are pure (no shared state).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/types.h"

namespace fcp {

// Deterministic 64-bit RNG: xoshiro256** seeded through splitmix64.
// Not thread-safe (one instance per thread); copying forks the stream.
class DeterministicRng {
 public:
  explicit DeterministicRng(uint64_t seed);
  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Uniform in (0, 1]; safe for log().
  double UniformPositive();
  // Standard normal (Box-Muller, one value per call).
  double Normal();
  // Uniform integer in [lo, hi] (inclusive); lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi);

 private:
  uint64_t s_[4];
};

// Longest sequence any generator returns (tokens): the paper's 128k cap.
inline constexpr int64_t kMaxDatasetLengthTokens = 131072;

struct DatasetInfo {
  std::string name;
  bool video = false;
  std::string description;  // distribution and parameters, one line
  std::string source;       // where the parameters come from
};

// Every named dataset: github, commoncrawl, wikipedia, msrvtt, internvid,
// openvid, extreme (in this order).
const std::vector<DatasetInfo>& Datasets();
std::vector<std::string> DatasetNames();
// nullptr when unknown.
const DatasetInfo* FindDataset(std::string_view name);

struct DatasetOptions {
  // Lengths are capped here (tokens, >= 1).
  int64_t max_length_tokens = kMaxDatasetLengthTokens;
  // Video sets: LLM tokens per 448² tile (InternVL 256, Qwen3-VL ≈98); > 0.
  int vision_tokens_per_tile = 256;
};

// One sampled sequence with its vision composition (0 vision tokens for text).
struct SampleDetail {
  Sequence sequence;  // length_tokens, eta (mask factor) and vision_tokens
  int64_t vision_block_tokens =
      0;               // tokens per full-attention block (one frame)
  int64_t frames = 0;  // frames (video) or 0
};

// `count` sequences of `dataset`, drawn with `seed`. Text: eta = 0. Video:
// eta = Σ block² / length² (full attention inside every frame block on top of
// the causal mask, docs/design.md §2) and vision_tokens the frames' tokens.
// Throws InputError("dataset", ...) for an unknown name, InputError("count",
// ...) when count < 0, and InputError("options....", ...) for bad options.
std::vector<Sequence> SampleBatch(std::string_view dataset, int64_t count,
                                  uint64_t seed,
                                  const DatasetOptions& options = {});
std::vector<SampleDetail> SampleBatchDetailed(
    std::string_view dataset, int64_t count, uint64_t seed,
    const DatasetOptions& options = {});

// Longest real length SampleFromLengths takes by default (tokens, 2^24
// ≈ 16.8M).
inline constexpr int64_t kMaxSampledLengthTokens = int64_t{1} << 24;

// `count` causal sequences drawn uniformly with replacement from real
// `lengths` (e.g. fcp::ReadLengthsFile), kept as they are (never truncated).
// Throws InputError("lengths", ...) when empty, and
// InputError("lengths[i]", ...) naming the length when one is <= 0 or above
// max_length_tokens.
std::vector<Sequence> SampleFromLengths(
    std::span<const int64_t> lengths, int64_t count, uint64_t seed,
    int64_t max_length_tokens = kMaxSampledLengthTokens);

}  // namespace fcp
