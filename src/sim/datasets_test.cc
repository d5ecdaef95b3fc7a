#include "fcp/datasets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fcp {
namespace {

double MedianLength(const std::vector<Sequence>& seqs) {
  std::vector<int64_t> v;
  for (const auto& s : seqs) v.push_back(s.length_tokens);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return static_cast<double>(v[v.size() / 2]);
}

TEST(DeterministicRng, SameSeedSameStreamOtherSeedOtherStream) {
  DeterministicRng a(42), b(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.NextU64(), b.NextU64());
  DeterministicRng d(42), e(43);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += d.NextU64() == e.NextU64();
  EXPECT_EQ(same, 0);
}

TEST(DeterministicRng, UniformAndNormalMoments) {
  DeterministicRng rng(7);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = rng.Normal();
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

TEST(DeterministicRng, UniformIntInclusiveBounds) {
  DeterministicRng rng(1);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 3000; ++i) {
    const int64_t x = rng.UniformInt(5, 7);
    ASSERT_GE(x, 5);
    ASSERT_LE(x, 7);
    ++counts[x - 5];
  }
  for (int c : counts) EXPECT_GT(c, 800);
}

TEST(Datasets, NamesAndUnknown) {
  const auto names = DatasetNames();
  const std::vector<std::string> want = {"github", "commoncrawl", "wikipedia",
                                         "msrvtt", "internvid",   "openvid",
                                         "extreme"};
  EXPECT_EQ(names, want);
  try {
    SampleBatch("nope", 3, 1);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "dataset");
  }
  EXPECT_THROW(SampleBatch("github", -1, 1), InputError);
  DatasetOptions bad;
  bad.vision_tokens_per_tile = 0;
  EXPECT_THROW(SampleBatch("msrvtt", 1, 1, bad), InputError);
}

TEST(Datasets, DeterministicPerSeedAndDifferentAcrossSeeds) {
  for (const auto& name : DatasetNames()) {
    const auto a = SampleBatch(name, 300, 11);
    const auto b = SampleBatch(name, 300, 11);
    const auto c = SampleBatch(name, 300, 12);
    ASSERT_EQ(a.size(), 300u) << name;
    bool all_same = true;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].length_tokens, b[i].length_tokens) << name;
      EXPECT_EQ(a[i].eta, b[i].eta) << name;
      all_same &= a[i].length_tokens == c[i].length_tokens;
    }
    EXPECT_FALSE(all_same) << name;
  }
}

TEST(Datasets, LengthsWithinCapAndEtaInRange) {
  for (const auto& name : DatasetNames()) {
    for (const auto& s : SampleBatch(name, 2000, 3)) {
      ASSERT_GE(s.length_tokens, 1) << name;
      ASSERT_LE(s.length_tokens, kMaxDatasetLengthTokens) << name;
      ASSERT_GE(s.eta, 0.0) << name;
      ASSERT_LE(s.eta, 1.0) << name;
    }
  }
  DatasetOptions small;
  small.max_length_tokens = 1000;
  for (const auto& name : DatasetNames()) {
    for (const auto& s : SampleBatch(name, 500, 3, small))
      ASSERT_LE(s.length_tokens, 1000);
  }
}

// The log-normal median is e^mu; the Pareto tails start far above the median,
// so they do not move it.
TEST(Datasets, TextMediansMatchDocumentedParameters) {
  const struct {
    const char* name;
    double mu;
  } cases[] = {{"github", 6.6}, {"commoncrawl", 5.6}, {"wikipedia", 5.9}};
  for (const auto& c : cases) {
    const double median = MedianLength(SampleBatch(c.name, 40000, 5));
    EXPECT_NEAR(std::log(median), c.mu, 0.05) << c.name;
  }
}

TEST(Datasets, GithubHasParetoTailAbove12k) {
  const auto seqs = SampleBatch("github", 100000, 9);
  // P(LN(6.6,1.75) > 12000) = P(Z > (ln 12000 - 6.6)/1.75) ≈ 5.6%;
  // above that the tail is Pareto(12000, 1.3): P(X > 48000 | X > 12000) =
  // 4^-1.3.
  int64_t above12 = 0, above48 = 0;
  for (const auto& s : seqs) {
    above12 += s.length_tokens > 12000;
    above48 += s.length_tokens > 48000;
  }
  const double p12 =
      0.5 * std::erfc((std::log(12000.0) - 6.6) / 1.75 / std::sqrt(2.0));
  EXPECT_NEAR(static_cast<double>(above12) / seqs.size(), p12, 0.004);
  EXPECT_NEAR(static_cast<double>(above48) / above12, std::pow(4.0, -1.3),
              0.02);
}

TEST(Datasets, ExtremeHasOne128kAndShortRest) {
  const auto seqs = SampleBatch("extreme", 257, 4);
  int longs = 0;
  for (const auto& s : seqs) {
    if (s.length_tokens == kMaxDatasetLengthTokens) {
      ++longs;
    } else {
      EXPECT_GE(s.length_tokens, 2048);
      EXPECT_LE(s.length_tokens, 8192);
    }
  }
  EXPECT_EQ(longs, 1);
}

TEST(Datasets, VideoEtaIsBlockSquaresOverLengthSquared) {
  DatasetOptions o;
  o.vision_tokens_per_tile = 98;
  for (const char* name : {"msrvtt", "internvid", "openvid"}) {
    for (const auto& d : SampleBatchDetailed(name, 500, 2, o)) {
      const double s = static_cast<double>(d.sequence.length_tokens);
      const double b = static_cast<double>(d.vision_block_tokens);
      EXPECT_EQ(d.sequence.vision_tokens, d.frames * d.vision_block_tokens);
      EXPECT_LT(d.sequence.vision_tokens,
                d.sequence.length_tokens);  // text is never empty
      EXPECT_NEAR(d.sequence.eta, d.frames * b * b / (s * s), 1e-12) << name;
      EXPECT_EQ(d.vision_block_tokens % 98, 0);
    }
  }
}

TEST(Datasets, MsrvttFramesFollowDurationAndRate) {
  // 10-30 s clips at 2 frames/s: 20..60 frames, median 30.
  std::vector<int64_t> frames;
  for (const auto& d : SampleBatchDetailed("msrvtt", 20000, 8)) {
    ASSERT_GE(d.frames, 20);
    ASSERT_LE(d.frames, 60);
    frames.push_back(d.frames);
  }
  std::nth_element(frames.begin(), frames.begin() + frames.size() / 2,
                   frames.end());
  EXPECT_NEAR(static_cast<double>(frames[frames.size() / 2]), 30.0, 1.0);
}

TEST(Datasets, SampleFromLengthsKeepsLongLengthsUncut) {
  // A 1M-token length is drawn as it is (nothing truncated silently).
  const std::vector<int64_t> lengths = {10, 20, 1048576};
  const auto a = SampleFromLengths(lengths, 1000, 1);
  const auto b = SampleFromLengths(lengths, 1000, 1);
  int longest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].length_tokens, b[i].length_tokens);
    const int64_t l = a[i].length_tokens;
    EXPECT_TRUE(l == 10 || l == 20 || l == 1048576);
    longest += l == 1048576;
  }
  EXPECT_GT(longest, 250);
  EXPECT_LT(longest, 420);
  EXPECT_THROW(SampleFromLengths(std::vector<int64_t>{}, 3, 1), InputError);
  EXPECT_THROW(SampleFromLengths(std::vector<int64_t>{5, 0}, 3, 1), InputError);
  // Over the limit: an error naming the entry and the length.
  try {
    SampleFromLengths(std::vector<int64_t>{5, kMaxSampledLengthTokens + 1}, 3,
                      1);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "lengths[1]");
    EXPECT_NE(
        std::string(e.what()).find(std::to_string(kMaxSampledLengthTokens + 1)),
        std::string::npos);
  }
}

}  // namespace
}  // namespace fcp
