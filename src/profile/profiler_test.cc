#include "fcp/profiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/simulator.h"
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

TEST(ProfilerTest, MultimodalProfilesFitTheVisionEncoderApart) {
  // Without noise, alpha2_vision is the simulator's vision encoder per vision
  // token (its time on one rank over the tokens, the independent oracle), and
  // a text model's profile has none.
  ProfileOptions o = TinySim();
  o.target = "sim:h100-8x8";
  o.model = "qwen3-vl-8b";
  o.noise_rel = 0;
  const ProfileReport r = RunProfile(o);
  const sim::HardwareModel hw = sim::MakeHardwareModel(
      *FindModelPreset("qwen3-vl-8b"), *FindClusterPreset("h100-8x8"));
  const int64_t len = 16384;
  const std::vector<Sequence> clip = {{len, 98.0 / len, len}};
  const double encoder_s_per_token =
      sim::SimulateGroup(hw, clip, std::vector<int>{0}, CommKind::kRing)
          .vision_s /
      static_cast<double>(len);
  EXPECT_NEAR(r.cost_model.alpha2_vision, encoder_s_per_token,
              0.05 * encoder_s_per_token);
  EXPECT_EQ(RunProfile(TinySim()).cost_model.alpha2_vision, 0);
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

// MeasuredGroupSamples against the cost model's own placement rules: the
// link is intra-node only when every rank is on one node, the bandwidth is
// the link's (ring) or the all-to-all bandwidth of those ranks; a NaN time
// gives no sample.
TEST(LearnTest, MeasuredGroupSamplesFollowThePlacement) {
  PlanRequest req;
  req.cluster = Cluster{16, 8};
  req.cost.bw_intra_node = 100e9;
  req.cost.bw_inter_node = 20e9;
  req.sequences = {
      {8192, 0.0}, {4096, 1.0}, {1000, 0.0}, {2000, 0.0}, {500, 0.0}};
  Plan plan;
  plan.num_ranks = 16;
  MicroBatchPlan mb;
  auto group = [](std::vector<int> ranks, std::vector<int> seqs,
                  CommKind comm) {
    GroupPlan g;
    g.ranks = std::move(ranks);
    g.sequences = std::move(seqs);
    g.comm = comm;
    return g;
  };
  mb.groups = {group({0, 1, 2, 3}, {0}, CommKind::kRing),
               group({6, 7, 8, 9}, {1}, CommKind::kRing),
               group({10, 11, 12, 13}, {2, 3}, CommKind::kAllToAll),
               group({14}, {4}, CommKind::kRing)};
  plan.micro_batches = {mb};
  EvaluatePlan(req, plan);
  const std::vector<double> times = {0.5, 0.25, 0.125, std::nan("")};
  const std::vector<FitSample> s = MeasuredGroupSamples(req, plan, times);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].link, Link::kIntraNode);
  EXPECT_EQ(s[0].bw_bytes_per_s, 100e9);
  EXPECT_EQ(s[0].load.sum_tokens, 8192);
  EXPECT_EQ(s[1].link, Link::kInterNode);
  EXPECT_EQ(s[1].bw_bytes_per_s, 20e9);
  EXPECT_EQ(s[1].load.sum_attn, 2.0 * 4096 * 4096);
  EXPECT_EQ(s[2].comm, CommKind::kAllToAll);
  EXPECT_EQ(s[2].bw_bytes_per_s,
            AllToAllBandwidthOnRanks(req.cost, req.cluster,
                                     std::vector<int>{10, 11, 12, 13}));
  EXPECT_EQ(s[2].load.sum_tokens, 3000);
  EXPECT_EQ(s[0].total_s, 0.5);
  EXPECT_EQ(s[2].total_s, 0.125);
  EXPECT_EQ(s[2].degree, 4);

  auto field_of = [&](std::vector<double> t, const Plan& p) {
    try {
      MeasuredGroupSamples(req, p, t);
    } catch (const InputError& e) {
      return e.field();
    }
    return std::string("none");
  };
  EXPECT_EQ(field_of({0.5, 0.25}, plan), "group_times_s");
  EXPECT_EQ(field_of({0.5, -1, 0.1, 0.1}, plan), "group_times_s[1]");
  EXPECT_EQ(field_of({0.5, 0.25, INFINITY, 0.1}, plan), "group_times_s[2]");
  Plan lost = plan;
  lost.micro_batches[0].groups[3].sequences.clear();  // sequence 4 in no group
  // The shared plan check (CheckPlanShape) names the exact field.
  EXPECT_EQ(field_of(times, lost), "plan.micro_batches[0].groups[3].sequences");
}

TEST(CpuInfoTest, DerivesPeakFromFlags) {
  const std::string text =
      "processor\t: 0\nmodel name\t: Test CPU\ncpu MHz\t\t: "
      "2000.000\nsiblings\t: 4\n"
      "cpu cores\t: 2\nflags\t\t: fpu sse avx avx2 fma\n\nprocessor\t: "
      "1\n\nprocessor\t: 2\n\n"
      "processor\t: 3\n";
  const auto info = profile::ParseCpuInfo(text);
  EXPECT_EQ(info.logical_cpus, 4);
  EXPECT_EQ(info.physical_cores, 2);
  EXPECT_EQ(info.flops_per_cycle, 32);  // 8 lanes x 2 (FMA) x 2 pipes
  EXPECT_DOUBLE_EQ(info.peak_flops, 2 * 2.0e9 * 32);
  const auto old = profile::ParseCpuInfo(
      "processor : 0\ncpu MHz : 1000\nflags : sse sse2\n");
  EXPECT_EQ(old.flops_per_cycle, 8);  // 4 lanes, mul + add pipes
  const auto wide = profile::ParseCpuInfo(
      "processor : 0\ncpu MHz : 1000\nflags : avx512f fma\n");
  EXPECT_EQ(wide.flops_per_cycle, 64);
}

}  // namespace
}  // namespace fcp
