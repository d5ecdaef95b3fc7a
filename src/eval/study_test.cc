#include "fcp/study.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "fcp/experiment.h"
#include "fcp/profiler.h"
#include "fcp/types.h"

namespace fcp::sim {
namespace {

StudyResult QuickStudy(bool profiled) {
  StudyOptions o;
  o.quick = true;
  o.profiled_coefficients = profiled;
  o.out_dir =
      ::testing::TempDir() + (profiled ? "/study_profiled" : "/study_preset");
  return RunStudy(o);
}

// The case the study ran, rerun by hand: the quick grid measures one batch
// after one warm-up batch, fcp against megatron and deepspeed dealt by work.
double FcpSeconds(const StudyRow& row,
                  const std::optional<CostModel>& coefficients) {
  ExperimentConfig cfg;
  cfg.cluster = row.cluster;
  cfg.model = row.model;
  cfg.ranks = row.ranks;
  cfg.global_batch = row.global_batch;
  cfg.dataset = row.dataset;
  cfg.steps = 1;
  cfg.warmup = 1;
  cfg.strategies = {"fcp", "megatron", "deepspeed"};
  cfg.dealing = Dealing::kBalanced;
  cfg.cost_model = coefficients;
  for (const StrategyResult& r : RunExperiment(cfg).results) {
    if (r.strategy == "fcp") return r.iter_s;
  }
  return 0;
}

TEST(Study, ProfiledCoefficientsAreThoseFcpProfileFits) {
  const StudyResult profiled = QuickStudy(true);
  const StudyResult preset = QuickStudy(false);
  ASSERT_EQ(profiled.rows.size(), preset.rows.size());
  ASSERT_FALSE(profiled.rows.empty());
  EXPECT_NE(profiled.summary.find("profiled"), std::string::npos);
  EXPECT_NE(preset.summary.find("presets"), std::string::npos);

  // The option changes plans somewhere in the grid (else it would be inert);
  // the first case it changes is rerun by hand with `fcp profile`'s fit (its
  // defaults) and with the presets.
  size_t changed = 0;
  while (changed < preset.rows.size() &&
         profiled.rows[changed].fcp_s == preset.rows[changed].fcp_s)
    ++changed;
  ASSERT_LT(changed, preset.rows.size())
      << "profiled coefficients changed no plan";
  const StudyRow& row = profiled.rows[changed];
  ProfileOptions p;
  p.target = "sim:" + row.cluster;
  p.model = row.model;
  EXPECT_DOUBLE_EQ(row.fcp_s, FcpSeconds(row, RunProfile(p).cost_model));
  EXPECT_DOUBLE_EQ(preset.rows[changed].fcp_s,
                   FcpSeconds(preset.rows[changed], std::nullopt));
}

TEST(Study, BadCountsNameTheField) {
  StudyOptions o;
  o.out_dir = ::testing::TempDir() + "/study_bad";
  o.steps = 0;
  try {
    RunStudy(o);
    FAIL() << "steps = 0 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "steps");
  }
}

}  // namespace
}  // namespace fcp::sim
