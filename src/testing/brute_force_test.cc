#include "testing/brute_force.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "fcp/cost_model.h"
#include "testing/random_batch.h"

namespace fcp::testing {
namespace {

CostModel SimpleModel() {
  CostModel cm;
  cm.alpha1 = 1e-9;
  cm.alpha2 = 1e-6;
  cm.beta1 = 1e-3;
  cm.alpha3 = 1e3;
  cm.beta2 = 1e-4;
  cm.bw_intra_node = 1e10;
  cm.bw_inter_node = 1e9;
  cm.mem_per_token = 1e5;
  cm.mem_static = 1e9;
  cm.mem_capacity = 1e9 + 1e5 * 10000;  // 10k tokens per rank
  return cm;
}

TEST(ReferenceGroupTime, MatchesCostModelLibrary) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    RandomInstanceOptions opt;
    opt.vision_probability = i % 2 ? 0.5 : 0.0;  // MLLM batches on odd i
    PlanRequest req = RandomRequest(rng, opt);
    std::vector<int> members;
    GroupLoad load;
    for (int k = 0; k < static_cast<int>(req.sequences.size()); ++k) {
      if (k % 2 == 0 || k == 1) {
        members.push_back(k);
        load.Add(req.sequences[k]);
      }
    }
    const int n = req.cluster.num_ranks;
    const int first = static_cast<int>(rng() % n);
    const int degree = 1 + static_cast<int>(rng() % (n - first));
    std::vector<int> ranks;
    for (int r = first; r < first + degree; ++r) ranks.push_back(r);
    const double mine = ReferenceGroupTimeS(
        req.cost, req.cluster, req.sequences, members, first, degree);
    const double lib = GroupTimeOnRanksS(req.cost, req.cluster, load, ranks);
    EXPECT_NEAR(mine, lib, 1e-9 * std::abs(lib)) << "instance " << i;
  }
}

TEST(BruteForce, SingleSequencePicksBestDegreeAndPlacement) {
  PlanRequest req;
  req.cluster = {8, 4};
  req.cost = SimpleModel();
  req.sequences = {{30000, 0.0}};  // needs >= 3 ranks
  double expect = INFINITY;
  for (int first = 0; first < 8; ++first) {
    for (int d = 3; first + d <= 8; ++d) {
      expect =
          std::min(expect, ReferenceGroupTimeS(req.cost, req.cluster,
                                               req.sequences, {0}, first, d));
    }
  }
  const BruteForceResult r = BruteForceOptimum(req);
  ASSERT_TRUE(r.feasible());
  EXPECT_DOUBLE_EQ(r.makespan_s, expect);
  ASSERT_EQ(r.groups.size(), 1u);
  EXPECT_GE(r.groups[0].degree, 3);
}

TEST(BruteForce, InfeasibleWhenMemoryExceedsCluster) {
  PlanRequest req;
  req.cluster = {2, 2};
  req.cost = SimpleModel();
  req.sequences = {{15000, 0.0}, {15000, 0.0}};  // 30k tokens > 2 x 10k
  EXPECT_FALSE(BruteForceOptimum(req).feasible());
  EXPECT_TRUE(std::isinf(BruteForceMakespanS(req)));
}

TEST(BruteForce, TwoEqualShortSequencesRunOnSeparateRanks) {
  PlanRequest req;
  req.cluster = {2, 2};
  req.cost = SimpleModel();
  req.cost.alpha3 = 1e9;  // communication prohibitively expensive
  req.sequences = {{4000, 0.0}, {4000, 0.0}};
  const BruteForceResult r = BruteForceOptimum(req);
  ASSERT_EQ(r.groups.size(), 2u);
  EXPECT_EQ(r.groups[0].degree, 1);
  EXPECT_EQ(r.groups[1].degree, 1);
  EXPECT_DOUBLE_EQ(r.makespan_s, ReferenceGroupTimeS(req.cost, req.cluster,
                                                     req.sequences, {0}, 0, 1));
}

// R = 4: a 3-rank and a 4-rank group on N = 8 must each stay on one node to
// avoid the very slow inter-node link.
TEST(BruteForce, GroupsAvoidStraddlingNodes) {
  PlanRequest req;
  req.cluster = {8, 4};
  req.cost = SimpleModel();
  req.cost.alpha1 = 0;  // nothing to overlap: communication shows in full
  req.cost.alpha3 = 1e5;
  req.cost.bw_inter_node = 1e7;
  req.sequences = {{29000, 0.0}, {39000, 0.0}};  // d_min 3 and 4
  const BruteForceResult r = BruteForceOptimum(req);
  ASSERT_EQ(r.groups.size(), 2u);
  for (const auto& g : r.groups) {
    EXPECT_EQ(g.first_rank / 4, (g.first_rank + g.degree - 1) / 4);
  }
}

// Every solution it returns is consistent: disjoint in-range ranges, memory
// respected, times recomputed, makespan = max time; and no random feasible
// placement beats it.
TEST(BruteForce, SolutionIsConsistentAndBeatsRandomPlans) {
  std::mt19937_64 rng(11);
  RandomInstanceOptions opt;
  opt.max_sequences = 5;
  opt.max_ranks = 8;
  for (int i = 0; i < 300; ++i) {
    PlanRequest req = RandomRequest(rng, opt);
    const BruteForceResult r = BruteForceOptimum(req);
    ASSERT_TRUE(r.feasible()) << i;
    std::vector<int> seen(req.sequences.size(), 0);
    std::vector<int> used(req.cluster.num_ranks, 0);
    double makespan = 0;
    for (const auto& g : r.groups) {
      double sum_s = 0;
      for (int k : g.sequences) {
        ++seen[k];
        sum_s += static_cast<double>(req.sequences[k].length_tokens);
      }
      for (int p = g.first_rank; p < g.first_rank + g.degree; ++p) {
        ASSERT_LT(p, req.cluster.num_ranks);
        ASSERT_EQ(used[p]++, 0);
      }
      EXPECT_LE(req.cost.mem_static + req.cost.mem_per_token * sum_s / g.degree,
                req.cost.mem_capacity);
      EXPECT_DOUBLE_EQ(
          g.time_s, ReferenceGroupTimeS(req.cost, req.cluster, req.sequences,
                                        g.sequences, g.first_rank, g.degree));
      makespan = std::max(makespan, g.time_s);
    }
    for (int c : seen) EXPECT_EQ(c, 1);
    EXPECT_DOUBLE_EQ(makespan, r.makespan_s);
    // Random plan: each sequence alone, degrees d_min.., packed left to right.
    std::vector<int> members(req.sequences.size());
    for (size_t k = 0; k < members.size(); ++k)
      members[k] = static_cast<int>(k);
    for (int d = 1; d <= req.cluster.num_ranks; ++d) {
      double sum_s = 0;
      for (const auto& s : req.sequences)
        sum_s += static_cast<double>(s.length_tokens);
      if (req.cost.mem_static + req.cost.mem_per_token * sum_s / d >
          req.cost.mem_capacity)
        continue;
      EXPECT_LE(r.makespan_s,
                ReferenceGroupTimeS(req.cost, req.cluster, req.sequences,
                                    members, 0, d) *
                    (1 + 1e-12));
    }
  }
}

}  // namespace
}  // namespace fcp::testing
