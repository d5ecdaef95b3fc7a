#include "fcp/study.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fcp/experiment.h"
#include "fcp/profiler.h"
#include "fcp/scheduler.h"
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

// The configuration of a case the quick grid ran: one measured batch after
// one warm-up batch.
ExperimentConfig QuickCaseConfig(const StudyRow& row) {
  ExperimentConfig cfg;
  cfg.cluster = row.cluster;
  cfg.model = row.model;
  cfg.ranks = row.ranks;
  cfg.global_batch = row.global_batch;
  cfg.dataset = row.dataset;
  cfg.steps = 1;
  cfg.warmup = 1;
  return cfg;
}

// The case the study ran, rerun by hand: fcp against megatron and deepspeed
// dealt by work.
double FcpSeconds(const StudyRow& row,
                  const std::optional<CostModel>& coefficients) {
  ExperimentConfig cfg = QuickCaseConfig(row);
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

// The ring-only yardstick is megatron's ring CP tuned in hindsight on the
// measured batches, rerun here by hand for every quick case; the best static
// plan (megatron or deepspeed) is never slower than it.
TEST(Study, RingStaticIsMegatronTunedInHindsight) {
  const StudyResult study = QuickStudy(false);
  int compared = 0;
  for (const StudyRow& row : study.rows) {
    ExperimentConfig cfg = QuickCaseConfig(row);
    cfg.strategies = {"megatron"};
    cfg.dealing = Dealing::kBalanced;
    cfg.tune = Tuning::kHindsight;
    const ExperimentResult rerun = RunExperiment(cfg);
    ASSERT_EQ(rerun.results.size(), 1u);
    const StrategyResult& megatron = rerun.results[0];
    if (megatron.oom || megatron.infeasible) continue;
    EXPECT_DOUBLE_EQ(row.ring_static_s, megatron.iter_s)
        << row.cluster << " " << row.dataset << " gbs " << row.global_batch;
    EXPECT_LE(row.static_s, row.ring_static_s);
    ++compared;
  }
  EXPECT_GT(compared, 10);
  EXPECT_NE(study.summary.find("/ best ring static (megatron)"),
            std::string::npos);
}

// What fcp ranks its candidates by, from the planner's public formulas (not
// the search's own score): the step estimate with the gradient sync, each
// group on a rank set without a communicator starting its creation later.
double FcpRankingMs(const PlanRequest& request, const Plan& plan) {
  GroupTimeNoise exact(0);
  return ExpectedStepMs(
      request.cluster.num_ranks, plan.micro_batches, &*request.grad_sync, exact,
      NewCommunicatorDelaysMs(plan.micro_batches, *request.communicators));
}

bool AnyAllToAll(const Plan& plan) {
  for (const MicroBatchPlan& mb : plan.micro_batches)
    for (const GroupPlan& g : mb.groups)
      if (g.comm == CommKind::kAllToAll) return true;
  return false;
}

// The study's search columns on a tiny grid: each is the simulation of plans
// that, on every measured batch's own request (coefficients, gradient sync,
// the run's communicators), fcp's ranking puts no later than fcp's plan for
// that request (fcp-ring's for search-ring, which has no all-to-all group).
TEST(Study, SearchColumnsAreNoWorseThanFcpInItsOwnModel) {
  StudyOptions o;
  o.quick = true;
  o.profiled_coefficients = false;
  o.clusters = {"h100-8x8"};
  o.global_batches = {64};
  o.ranks = {8};
  o.search_s = 60;
  o.search_iterations = 400;
  o.out_dir = ::testing::TempDir() + "/study_search";
  const StudyResult study = RunStudy(o);
  ASSERT_FALSE(study.rows.empty());
  EXPECT_NE(study.markdown.find("| search / static | search-ring / static |"),
            std::string::npos);
  EXPECT_NE(study.summary.find("search-ring / static: geometric mean"),
            std::string::npos);
  for (const StudyRow& row : study.rows) {
    SCOPED_TRACE(row.dataset + " N=" + std::to_string(row.ranks));
    ASSERT_GT(row.search_s, 0);
    ASSERT_GT(row.search_ring_s, 0);
    EXPECT_EQ(row.search_time_limited, 0);
    EXPECT_GE(row.search_model_gain, 1 - 1e-12);
    EXPECT_GE(row.search_ring_model_gain, 1 - 1e-12);
    // The row's case rerun by hand (quick: one warm-up, one measured batch),
    // keeping each strategy's last (measured) request and plan.
    ExperimentConfig cfg = QuickCaseConfig(row);
    cfg.strategies = {"search", "search-ring"};
    cfg.extra_planners = {{"search", StudySearchPlanner(o, 1, false)},
                          {"search-ring", StudySearchPlanner(o, 1, true)}};
    std::map<std::string, std::pair<PlanRequest, Plan>> last;
    cfg.on_plan = [&](const std::string& s, const PlanRequest& r,
                      const Plan& p) {
      last[s] = {r, p};
    };
    std::map<std::string, double> simulated;
    for (const StrategyResult& r : RunExperiment(cfg).results)
      simulated[r.strategy] = r.iter_s;
    EXPECT_DOUBLE_EQ(simulated["search"], row.search_s);
    EXPECT_DOUBLE_EQ(simulated["search-ring"], row.search_ring_s);
    for (const auto& [name, fcp] :
         {std::pair{"search", "fcp"}, std::pair{"search-ring", "fcp-ring"}}) {
      const auto& [request, plan] = last.at(name);
      ASSERT_TRUE(request.grad_sync && request.communicators);
      PlanOptions options;
      options.strategy = fcp;
      const Plan planned = MakePlan(request, options);
      EXPECT_LE(FcpRankingMs(request, plan),
                FcpRankingMs(request, planned) * (1 + 1e-12))
          << name;
      if (std::string(name) == "search-ring") {
        EXPECT_FALSE(AnyAllToAll(plan));
      }
    }
  }
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
  o.steps = 1;
  o.search_s = -1;
  try {
    RunStudy(o);
    FAIL() << "search_s = -1 accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "search_s");
  }
}

}  // namespace
}  // namespace fcp::sim
