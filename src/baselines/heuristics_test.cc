// The reference heuristics (heuristics.h): valid plans, and fcp never behind
// any of them in its own model (issue 32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "fcp/scheduler.h"
#include "testing/random_batch.h"

namespace fcp {
namespace {

const char* const kHeuristics[] = {"ref-share", "ref-bisect", "ref-grow"};

// The score fcp ranks by: the step estimate with a gradient sync, else the
// plan estimate.
double ScoreMs(const PlanRequest& req, const Plan& plan) {
  return req.grad_sync
             ? StepMs(req.cluster.num_ranks, plan.micro_batches, *req.grad_sync)
             : plan.est_ms;
}

PlanRequest RandomCase(std::mt19937_64& rng, int i) {
  testing::RandomInstanceOptions opt;
  opt.max_sequences = 24;
  opt.max_ranks = 16;
  opt.one_micro_batch_feasible = false;
  PlanRequest req = testing::RandomRequest(rng, opt);
  if (i % 2 == 1) {  // half of them ranked by the step estimate
    req.grad_sync = GradientSync{.collective_s = 0.05 * (1 + i % 5),
                                 .buckets = 1 + i % 4,
                                 .forward_share = 0.25};
  }
  return req;
}

TEST(ReferenceHeuristics, PlansValidate) {
  std::mt19937_64 rng(3201);
  for (int i = 0; i < 300; ++i) {
    const PlanRequest req = RandomCase(rng, i);
    for (const char* name : kHeuristics) {
      const Plan plan = MakePlan(req, {.strategy = name});
      if (plan.status != PlanStatus::kOk) continue;
      EXPECT_EQ(ValidatePlan(req, plan), "") << name << " instance " << i;
    }
  }
}

// In its own model (the score it ranks candidates by) fcp against every
// reference heuristic on random small instances. Issue 32's goal is "never
// worse"; it is not met yet (docs/planner/reference-heuristics.md), so this
// guards what holds today on 3,000 instances: fcp behind in at most 0.1 % of
// the comparisons and never by more than 1 % (5 of 6,474, worst 0.75 %, since
// the exact deal, the packed all-to-all pricing and the runner-up lanes; 40,
// worst 8.2 % before). Tighten both when the search closes the gap.
TEST(ReferenceHeuristics, FcpIsRarelyBehindInItsOwnModel) {
  std::mt19937_64 rng(3202);
  int compared = 0, strictly_better = 0, behind = 0;
  double worst = 1;
  for (int i = 0; i < 3000; ++i) {
    const PlanRequest req = RandomCase(rng, i);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    if (fcp.status != PlanStatus::kOk) continue;
    const double fcp_ms = ScoreMs(req, fcp);
    for (const char* name : kHeuristics) {
      const Plan ref = MakePlan(req, {.strategy = name});
      ASSERT_EQ(ref.status, PlanStatus::kOk) << name << " instance " << i;
      const double ref_ms = ScoreMs(req, ref);
      ++compared;
      strictly_better += fcp_ms < ref_ms * (1 - 1e-9);
      if (fcp_ms > ref_ms * (1 + 1e-9)) {
        ++behind;
        worst = std::max(worst, fcp_ms / ref_ms);
      }
      EXPECT_LE(fcp_ms, ref_ms * 1.01)
          << name << " instance " << i << ": N=" << req.cluster.num_ranks
          << " sequences=" << req.sequences.size() << " ("
          << ref.notes.at("setting") << ")";
    }
  }
  std::printf(
      "fcp vs reference heuristics: better in %d, behind in %d of %d "
      "comparisons (worst %.4fx)\n",
      strictly_better, behind, compared, worst);
  EXPECT_GT(compared, 6000);
  EXPECT_LE(behind, compared / 1000);
}

}  // namespace
}  // namespace fcp
