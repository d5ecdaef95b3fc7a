// Issue 32 property: in its own cost model fcp is never behind the simple
// strategies it is compared with — the three reference heuristics
// (src/baselines/heuristics.h: ref-share, ref-bisect, ref-grow) and the best
// balanced static plan (megatron / deepspeed, every degree) — on seeded random
// small instances. Each plan is scored here, independently of the planner's
// own ranking, by the step estimate with the same coefficients (StepMs with
// the request's gradient sync, else the list-schedule makespan).
//
// Against the static plans the property is exact (they are fcp candidates).
// Against the heuristics fcp is strictly no worse too (1e-9 relative). The
// test can fail: without dealing lanes below the makespan (ReshapeLanes'
// DealBelow) seed 90 trails ref-bisect by 0.019 %, whose seven 2-rank lanes
// pair the long sequences and whose single ranks take the short ones; without
// the lanes at other degrees (ReshapeLanes) seed 48 trails ref-grow by
// 0.012 % too (lanes of 2 and 5 ranks where ref-grow's have 4 and 3); without
// the polishing (TryPolishedLanes) 8 batches trail, seed 79 by 1.3 %; with
// fcp's lane candidates removed (TryLanes not called) seeds 10, 16, 43, ...
// trail ref-bisect and ref-grow by up to 4 %.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

#include "fcp/scheduler.h"
#include "testing/random_batch.h"

namespace fcp {
namespace {

PlanRequest RandomInstance(uint64_t seed) {
  return testing::RandomRequestMaybeSync(seed, 104729, 48);
}

// The step estimate of `mbs` in `req`'s model (ms): the estimates are
// recomputed here from the groups, not read from the plan.
double StepEstimateMs(const PlanRequest& req, std::vector<MicroBatchPlan> mbs) {
  const double makespan_ms = EstimateMicroBatches(req, mbs);
  return req.grad_sync ? StepMs(req.cluster.num_ranks, mbs, *req.grad_sync)
                       : makespan_ms;
}

// The best static plan's step estimate over every admissible degree of
// `strategy` (megatron: every divisor of N; deepspeed: those that the heads
// allow), +inf when none runs.
double BestStaticMs(const PlanRequest& req, const std::string& strategy) {
  double best = std::numeric_limits<double>::infinity();
  for (int cp = 1; cp <= req.cluster.num_ranks; ++cp) {
    if (req.cluster.num_ranks % cp != 0) continue;
    PlanOptions options{.strategy = strategy, .cp_degree = cp};
    Plan plan;
    try {
      plan = MakePlan(req, options);
    } catch (const InputError&) {
      continue;  // a degree the strategy refuses (deepspeed: heads)
    }
    if (plan.status != PlanStatus::kOk) continue;
    best = std::min(best, StepEstimateMs(req, plan.micro_batches));
  }
  return best;
}

TEST(ReferenceTest, FcpIsNeverBehindAReferenceHeuristicOrStaticPlan) {
  constexpr double kTol = 1e-9;
  int batches = 0, strictly_better = 0, behind = 0;
  double worst_ref_gap = 0;
  std::string behind_seeds;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const PlanRequest req = RandomInstance(seed);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    if (fcp.status != PlanStatus::kOk) continue;
    ++batches;
    const double fcp_ms = StepEstimateMs(req, fcp.micro_batches);
    double best_other = std::numeric_limits<double>::infinity();
    double best_ref = std::numeric_limits<double>::infinity();
    for (const char* name : {"ref-share", "ref-bisect", "ref-grow"}) {
      const Plan ref = MakePlan(req, {.strategy = name});
      if (ref.status != PlanStatus::kOk) continue;
      const double ref_ms = StepEstimateMs(req, ref.micro_batches);
      EXPECT_LE(fcp_ms, ref_ms * (1 + kTol))
          << "seed " << seed << ": fcp " << fcp_ms << " ms, " << name << " "
          << ref_ms << " ms (" << ref.notes.at("setting") << ")";
      best_ref = std::min(best_ref, ref_ms);
    }
    if (std::isfinite(best_ref)) {
      worst_ref_gap = std::max(worst_ref_gap, fcp_ms / best_ref - 1);
      if (fcp_ms > best_ref * (1 + kTol)) {
        ++behind;
        behind_seeds += ' ' + std::to_string(seed);
      }
    }
    best_other = std::min(best_other, best_ref);
    for (const char* name : {"megatron", "deepspeed"}) {
      const double static_ms = BestStaticMs(req, name);
      EXPECT_LE(fcp_ms, static_ms * (1 + kTol))
          << "seed " << seed << ": fcp " << fcp_ms << " ms, best " << name
          << " " << static_ms << " ms";
      best_other = std::min(best_other, static_ms);
    }
    strictly_better += fcp_ms < best_other * (1 - 1e-6);
  }
  std::printf(
      "fcp strictly ahead of every reference heuristic and static plan on %d "
      "of %d batches; behind the best heuristic on %d (seeds:%s), by at most "
      "%.3f %%\n",
      strictly_better, batches, behind, behind_seeds.c_str(),
      100 * worst_ref_gap);
  EXPECT_GT(batches, 80);
}

}  // namespace
}  // namespace fcp
