#include "fcp/profiler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "profile/cpu_info.h"

namespace fcp {
namespace {

ProfileOptions TinySim() {
  ProfileOptions o;
  o.target = "sim:ascend910c-4x16";
  o.model = "qwen3-8b";
  o.lengths = {4096, 16384, 65536};
  o.degrees = {1, 2, 4, 8};
  o.repeats = 2;
  return o;
}

TEST(ProfilerTest, SimTinyGridWritesCostModelThatParses) {
  const ProfileReport r = RunProfile(TinySim());
  EXPECT_GE(r.samples.size(), 12u);
  EXPECT_NE(r.hardware.find("simulated"), std::string::npos);
  const std::string json = ProfileReportToJson(r);
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["target"], "sim:ascend910c-4x16");
  EXPECT_EQ(j["samples"].get<size_t>(), r.samples.size());
  for (const char* k : {"alpha1", "alpha2", "beta1", "alpha3", "beta2"}) {
    EXPECT_GE(j["coefficients"][k]["value"].get<double>(), 0.0) << k;
    EXPECT_GE(j["coefficients"][k]["std_error"].get<double>(), 0.0) << k;
  }
  EXPECT_GT(r.fit.alpha1.value, 0);
  EXPECT_GT(r.fit.alpha2.value, 0);
  // The report itself is a valid --cost-model file (the "cost_model" member).
  const CostModel base = DeriveCostModel(*FindModelPreset("qwen3-8b"),
                                         *FindClusterPreset("ascend910c-4x16"));
  const CostModel parsed = ParseCostModelJson(json, base);
  EXPECT_DOUBLE_EQ(parsed.alpha1, r.cost_model.alpha1);
  EXPECT_DOUBLE_EQ(parsed.beta2, r.cost_model.beta2);
  EXPECT_DOUBLE_EQ(parsed.bw_inter_node, base.bw_inter_node);
  // Held-out error is a fraction over the held-out points.
  EXPECT_GT(r.heldout.overall.count, 0);
  EXPECT_GE(r.heldout.overall.max, r.heldout.overall.mean);
  EXPECT_FALSE(ProfileReportToTable(r).empty());
}

TEST(ProfilerTest, SimIsDeterministicForASeed) {
  const ProfileReport a = RunProfile(TinySim()), b = RunProfile(TinySim());
  EXPECT_EQ(a.fit.alpha1.value, b.fit.alpha1.value);
  EXPECT_EQ(a.heldout.overall.mean, b.heldout.overall.mean);
}

TEST(ProfilerTest, BadOptionsNameTheField) {
  auto expect_field = [](ProfileOptions o, const std::string& field) {
    try {
      RunProfile(o);
      ADD_FAILURE() << "no error for " << field;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field);
    }
  };
  ProfileOptions o = TinySim();
  o.target = "gpu";
  expect_field(o, "target");
  o = TinySim();
  o.target = "sim:nope";
  expect_field(o, "target");
  o = TinySim();
  o.model = "nope";
  expect_field(o, "model");
  o = TinySim();
  o.degrees = {0};
  expect_field(o, "degrees[0]");
  o = TinySim();
  o.repeats = 0;
  expect_field(o, "repeats");
}

// The cpu target runs the real kernels; a tiny grid checks plumbing only (no
// timing thresholds).
TEST(ProfilerTest, CpuTinyGridRuns) {
  ProfileOptions o;
  o.target = "cpu";
  o.lengths = {64, 128, 192};
  o.degrees = {1, 2};
  o.repeats = 1;
  o.min_tokens_per_rank = 0;
  const ProfileReport r = RunProfile(o);
  EXPECT_EQ(r.model, "cpu-tiny");
  EXPECT_NE(r.hardware.find("measured"), std::string::npos);
  EXPECT_EQ(r.samples.size(), 12u);
  for (const auto& s : r.samples) {
    EXPECT_GT(s.total_s, 0);
    EXPECT_GT(s.compute_s, 0);
  }
  EXPECT_NO_THROW(ParseCostModelJson(ProfileReportToJson(r), CostModel{}));
}

NoiseEvalOptions TinyNoise() {
  NoiseEvalOptions o;
  o.batch_sequences = 48;
  o.batches = 2;
  o.trials = 2;
  o.rank_counts = {16, 32};
  o.noise_levels = {0.0, 0.5};
  return o;
}

// Zero noise re-plans with identical coefficients: every plan must match and
// the simulated time must not change (the planner is deterministic).
TEST(NoiseEvalTest, ZeroNoiseReproducesPlansAndLargeNoiseIsReported) {
  const NoiseEvalReport r = RunNoiseEval(TinyNoise());
  ASSERT_EQ(r.rows.size(), 4u);
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.plans, 4);
    EXPECT_GE(row.cp_match, 0.0);
    EXPECT_LE(row.cp_match, 1.0);
    if (row.noise == 0.0) {
      EXPECT_EQ(row.cp_match, 1.0) << row.ranks;
      EXPECT_EQ(row.time_change_mean, 0.0) << row.ranks;
    }
  }
  EXPECT_EQ(r.rows[3].ranks, 32);
  EXPECT_DOUBLE_EQ(r.rows[3].paper_cp_match, 0.913);  // paper Table 4, 50%
  const auto j = nlohmann::json::parse(NoiseEvalToJson(r));
  EXPECT_EQ(j["times"], "simulated");
  EXPECT_EQ(j["rows"].size(), 4u);
}

TEST(NoiseEvalTest, BadOptionsNameTheField) {
  NoiseEvalOptions o = TinyNoise();
  o.rank_counts = {1000};
  try {
    RunNoiseEval(o);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "ranks[0]");
  }
  o = TinyNoise();
  o.dataset = "nope";
  EXPECT_THROW(RunNoiseEval(o), InputError);
}

// Perturbing nothing leaves every plan as it was, at any noise; perturbing
// one coefficient uses the same draws as perturbing all (an ablation), so the
// all-coefficient run equals the default one.
TEST(NoiseEvalTest, PerturbSelectsCoefficients) {
  NoiseEvalOptions none = TinyNoise();
  none.perturb.clear();
  for (const auto& row : RunNoiseEval(none).rows) {
    EXPECT_EQ(row.cp_match, 1.0) << row.ranks << " " << row.noise;
    EXPECT_EQ(row.time_change_mean, 0.0) << row.ranks << " " << row.noise;
  }
  NoiseEvalOptions listed = TinyNoise();
  listed.perturb = {"gamma_serial", "gamma_inter", "gamma_intra", "attn_overhead_tokens",
                    "beta2",        "alpha3",      "beta1",       "alpha2",
                    "alpha1"};  // all of them, another order
  const NoiseEvalReport a = RunNoiseEval(TinyNoise()), b = RunNoiseEval(listed);
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    EXPECT_EQ(a.rows[i].time_change_mean, b.rows[i].time_change_mean) << i;
    EXPECT_EQ(a.rows[i].cp_match, b.rows[i].cp_match) << i;
  }
  NoiseEvalOptions bad = TinyNoise();
  bad.perturb = {"alpha1", "alpha9"};
  try {
    RunNoiseEval(bad);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "perturb[1]");
  }
}

TEST(CpuInfoTest, DerivesPeakFromFlags) {
  const std::string text =
      "processor\t: 0\nmodel name\t: Test CPU\ncpu MHz\t\t: 2000.000\nsiblings\t: 4\n"
      "cpu cores\t: 2\nflags\t\t: fpu sse avx avx2 fma\n\nprocessor\t: 1\n\nprocessor\t: 2\n\n"
      "processor\t: 3\n";
  const auto info = profile::ParseCpuInfo(text);
  EXPECT_EQ(info.logical_cpus, 4);
  EXPECT_EQ(info.physical_cores, 2);
  EXPECT_EQ(info.flops_per_cycle, 32);  // 8 lanes x 2 (FMA) x 2 pipes
  EXPECT_DOUBLE_EQ(info.peak_flops, 2 * 2.0e9 * 32);
  const auto old = profile::ParseCpuInfo("processor : 0\ncpu MHz : 1000\nflags : sse sse2\n");
  EXPECT_EQ(old.flops_per_cycle, 8);  // 4 lanes, mul + add pipes
  const auto wide = profile::ParseCpuInfo("processor : 0\ncpu MHz : 1000\nflags : avx512f fma\n");
  EXPECT_EQ(wide.flops_per_cycle, 64);
}

}  // namespace
}  // namespace fcp
