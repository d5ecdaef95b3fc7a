// Dataset length generators (docs/design.md §6).
//
// Text sets are log-normal token lengths (μ, σ of ln(tokens)), with a Pareto
// tail replacing the log-normal above a threshold where the corpus is known to
// be heavy-tailed:
//   github      LN(6.6, 1.75), Pareto α = 1.3 above 12k tokens. Source code
//               files (The Stack, Kocetkov et al. 2022, arXiv 2211.15533) are
//               strongly long-tailed; median ≈ e^6.6 ≈ 735 tokens.
//   commoncrawl LN(5.6, 1.05), no extra tail. C4 documents (Raffel et al. 2020,
//               JMLR 21:140) are short web pages; median ≈ 270 tokens.
//   wikipedia   LN(5.9, 1.25), light Pareto tail α = 2.5 above 8k tokens
//               (dense, fairly short articles); median ≈ 365 tokens.
// Video sets are frames × tiles × tokens-per-tile (the model's vision tokens
// per 448² tile, DatasetOptions::vision_tokens_per_tile) + a text part, with
// the clip duration log-normal and frames sampled at a fixed rate:
//   msrvtt      MSR-VTT (Xu et al., CVPR 2016): 10k clips of 10–30 s, 20
//               captions each. Duration LN(ln 15 s, 0.35) clipped to [10, 30]
//               s, 2 frames/s, 1 tile/frame, text LN(ln 60, 0.5) tokens
//               (captions).
//   internvid   InternVid (Wang et al. 2023, arXiv 2307.06942): 234M clips,
//               average 11.7 s, generated captions. Duration LN(ln 12 s, 0.8)
//               clipped to [2, 600] s, 1 frame/s, 1 tile/frame, text
//               LN(ln 30, 0.4).
//   openvid     OpenVid-1M (Nan et al. 2024, arXiv 2407.02371): ≥ 512×512,
//               high-aesthetic clips, long captions. Duration LN(ln 16 s, 0.8)
//               clipped to [2, 600] s, 1 frame/s, tiles per frame 1 / 2 / 4
//               with probability 0.3 / 0.4 / 0.3 (resolution), text
//               LN(ln 120, 0.4).
//   extreme     the paper's extreme case (§6.6): one 128k-token sequence and
//               count − 1 sequences uniform in [2k, 8k] tokens; the long one is
//               at a seeded random position.
// The video durations/rates/tiles are our assumptions made to match the
// published clip statistics; they are not in the FCP paper.
// Video mask factor: every frame is one block with full attention inside,
// causal elsewhere: work = s²/2 + Σ b²/2 = (1 + eta) s²/2, eta = Σ b² / s².
#include "fcp/datasets.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace fcp {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// FNV-1a so that equal seeds give different streams per dataset.
uint64_t HashName(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

int64_t ClampLength(double x, int64_t max_len) {
  if (!(x >= 1.0)) return 1;  // also NaN
  if (x >= static_cast<double>(max_len)) return max_len;
  return std::max<int64_t>(1, std::llround(x));
}

double LogNormal(DeterministicRng& rng, double mu, double sigma) {
  return std::exp(mu + sigma * rng.Normal());
}

// Pareto(x_min, alpha) by inversion.
double Pareto(DeterministicRng& rng, double x_min, double alpha) {
  return x_min * std::pow(rng.UniformPositive(), -1.0 / alpha);
}

SampleDetail Text(int64_t len) {
  SampleDetail d;
  d.sequence = Sequence{len, 0.0};
  return d;
}

struct VideoParams {
  double median_s, sigma, min_s, max_s, fps;
  double text_median, text_sigma;
  bool multi_tile;
};

SampleDetail Video(DeterministicRng& rng, const VideoParams& p,
                   const DatasetOptions& o) {
  const double duration_s = std::clamp(
      LogNormal(rng, std::log(p.median_s), p.sigma), p.min_s, p.max_s);
  int64_t tiles = 1;
  if (p.multi_tile) {
    const double u = rng.Uniform();
    tiles = u < 0.3 ? 1 : (u < 0.7 ? 2 : 4);
  }
  const int64_t text = std::max<int64_t>(
      1, std::llround(LogNormal(rng, std::log(p.text_median), p.text_sigma)));
  const int64_t block = tiles * o.vision_tokens_per_tile;
  int64_t frames = std::max<int64_t>(1, std::llround(duration_s * p.fps));
  // Keep the whole sample within the cap: drop frames first (what a loader
  // does).
  const int64_t max_frames =
      std::max<int64_t>(0, (o.max_length_tokens - text) / block);
  frames = std::min(frames, max_frames);
  SampleDetail d;
  d.frames = frames;
  d.vision_block_tokens = block;
  const int64_t vision = frames * block;
  const int64_t len = std::min(o.max_length_tokens, vision + text);
  const double s = static_cast<double>(len);
  const double eta =
      std::min(1.0, static_cast<double>(frames) * static_cast<double>(block) *
                        static_cast<double>(block) / (s * s));
  d.sequence = Sequence{len, eta, vision};
  return d;
}

}  // namespace

DeterministicRng::DeterministicRng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = SplitMix64(x);
}

uint64_t DeterministicRng::NextU64() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double DeterministicRng::Uniform() {
  return static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
}

double DeterministicRng::UniformPositive() {
  return (static_cast<double>(NextU64() >> 11) + 1.0) * 0x1.0p-53;
}

double DeterministicRng::Normal() {
  const double u1 = UniformPositive();
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

int64_t DeterministicRng::UniformInt(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  if (span == 0) return static_cast<int64_t>(NextU64());  // full 64-bit range
  // Rejection sampling for an unbiased draw.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t x;
  do {
    x = NextU64();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

const std::vector<DatasetInfo>& Datasets() {
  static const std::vector<DatasetInfo> kDatasets = {
      {"github", false,
       "code: log-normal mu=6.6 sigma=1.75 tokens, Pareto alpha=1.3 tail above "
       "12k",
       "The Stack (Kocetkov et al. 2022); docs/design.md §6"},
      {"commoncrawl", false, "web text: log-normal mu=5.6 sigma=1.05 tokens",
       "C4 (Raffel et al. 2020); docs/design.md §6"},
      {"wikipedia", false,
       "articles: log-normal mu=5.9 sigma=1.25 tokens, Pareto alpha=2.5 tail "
       "above 8k",
       "Wikipedia dumps; docs/design.md §6"},
      {"msrvtt", true,
       "video: 10-30 s clips (LN median 15 s), 2 fps, 1 tile/frame, ~60 text "
       "tokens",
       "MSR-VTT (Xu et al. CVPR 2016)"},
      {"internvid", true,
       "video: LN median 12 s clips (2-600 s), 1 fps, 1 tile/frame, ~30 text "
       "tokens",
       "InternVid (Wang et al. 2023, arXiv 2307.06942)"},
      {"openvid", true,
       "video: LN median 16 s clips (2-600 s), 1 fps, 1/2/4 tiles/frame, ~120 "
       "text tokens",
       "OpenVid-1M (Nan et al. 2024, arXiv 2407.02371)"},
      {"extreme", false,
       "one 128k-token sequence + (count-1) uniform in [2k, 8k]",
       "FCP paper §6.6 (2.24x case)"},
  };
  return kDatasets;
}

std::vector<std::string> DatasetNames() {
  std::vector<std::string> names;
  for (const auto& d : Datasets()) names.push_back(d.name);
  return names;
}

const DatasetInfo* FindDataset(std::string_view name) {
  for (const auto& d : Datasets()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::vector<SampleDetail> SampleBatchDetailed(std::string_view dataset,
                                              int64_t count, uint64_t seed,
                                              const DatasetOptions& options) {
  if (!FindDataset(dataset)) {
    std::string known;
    for (const auto& n : DatasetNames())
      known += (known.empty() ? "" : ", ") + n;
    throw InputError("dataset", "unknown dataset '" + std::string(dataset) +
                                    "' (known: " + known + ")");
  }
  if (count < 0) throw InputError("count", "must be >= 0");
  if (options.max_length_tokens < 1)
    throw InputError("options.max_length_tokens", "must be >= 1");
  if (options.vision_tokens_per_tile < 1)
    throw InputError("options.vision_tokens_per_tile", "must be >= 1");

  DeterministicRng rng(seed ^ HashName(dataset));
  const int64_t cap = options.max_length_tokens;
  std::vector<SampleDetail> out;
  out.reserve(static_cast<size_t>(count));

  if (dataset == "extreme") {
    const int64_t long_at = count > 0 ? rng.UniformInt(0, count - 1) : 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t len =
          (i == long_at) ? kMaxDatasetLengthTokens : rng.UniformInt(2048, 8192);
      out.push_back(Text(std::min(len, cap)));
    }
    return out;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (dataset == "github") {
      double x = LogNormal(rng, 6.6, 1.75);
      if (x > 12000.0) x = Pareto(rng, 12000.0, 1.3);
      out.push_back(Text(ClampLength(x, cap)));
    } else if (dataset == "commoncrawl") {
      out.push_back(Text(ClampLength(LogNormal(rng, 5.6, 1.05), cap)));
    } else if (dataset == "wikipedia") {
      double x = LogNormal(rng, 5.9, 1.25);
      if (x > 8000.0) x = Pareto(rng, 8000.0, 2.5);
      out.push_back(Text(ClampLength(x, cap)));
    } else if (dataset == "msrvtt") {
      out.push_back(
          Video(rng, {15.0, 0.35, 10.0, 30.0, 2.0, 60.0, 0.5, false}, options));
    } else if (dataset == "internvid") {
      out.push_back(
          Video(rng, {12.0, 0.8, 2.0, 600.0, 1.0, 30.0, 0.4, false}, options));
    } else {  // openvid
      out.push_back(
          Video(rng, {16.0, 0.8, 2.0, 600.0, 1.0, 120.0, 0.4, true}, options));
    }
  }
  return out;
}

std::vector<Sequence> SampleBatch(std::string_view dataset, int64_t count,
                                  uint64_t seed,
                                  const DatasetOptions& options) {
  std::vector<Sequence> out;
  for (const auto& d : SampleBatchDetailed(dataset, count, seed, options))
    out.push_back(d.sequence);
  return out;
}

std::vector<Sequence> SampleFromLengths(std::span<const int64_t> lengths,
                                        int64_t count, uint64_t seed,
                                        int64_t max_length_tokens) {
  if (lengths.empty()) throw InputError("lengths", "no lengths given");
  if (count < 0) throw InputError("count", "must be >= 0");
  if (max_length_tokens < 1)
    throw InputError("max_length_tokens", "must be >= 1");
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] <= 0)
      throw InputError("lengths[" + std::to_string(i) + "]", "must be > 0");
    // Never truncate silently: a length the simulator does not take is an
    // error.
    if (lengths[i] > max_length_tokens)
      throw InputError("lengths[" + std::to_string(i) + "]",
                       std::to_string(lengths[i]) +
                           " tokens exceeds the limit of " +
                           std::to_string(max_length_tokens) + " tokens");
  }
  DeterministicRng rng(seed ^ 0x6C656E6774687321ULL);
  std::vector<Sequence> out;
  out.reserve(static_cast<size_t>(count));
  const int64_t n = static_cast<int64_t>(lengths.size());
  for (int64_t i = 0; i < count; ++i) {
    const int64_t len = lengths[static_cast<size_t>(rng.UniformInt(0, n - 1))];
    out.push_back(Sequence{len, 0.0});
  }
  return out;
}

}  // namespace fcp
