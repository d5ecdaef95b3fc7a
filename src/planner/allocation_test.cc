// Stage 2: Algorithm 1 (DP) and the fast allocator agree with each other on
// 10,000+ random instances and with exhaustive enumeration on tiny ones.
#include "planner/allocation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "fcp/cost_model.h"
#include "testing/random_batch.h"

namespace fcp::planner {
namespace {

struct Instance {
  CostModel cm;
  Cluster cluster;
  std::vector<AllocGroup> groups;
};

Instance RandomInstance(std::mt19937_64& rng, int max_groups, int max_ranks) {
  Instance in;
  in.cm = testing::RandomCostModel(rng);
  std::uniform_int_distribution<int> ranks(1, max_ranks);
  in.cluster.num_ranks = ranks(rng);
  in.cluster.ranks_per_node =
      std::uniform_int_distribution<int>(1, in.cluster.num_ranks)(rng);
  const int k = std::uniform_int_distribution<int>(1, max_groups)(rng);
  std::uniform_real_distribution<double> log_len(std::log(64.0),
                                                 std::log(262144.0));
  for (int p = 0; p < k; ++p) {
    AllocGroup g;
    const int members = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int m = 0; m < members; ++m) {
      const double eta =
          std::uniform_real_distribution<double>(0, 1)(rng) < 0.3 ? 1.0 : 0.0;
      g.load.Add({static_cast<int64_t>(std::exp(log_len(rng))), eta});
    }
    g.min_degree = MinDegree(in.cm, g.load);
    in.groups.push_back(g);
  }
  return in;
}

// Exhaustive: every degree vector with d_p >= d_min and Σ d_p <= N.
double Enumerate(const std::vector<AllocGroup>& groups, int n,
                 const GroupTimeFn& time, size_t p = 0, int used = 0,
                 double worst = 0) {
  if (p == groups.size()) return worst;
  double best = std::numeric_limits<double>::infinity();
  for (int d = static_cast<int>(groups[p].min_degree); used + d <= n; ++d) {
    best = std::min(best, Enumerate(groups, n, time, p + 1, used + d,
                                    std::max(worst, time(groups[p], d))));
  }
  return best;
}

TEST(AllocationTest, DpAndFastAgreeOnRandomInstances) {
  int feasible = 0;
  for (uint64_t seed = 1; seed <= 10000; ++seed) {
    std::mt19937_64 rng(seed);
    const Instance in = RandomInstance(rng, 12, 96);
    const GroupTimeFn time = BestCaseTime(in.cm, in.cluster);
    const Allocation dp = AllocateDp(in.groups, in.cluster.num_ranks, time);
    const Allocation fast = AllocateFast(in.groups, in.cluster.num_ranks, time);
    ASSERT_EQ(dp.feasible, fast.feasible) << "seed " << seed;
    if (!dp.feasible) continue;
    ++feasible;
    ASSERT_EQ(dp.makespan_s, fast.makespan_s) << "seed " << seed;
    ASSERT_EQ(dp.degrees, fast.degrees) << "seed " << seed;
    int used = 0;
    double worst = 0;
    for (size_t p = 0; p < in.groups.size(); ++p) {
      ASSERT_GE(fast.degrees[p], in.groups[p].min_degree) << "seed " << seed;
      used += fast.degrees[p];
      worst = std::max(worst, time(in.groups[p], fast.degrees[p]));
    }
    ASSERT_LE(used, in.cluster.num_ranks) << "seed " << seed;
    ASSERT_EQ(worst, fast.makespan_s) << "seed " << seed;
  }
  EXPECT_GT(feasible, 5000);  // the generator must exercise the solvers
}

TEST(AllocationTest, BothEqualExhaustiveEnumerationOnTinyInstances) {
  int feasible = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const Instance in = RandomInstance(rng, 4, 12);
    const GroupTimeFn time = BestCaseTime(in.cm, in.cluster);
    const double exact = Enumerate(in.groups, in.cluster.num_ranks, time);
    const Allocation fast = AllocateFast(in.groups, in.cluster.num_ranks, time);
    const Allocation dp = AllocateDp(in.groups, in.cluster.num_ranks, time);
    ASSERT_EQ(std::isfinite(exact), fast.feasible) << "seed " << seed;
    if (!fast.feasible) continue;
    ++feasible;
    ASSERT_EQ(fast.makespan_s, exact) << "seed " << seed;
    ASSERT_EQ(dp.makespan_s, exact) << "seed " << seed;
  }
  EXPECT_GT(feasible, 500);
}

// LocalSearch's use: from the canonical degrees of an allocation with
// makespan M, leave out one or two groups and add one or two (a merge, a move
// to another group or to a new one); the result is the fast allocator's
// makespan of that variant whenever it is below M, and never below M
// otherwise.
TEST(AllocationTest, ResumedMakespanMatchesFastBelowTheOldMakespan) {
  int below = 0, checked = 0;
  for (uint64_t seed = 1; seed <= 4000; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    const Instance in = RandomInstance(rng, 12, 96);
    const GroupTimeFn time = BestCaseTime(in.cm, in.cluster);
    const int n = in.cluster.num_ranks;
    const Allocation old = AllocateFast(in.groups, n, time);
    if (!old.feasible) continue;
    std::vector<double> times;
    for (size_t p = 0; p < in.groups.size(); ++p) {
      times.push_back(time(in.groups[p], old.degrees[p]));
    }
    ResumedAllocator resumed(in.groups, old.degrees, times, n, time);
    const int k = static_cast<int>(in.groups.size());
    for (int variant = 0; variant < 4; ++variant) {
      const int b = std::uniform_int_distribution<int>(0, k - 1)(rng);
      const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
      const int64_t len =
          std::uniform_int_distribution<int64_t>(64, 65536)(rng);
      std::vector<int> removed = {b};
      std::vector<AllocGroup> added;
      if (kind == 0 && k > 1) {  // merge b into t
        const int t = (b + 1) % k;
        removed.push_back(t);
        added.push_back(in.groups[t]);
        added[0].load.sum_tokens += in.groups[b].load.sum_tokens;
        added[0].load.sum_attn += in.groups[b].load.sum_attn;
        added[0].load.sum_attn_tokens += in.groups[b].load.sum_attn_tokens;
      } else if (kind == 1) {  // b loses a sequence to a new group
        added.push_back(in.groups[b]);
        added[0].load.sum_tokens *= 0.75;
        added[0].load.sum_attn *= 0.5;
        added[0].load.sum_attn_tokens *= 0.75;
        added.push_back({GroupLoad::Of({len, 0.0}), 1});
      } else {  // b gains one
        added.push_back(in.groups[b]);
        added[0].load.Add({len, 1.0});
      }
      for (auto& g : added) g.min_degree = MinDegree(in.cm, g.load);
      std::vector<AllocGroup> variant_groups;
      for (int p = 0; p < k; ++p) {
        if (std::find(removed.begin(), removed.end(), p) == removed.end()) {
          variant_groups.push_back(in.groups[p]);
        }
      }
      variant_groups.insert(variant_groups.end(), added.begin(), added.end());
      const double makespan = resumed.Makespan(removed, added);
      const Allocation fresh = AllocateFast(variant_groups, n, time);
      ++checked;
      if (fresh.feasible && fresh.makespan_s < old.makespan_s) {
        ++below;
        ASSERT_EQ(makespan, fresh.makespan_s) << "seed " << seed;
      } else {
        ASSERT_GE(makespan, old.makespan_s) << "seed " << seed;
      }
    }
  }
  EXPECT_GT(checked, 4000);
  EXPECT_GT(below, 400);  // the generator must exercise the exact case
}

TEST(AllocationTest, InfeasibleWhenMinDegreesExceedRanks) {
  std::vector<AllocGroup> groups(3);
  for (auto& g : groups) {
    g.load.Add({1000, 0});
    g.min_degree = 2;
  }
  const CostModel cm;
  const GroupTimeFn time = BestCaseTime(cm, Cluster{5, 5});
  EXPECT_FALSE(AllocateFast(groups, 5, time).feasible);
  EXPECT_FALSE(AllocateDp(groups, 5, time).feasible);
  EXPECT_TRUE(AllocateFast(groups, 6, time).feasible);
}

}  // namespace
}  // namespace fcp::planner
