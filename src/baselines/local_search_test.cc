// The local-search reference (local_search.h): never below the exact optimum
// of its search space, never worse than where it starts, valid plans, and the
// same plan for the same seed.
#include "fcp/local_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "fcp/scheduler.h"
#include "testing/random_batch.h"

namespace fcp::baselines {
namespace {

// Every group on increasing contiguous ranks, groups in rank order: the
// search lays such a plan out exactly as it is.
bool Contiguous(const Plan& plan) {
  for (const MicroBatchPlan& mb : plan.micro_batches) {
    int end = 0;
    for (const GroupPlan& g : mb.groups) {
      if (g.ranks.front() < end) return false;
      for (size_t i = 1; i < g.ranks.size(); ++i)
        if (g.ranks[i] != g.ranks[i - 1] + 1) return false;
      end = g.ranks.back() + 1;
    }
  }
  return true;
}

// `optimal` solves one micro-batch of ring groups on contiguous ranks exactly;
// restricted to that space (one micro-batch, ring only, starts not kept as
// given), the search can reach the optimum but never go below it: from the
// other strategies' plans, and from one group of all ranks alone.
void ExpectNeverBelowTheOptimum(bool with_strategy_starts) {
  std::mt19937_64 rng(3301);
  testing::RandomInstanceOptions inst;
  inst.max_sequences = 8;
  inst.max_ranks = 12;
  LocalSearchOptions options;
  options.max_iterations = 3000;
  options.time_limit_s = 600;
  options.max_micro_batches = 1;
  options.all_to_all = false;
  options.keep_starts = false;
  int reached = 0, instances = 0;
  double gap_sum = 0, gap_max = 0;
  for (int i = 0; i < 60; ++i) {
    const PlanRequest req = testing::RandomRequest(rng, inst);
    const Plan best = MakePlan(req, {.strategy = "optimal"});
    ASSERT_EQ(best.status, PlanStatus::kOk) << "instance " << i;
    options.seed = i;
    const LocalSearchResult found =
        LocalSearch(req,
                    with_strategy_starts ? DefaultSearchStarts(req)
                                         : std::vector<SearchStart>{},
                    options);
    ASSERT_EQ(found.plan.status, PlanStatus::kOk) << "instance " << i;
    EXPECT_EQ(ValidatePlan(req, found.plan), "") << "instance " << i;
    EXPECT_EQ(found.plan.micro_batches.size(), 1u) << "instance " << i;
    EXPECT_GE(found.score_ms, best.est_ms * (1 - 1e-9))
        << "instance " << i << ": search " << found.score_ms << " ms below "
        << "the optimum " << best.est_ms << " ms";
    const double gap = found.score_ms / best.est_ms - 1;
    reached += gap <= 1e-9;
    gap_sum += gap;
    gap_max = std::max(gap_max, gap);
    ++instances;
  }
  std::printf(
      "local search vs optimum (one micro-batch, ring; %s): %d instances, "
      "optimum reached in %d, mean gap %.2f%%, max gap %.2f%%\n",
      with_strategy_starts ? "from the strategies' plans"
                           : "from one group alone",
      instances, reached, 100 * gap_sum / instances, 100 * gap_max);
}

TEST(LocalSearch, NeverBeatsTheExactOptimum) {
  ExpectNeverBelowTheOptimum(true);
}

TEST(LocalSearch, NeverBeatsTheExactOptimumFromOneGroup) {
  ExpectNeverBelowTheOptimum(false);
}

PlanRequest MidSizeCase(std::mt19937_64& rng, int i) {
  testing::RandomInstanceOptions inst;
  inst.max_sequences = 40;
  inst.max_ranks = 24;
  inst.one_micro_batch_feasible = false;
  PlanRequest req = testing::RandomRequest(rng, inst);
  if (i % 2 == 1) {  // half of them scored by the step estimate
    req.grad_sync = GradientSync{.collective_s = 0.05 * (1 + i % 3),
                                 .buckets = 1 + i % 4,
                                 .forward_share = 0.25};
  }
  return req;
}

// The result is valid, scored as SearchScoreMs scores it, and no worse than
// any start: as given (keep_starts) and, for starts it lays out exactly
// (contiguous ranks), after its own search too.
TEST(LocalSearch, NeverWorseThanItsStarts) {
  std::mt19937_64 rng(3302);
  int exact_starts = 0;
  for (int i = 0; i < 40; ++i) {
    const PlanRequest req = MidSizeCase(rng, i);
    const std::vector<SearchStart> starts = DefaultSearchStarts(req);
    if (starts.empty()) continue;
    for (const bool keep : {true, false}) {
      LocalSearchOptions options;
      options.max_iterations = 2000;
      options.time_limit_s = 600;
      options.seed = i;
      options.keep_starts = keep;
      const LocalSearchResult found = LocalSearch(req, starts, options);
      ASSERT_EQ(found.plan.status, PlanStatus::kOk) << "instance " << i;
      EXPECT_EQ(ValidatePlan(req, found.plan), "") << "instance " << i;
      EXPECT_NEAR(SearchScoreMs(req, found.plan), found.score_ms,
                  1e-9 * found.score_ms)
          << "instance " << i;
      for (size_t s = 0; s < starts.size(); ++s) {
        if (!keep && !Contiguous(starts[s].plan)) continue;
        exact_starts += keep ? 0 : 1;
        EXPECT_LE(found.score_ms, found.start_scores_ms[s].second * (1 + 1e-12))
            << "instance " << i << ": worse than start " << starts[s].name;
      }
    }
  }
  EXPECT_GT(exact_starts, 0);
}

TEST(LocalSearch, SameSeedSamePlan) {
  std::mt19937_64 rng(3303);
  for (int i = 0; i < 6; ++i) {
    const PlanRequest req = MidSizeCase(rng, i);
    const std::vector<SearchStart> starts = DefaultSearchStarts(req);
    LocalSearchOptions options;
    options.max_iterations = 3000;
    options.time_limit_s = 600;
    options.seed = 7;
    const LocalSearchResult a = LocalSearch(req, starts, options);
    const LocalSearchResult b = LocalSearch(req, starts, options);
    EXPECT_EQ(a.score_ms, b.score_ms) << "instance " << i;
    EXPECT_EQ(a.iterations, b.iterations) << "instance " << i;
    ASSERT_EQ(a.plan.micro_batches.size(), b.plan.micro_batches.size());
    for (size_t m = 0; m < a.plan.micro_batches.size(); ++m) {
      const auto& ga = a.plan.micro_batches[m].groups;
      const auto& gb = b.plan.micro_batches[m].groups;
      ASSERT_EQ(ga.size(), gb.size()) << "instance " << i;
      for (size_t g = 0; g < ga.size(); ++g) {
        EXPECT_EQ(ga[g].ranks, gb[g].ranks);
        EXPECT_EQ(ga[g].sequences, gb[g].sequences);
        EXPECT_EQ(ga[g].comm, gb[g].comm);
      }
    }
  }
}

TEST(LocalSearch, BadOptionsNameTheField) {
  std::mt19937_64 rng(3304);
  const PlanRequest req = testing::RandomRequest(rng);
  auto field = [&](LocalSearchOptions options) {
    try {
      LocalSearch(req, {}, options);
    } catch (const InputError& e) {
      return e.field();
    }
    return std::string("no error");
  };
  EXPECT_EQ(field({.time_limit_s = 0}), "time_limit_s");
  EXPECT_EQ(field({.max_iterations = -1}), "max_iterations");
  EXPECT_EQ(field({.max_micro_batches = -2}), "max_micro_batches");
}

}  // namespace
}  // namespace fcp::baselines
