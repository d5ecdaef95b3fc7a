#include "exec/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "exec/exec_testing.h"
#include "exec/executor.h"

namespace fcp::exec {
namespace {

// One full-mask sequence (index 1), one mixed (index 2), the rest causal.
GlobalBatch SmallBatch(uint64_t seed, int num, int max_len) {
  return testing::RandomByteBatch(seed, num, max_len, [](int i) {
    return i == 1 ? 1.0 : i == 2 ? 0.5 : 0.0;
  });
}

double Loss(const ModelConfig& cfg, const ParamLayout& layout,
            const std::vector<float>& w, const GlobalBatch& batch) {
  double loss = 0;
  const auto lengths = batch.lengths();
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    auto layouts = ZigzagLayouts(lengths, batch.eta, {static_cast<int>(s)}, 1);
    RingAttentionArgs attn;
    attn.layouts = &layouts;
    attn.kernels = AttentionKernels::kReference;
    loss += ForwardBackward(cfg, layout, w.data(),
                            MakeShardBatch(layouts[0], batch.sequences), attn,
                            1.0f, nullptr);
  }
  return loss / batch.num_targets();
}

// Backward vs central finite differences of the (double-accumulated) loss.
// fp32 forward: with eps = 1e-2 the truncation error is O(eps^2) and the
// rounding error ~1e-7/eps; we require |fd - analytic| <= 2e-3 + 3e-2 |fd|
// on every probed parameter (a wrong backward is off by O(|grad|)).
TEST(Model, BackwardMatchesFiniteDifferences) {
  ModelConfig cfg;
  cfg.dim = 8;
  cfg.heads = 2;
  cfg.layers = 2;
  cfg.ffn = 12;
  const ParamLayout layout = MakeParamLayout(cfg);
  std::vector<float> w = InitParams(cfg, 3);
  // Larger weights than the 0.02 init so every path carries signal.
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (auto& x : w) x += nd(rng);
  const GlobalBatch batch = SmallBatch(4, 3, 9);
  std::vector<float> grads;
  ReferenceGradients(cfg, layout, w.data(), batch, grads);
  // Probe a few entries of every tensor.
  std::vector<size_t> probes;
  auto probe = [&](size_t off, size_t n) {
    for (size_t i = 0; i < 3; ++i) probes.push_back(off + (i * 7919) % n);
  };
  const size_t D = cfg.dim, F = cfg.ffn;
  for (int t : batch.sequences[0]) probes.push_back(layout.embed + t * D);
  for (const auto& lp : layout.layers) {
    probe(lp.g1, D);
    probe(lp.wq, D * D);
    probe(lp.wk, D * D);
    probe(lp.wv, D * D);
    probe(lp.wo, D * D);
    probe(lp.g2, D);
    probe(lp.w1, D * F);
    probe(lp.w2, F * D);
  }
  probe(layout.gf, D);
  probe(layout.wout, D * 256);
  const float eps = 1e-2f;
  int checked_nonzero = 0;
  for (size_t i : probes) {
    const float keep = w[i];
    w[i] = keep + eps;
    const double up = Loss(cfg, layout, w, batch);
    w[i] = keep - eps;
    const double down = Loss(cfg, layout, w, batch);
    w[i] = keep;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(grads[i], fd, 2e-3 + 3e-2 * std::fabs(fd)) << "param " << i;
    checked_nonzero += std::fabs(fd) > 1e-3;
  }
  EXPECT_GT(checked_nonzero, static_cast<int>(probes.size()) / 2);
}

TEST(Model, ConfigValidationNamesTheField) {
  ModelConfig cfg;
  cfg.heads = 3;
  ASSERT_TRUE(ValidateModelConfig(cfg).has_value());
  EXPECT_NE(ValidateModelConfig(cfg)->find("model.heads"), std::string::npos);
  EXPECT_FALSE(ValidateModelConfig(ModelConfig{}).has_value());
}

TEST(Model, AdamWLowersTheLossOnAFixedBatch) {
  ModelConfig cfg;
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.layers = 1;
  cfg.ffn = 32;
  const ParamLayout layout = MakeParamLayout(cfg);
  std::vector<float> w = InitParams(cfg, 1);
  const GlobalBatch batch = SmallBatch(2, 3, 30);
  AdamW opt(layout, {});
  std::vector<float> g;
  const double first = ReferenceGradients(cfg, layout, w.data(), batch, g);
  EXPECT_NEAR(first, std::log(256.0), 0.1);  // near-uniform at init
  double last = first;
  for (int i = 0; i < 30; ++i) {
    opt.Step(w.data(), g.data());
    last = ReferenceGradients(cfg, layout, w.data(), batch, g);
  }
  EXPECT_LT(last, first - 0.5);
}

}  // namespace
}  // namespace fcp::exec
