// Step-time planning: StepMs against hand-computed schedules, and fcp ranking
// its candidates by step time when the request gives the gradient sync.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>

#include "fcp/io.h"
#include "fcp/scheduler.h"
#include "planner/balanced_static.h"
#include "planner/layout_scorer.h"
#include "planner/schedule_testing.h"
#include "testing/random_batch.h"
#include "testing/sample_size.h"

namespace fcp {
namespace {

using testing::Group;
using testing::GroupsJson;

TEST(StepTest, StepMsAgainstAHandComputedSchedule) {
  // 4 ranks. Micro-batch 0: A on {0,1} 10 ms, B on {2,3} 4 ms; micro-batch 1:
  // C on all four, 6 ms. C starts at 10 ms and ends at 16 ms on every rank;
  // every rank's last group is C (6 ms); ranks 2 and 3 start with B (4 ms),
  // the shortest all-gather window, so they end last.
  std::vector<MicroBatchPlan> mbs(2);
  mbs[0].groups = {Group({0, 1}, 10), Group({2, 3}, 4)};
  mbs[1].groups = {Group({0, 1, 2, 3}, 6)};
  ASSERT_DOUBLE_EQ(ListScheduleMs(4, mbs), 16);

  // 20 ms per collective in 4 buckets of 5 ms, forward share 1/4.
  // Reduce-scatter window 0.75 * 6 = 4.5 ms: exposed 5 + (20 - 5 - 4.5) = 15.5.
  // All-gather window 0.25 * 4 = 1 ms: exposed 5 + (20 - 5 - 1) = 19.
  EXPECT_DOUBLE_EQ(
      StepMs(4, mbs,
             {.collective_s = 0.020, .buckets = 4, .forward_share = 0.25}),
      16 + 15.5 + 19);
  // 2 ms in 2 buckets: both windows hide all but the last bucket.
  EXPECT_DOUBLE_EQ(
      StepMs(4, mbs,
             {.collective_s = 0.002, .buckets = 2, .forward_share = 0.25}),
      16 + 1 + 1);
  // A rank in no group (rank 3 idle) hides neither collective: it ends at
  // 10 + 10 ms, before the busy ranks.
  std::vector<MicroBatchPlan> idle(1);
  idle[0].groups = {Group({0, 1, 2}, 8)};
  EXPECT_DOUBLE_EQ(
      StepMs(4, idle,
             {.collective_s = 0.010, .buckets = 1, .forward_share = 0.5}),
      8 + (10 + std::max(0.0, 10 - 10 - 4.0)) + 10);
}

// The window rule's property: work added on a rank that was idle lengthens
// the step by at most that work (each rank hides the collectives behind its
// own groups; an idle rank hides nothing). Random schedules, random syncs.
TEST(StepTest, WorkOnAnIdleRankAddsAtMostItself) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 7);
    const int idle = static_cast<int>(rng() % n);
    std::vector<MicroBatchPlan> mbs(1 + rng() % 3);
    for (MicroBatchPlan& mb : mbs) {
      std::vector<int> ranks;
      for (int r = 0; r < n; ++r)
        if (r != idle && rng() % 4 != 0) ranks.push_back(r);
      if (ranks.empty()) ranks.push_back((idle + 1) % n);
      while (!ranks.empty()) {  // consecutive runs of random length
        const size_t d = 1 + rng() % ranks.size();
        mb.groups.push_back(
            Group({ranks.begin(), ranks.begin() + d}, 100 * u(rng)));
        ranks.erase(ranks.begin(), ranks.begin() + d);
      }
    }
    const GradientSync sync{.collective_s = 0.2 * u(rng),
                            .buckets = 1 + static_cast<int>(rng() % 6),
                            .forward_share = u(rng)};
    const double before = StepMs(n, mbs, sync);
    const double work_ms = 50 * u(rng);
    mbs[rng() % mbs.size()].groups.push_back(Group({idle}, work_ms));
    EXPECT_LE(StepMs(n, mbs, sync), before + work_ms + 1e-9 * before)
        << "trial " << trial;
  }
}

// LayoutScorer (fcp's micro-batch shifts, issue 30) against the oracle, the
// whole plan rescored by ListScheduleMs, StepMs or, under noise,
// ExpectedStepMs, with or without communicator costs: random plans of up to
// 20 micro-batches (several blocks of tails) whose micro-batches leave random
// ranks idle (some ranks first used late), each micro-batch after the first
// tried in random layouts and one of them kept, in order, as
// ShiftMicroBatches does. Layouts that create communicators later groups use
// are not scored (and must occur).
TEST(StepTest, LayoutScoresEqualTheRescoredPlan) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int scored = 0, skipped = 0, scored_with_costs = 0, not_scored = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 9);
    std::vector<MicroBatchPlan> mbs(2 + rng() % (trial % 4 == 0 ? 19 : 5));
    const int late = static_cast<int>(rng() % n);  // idle in the first ones
    for (size_t m = 0; m < mbs.size(); ++m) {
      std::vector<int> ranks;
      for (int r = 0; r < n; ++r) {
        if ((r != late || m >= mbs.size() / 2) && rng() % 5 != 0)
          ranks.push_back(r);
      }
      std::shuffle(ranks.begin(), ranks.end(), rng);
      while (!ranks.empty()) {
        const size_t d = 1 + rng() % ranks.size();
        mbs[m].groups.push_back(
            Group({ranks.begin(), ranks.begin() + d}, 100 * u(rng)));
        ranks.erase(ranks.begin(), ranks.begin() + d);
      }
    }
    const GradientSync sync{.collective_s = 0.2 * u(rng),
                            .buckets = 1 + static_cast<int>(rng() % 6),
                            .forward_share = u(rng)};
    const bool with_sync = trial % 3 != 0;
    GroupTimeNoise noise(trial % 5 < 2 ? 0.0 : 0.5, 16);
    const bool with_costs = trial % 2 == 0;
    const double create_s = 0.05 * u(rng);
    std::set<std::vector<int>> held;  // some of the plan's sets
    for (const MicroBatchPlan& mb : mbs) {
      for (const GroupPlan& g : mb.groups) {
        std::vector<int> set = g.ranks;
        std::sort(set.begin(), set.end());
        if (rng() % 3 == 0) held.insert(set);
      }
    }
    auto rescored = [&] {
      const std::vector<double> delays =
          with_costs ? NewCommunicatorDelaysMs(mbs, held, create_s)
                     : std::vector<double>{};
      return ExpectedStepMs(n, mbs, with_sync ? &sync : nullptr, noise, delays);
    };
    planner::LayoutScorer layouts(n, with_sync ? &sync : nullptr, &noise,
                                  with_costs ? &held : nullptr, create_s, mbs);
    layouts.Commit(mbs[0]);
    for (size_t m = 1; m < mbs.size(); ++m) {
      std::vector<int> relabel(n);
      std::iota(relabel.begin(), relabel.end(), 0);
      const MicroBatchPlan original = mbs[m];
      for (int layout = 0; layout < 4; ++layout) {
        std::shuffle(relabel.begin(), relabel.end(), rng);
        for (size_t g = 0; g < original.groups.size(); ++g) {
          for (size_t j = 0; j < original.groups[g].ranks.size(); ++j)
            mbs[m].groups[g].ranks[j] = relabel[original.groups[g].ranks[j]];
        }
        if (!layouts.CanScore(m)) {
          ++skipped;
          continue;
        }
        const std::optional<double> ms = layouts.Score(m, mbs[m]);
        if (!ms) {
          ++not_scored;
          continue;
        }
        const double expected = rescored();
        EXPECT_NEAR(*ms, expected, 1e-9 * expected)
            << "trial " << trial << ", micro-batch " << m;
        ++scored;
        scored_with_costs += with_costs;
      }
      layouts.Commit(mbs[m]);  // the last layout tried stays
    }
  }
  EXPECT_GT(scored, 2000);
  EXPECT_GT(scored_with_costs, 500);
  EXPECT_GT(not_scored, 10);  // layouts that change later delays occur
  EXPECT_GT(skipped, 10);     // late first groups do occur
}

// A random request with a random gradient sync: collectives from nothing to
// several times the batch's lower bound, so that some batches are
// sync-bound and some are not.
PlanRequest RandomRequestWithSync(uint64_t seed, std::mt19937_64& rng) {
  testing::RandomInstanceOptions opt;
  opt.max_sequences = 40;
  opt.max_ranks = 32;
  opt.one_micro_batch_feasible = seed % 2 == 0;
  PlanRequest req = testing::RandomRequest(rng, opt);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  GradientSync sync;
  sync.collective_s = 3.0 * u(rng) * LowerBoundMs(req) / 1000.0;
  sync.buckets = 1 + static_cast<int>(rng() % 8);
  sync.forward_share = seed % 3 == 0 ? 1.0 / 3.0 : 0.25;
  req.grad_sync = sync;
  return req;
}

TEST(StepTest, FcpIsNeverWorseThanAnyBalancedStaticPlanInStepTime) {
  // Every balanced static ring plan is one of fcp's candidates (ranked by
  // step time, the all-ring version stays a candidate beside the one with
  // all-to-all groups where faster), so in step time fcp's plan must be no
  // slower than any of them.
  int total = 0, static_shaped = 0, differs = 0;
  for (uint64_t seed = 1; seed <= testing::SampleSize(300); ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const PlanRequest req = RandomRequestWithSync(seed, rng);
    Plan fcp = MakePlan(req, {.strategy = "fcp"});
    if (fcp.status != PlanStatus::kOk) continue;
    ++total;
    const double fcp_step =
        StepMs(req.cluster.num_ranks, fcp.micro_batches, *req.grad_sync);
    ASSERT_EQ(fcp.notes.count("step_ms"), 1u);
    EXPECT_NEAR(std::stod(fcp.notes.at("step_ms")), fcp_step, 1e-5 * fcp_step)
        << seed;
    for (int cp = 1; cp <= req.cluster.num_ranks; ++cp) {
      if (req.cluster.num_ranks % cp) continue;
      auto mbs = planner::BalancedStaticMicroBatches(req, cp, CommKind::kRing);
      if (!mbs) continue;
      EstimateMicroBatches(req, *mbs);
      ASSERT_LE(fcp_step, StepMs(req.cluster.num_ranks, *mbs, *req.grad_sync) *
                              (1 + 1e-9))
          << "seed " << seed << " cp " << cp;
    }
    PlanRequest makespan_only = req;
    makespan_only.grad_sync.reset();
    const Plan by_makespan = MakePlan(makespan_only, {.strategy = "fcp"});
    static_shaped += fcp.notes.count("grouping") &&
                     fcp.notes.at("grouping").rfind("balanced", 0) == 0;
    differs += GroupsJson(fcp) != GroupsJson(by_makespan);
  }
  std::printf(
      "step-ranked fcp: %d batches, %d take a balanced static plan, %d differ "
      "from the "
      "makespan-ranked plan\n",
      total, static_shaped, differs);
  EXPECT_GT(total, testing::SampleSize(100));
  EXPECT_GT(differs, 0);  // the ranking must matter somewhere
}

TEST(StepTest, ZeroSyncPlansAsMakespan) {
  // With a sync that costs nothing every score is the makespan: the plan is
  // the makespan-ranked one (only the step_ms note is added).
  for (uint64_t seed = 1; seed <= testing::SampleSize(100); ++seed) {
    std::mt19937_64 rng(seed * 104729);
    PlanRequest req = RandomRequestWithSync(seed, rng);
    req.grad_sync->collective_s = 0;
    Plan with = MakePlan(req, {.strategy = "fcp"});
    req.grad_sync.reset();
    Plan without = MakePlan(req, {.strategy = "fcp"});
    ASSERT_EQ(with.status, without.status);
    with.notes.erase("step_ms");
    with.solver_ms = without.solver_ms = 0;
    EXPECT_EQ(PlanToJson(with, -1), PlanToJson(without, -1)) << "seed " << seed;
  }
}

TEST(StepTest, BadGradientSyncNamesTheField) {
  PlanRequest req;
  req.cluster = {8, 8};
  req.cost = {.alpha1 = 1e-11,
              .alpha2 = 1e-6,
              .beta1 = 1e-3,
              .alpha3 = 1e5,
              .beta2 = 1e-4,
              .bw_intra_node = 2e11,
              .bw_inter_node = 5e10,
              .mem_per_token = 5e5,
              .mem_static = 2e10,
              .mem_capacity = 6.4e10};
  req.sequences = {{4096, 1.0}, {8192, 1.0}};
  auto field = [&](GradientSync sync) -> std::string {
    req.grad_sync = sync;
    try {
      MakePlan(req, {.strategy = "fcp"});
    } catch (const InputError& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field({.collective_s = -1}), "grad_sync.collective_s");
  EXPECT_EQ(field({.collective_s = std::numeric_limits<double>::infinity()}),
            "grad_sync.collective_s");
  EXPECT_EQ(field({.collective_s = 0.1, .buckets = 0}), "grad_sync.buckets");
  EXPECT_EQ(field({.collective_s = 0.1, .buckets = 1, .forward_share = 1.5}),
            "grad_sync.forward_share");
  EXPECT_EQ(
      field({.collective_s = 0.1, .buckets = 1, .forward_share = std::nan("")}),
      "grad_sync.forward_share");
  EXPECT_EQ(field({.collective_s = 0.1, .buckets = 3, .forward_share = 0.25}),
            "");
}

}  // namespace
}  // namespace fcp
