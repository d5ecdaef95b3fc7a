#include <gtest/gtest.h>

#include "fcp/simulator.h"

namespace fcp::sim {
namespace {

ExperimentConfig Small() {
  ExperimentConfig c;
  c.model = "qwen3-1.7b";
  c.cluster = "h100-8x8";
  c.ranks = 8;
  c.lengths = {4096, 8192};
  c.global_batch = 16;
  c.steps = 1;
  c.warmup = 0;
  c.strategies = {"megatron"};
  return c;
}

TEST(Experiment, ForcedDegreeAndFixedMicroBatchSize) {
  ExperimentConfig c = Small();
  c.cp_degree = 2;
  c.micro_batch_sequences = 2;
  // Data-loader order gives every replica exactly 16 / 4 sequences; the
  // balanced deal is by work, so its counts depend on the cost coefficients.
  c.dealing = Dealing::kLoader;
  const ExperimentResult r = RunExperiment(c);
  ASSERT_EQ(r.results.size(), 1u);
  const StrategyResult& m = r.results[0];
  ASSERT_FALSE(m.oom || m.infeasible) << m.message;
  EXPECT_EQ(m.cp_degree, 2);
  // 4 replicas of 2 ranks, 16 / 4 = 4 sequences each, 2 per micro-batch.
  EXPECT_DOUBLE_EQ(m.micro_batches, 2.0);
  EXPECT_EQ(m.degree_histogram.at(2), 8);
  // The physical lower bound is below what any plan achieves.
  EXPECT_GT(r.lower_bound_s, 0);
  EXPECT_GT(m.vs_bound, 1.0);
  EXPECT_NEAR(m.vs_bound, m.iter_s / r.lower_bound_s, 1e-12);
}

TEST(Experiment, RecomputeNoneIsFasterAndReported) {
  ExperimentConfig full = Small();
  full.cp_degree = 1;
  ExperimentConfig none = full;
  none.recompute = Recompute::kNone;
  const double t_full = RunExperiment(full).results[0].iter_s;
  const ExperimentResult rn = RunExperiment(none);
  EXPECT_LT(rn.results[0].iter_s, t_full);
  EXPECT_NE(ExperimentToJson(rn).find("\"recompute\": \"none\""), std::string::npos);
}

TEST(Experiment, BadDegreeAndMicroBatchSize) {
  ExperimentConfig c = Small();
  c.cp_degree = 3;  // does not divide 8
  try {
    RunExperiment(c);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "cp");
  }
  c = Small();
  c.micro_batch_sequences = -1;
  EXPECT_THROW(RunExperiment(c), InputError);
}

}  // namespace
}  // namespace fcp::sim
