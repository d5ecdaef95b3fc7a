// End-to-end planner properties: validity, the lower bound, brute force,
// fcp vs fcp-paper, placement, micro-batches, infeasibility, validator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "planner/bfd.h"
#include "planner/microbatch.h"
#include "planner/placement.h"
#include "planner/realize.h"
#include "testing/brute_force.h"
#include "testing/random_batch.h"
#include "testing/sample_size.h"

namespace fcp {
namespace {

PlanRequest PresetRequest(const std::vector<int64_t>& lengths, int ranks = 64,
                          int per_node = 16) {
  PlanRequest r;
  r.cluster = {ranks, per_node};
  ClusterPreset c = *FindClusterPreset("ascend910c-4x16");
  c.num_ranks = ranks;
  r.cost = DeriveCostModel(*FindModelPreset("qwen3-8b"), c);
  for (int64_t len : lengths) r.sequences.push_back({len, 0.0});
  return r;
}

// LowerBoundMs against its definition evaluated for every sequence:
// max(work / N + beta1, max over sequences that fit on N ranks of
// min_{d >= d_min} T({k}, d)), the all-to-all time included when asked. It
// picks candidates (the longest sequence per eta value, or a sort when there
// are many values or an infeasible candidate); this checks that the picking
// loses nothing: few eta values, more than 64 values, infeasible sequences.
TEST(PlannerTest, LowerBoundEqualsItsDefinition) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = seed % 3 == 0 ? 120 : 30;
    opt.max_ranks = 48;
    opt.one_micro_batch_feasible = false;
    PlanRequest req = testing::RandomRequest(rng, opt);
    for (Sequence& s : req.sequences) {
      if (seed % 3 == 0)
        s.eta = static_cast<double>(rng() % 1000) / 1000;  // many values
      if (seed % 5 == 0 && rng() % 4 == 0)
        s.length_tokens *= 64;  // some may not fit
    }
    const CostModel& cm = req.cost;
    const ModelShape shape = req.model.value_or(ModelShape{});
    for (bool all_to_all : {false, true}) {
      double work = 0, longest = 0;
      for (const Sequence& s : req.sequences) {
        const GroupLoad load = GroupLoad::Of(s);
        work += cm.alpha1 * load.sum_attn + cm.alpha2 * load.sum_tokens;
        const int64_t d_min = MinDegree(cm, load);
        double best = std::numeric_limits<double>::infinity();
        for (int64_t d = d_min; d <= req.cluster.num_ranks; ++d) {
          best = std::min(
              best, GroupTimeBestS(cm, req.cluster, load, static_cast<int>(d)));
          if (all_to_all) {
            // The best all-to-all bandwidth any placement could give: a rank
            // with `same` of its d - 1 peers on its node, both links at once.
            double bw = cm.bw_intra_node;  // d = 1 moves nothing
            if (d > 1) {
              bw = 0;
              for (int64_t same = 0;
                   same < std::min<int64_t>(d, req.cluster.ranks_per_node);
                   ++same) {
                bw = std::max(bw, (d - 1.0) / std::max(same / cm.bw_intra_node,
                                                       (d - 1.0 - same) /
                                                           cm.bw_inter_node));
              }
            }
            best = std::min(best, AllToAllGroupTimeS(cm, shape, load,
                                                     static_cast<int>(d), bw));
          }
        }
        if (d_min <= req.cluster.num_ranks) longest = std::max(longest, best);
      }
      const double want =
          1000.0 * std::max(work / req.cluster.num_ranks + cm.beta1, longest);
      EXPECT_NEAR(LowerBoundMs(req, all_to_all), want, 1e-9 * want)
          << "seed " << seed;
    }
  }
}

TEST(PlannerTest, PlansAreValidAndNeverBelowTheBoundOnRandomBatches) {
  for (uint64_t seed = 1; seed <= testing::SampleSize(1500); ++seed) {
    std::mt19937_64 rng(seed);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 40;
    opt.max_ranks = 64;
    opt.one_micro_batch_feasible = false;
    const PlanRequest req = testing::RandomRequest(rng, opt);
    for (const char* strategy : {"fcp", "fcp-paper"}) {
      const Plan plan = MakePlan(req, {.strategy = strategy});
      if (plan.status == PlanStatus::kInfeasible) {
        ASSERT_GE(plan.infeasible_sequence, 0);
        continue;
      }
      ASSERT_EQ(ValidatePlan(req, plan), "") << strategy << " seed " << seed;
      ASSERT_GE(plan.est_ms, plan.lower_bound_ms * (1 - 1e-9))
          << strategy << " seed " << seed;
    }
  }
}

// The plan estimate, independently: the longest path through the groups,
// where a group follows the previous group (in micro-batch order) of each of
// its ranks. Solved by relaxing every group until nothing changes, visiting
// the groups last micro-batch first (order-independent fixed point).
double LongestPathMs(int num_ranks, const std::vector<MicroBatchPlan>& mbs) {
  struct Node {
    double est;
    std::vector<int> preds;
  };
  std::vector<Node> nodes;
  std::vector<int> last(num_ranks, -1);
  for (const auto& mb : mbs) {
    for (const auto& g : mb.groups) {
      Node node{g.est_ms, {}};
      for (int r : g.ranks) {
        if (last[r] >= 0) node.preds.push_back(last[r]);
      }
      for (int r : g.ranks) last[r] = static_cast<int>(nodes.size());
      nodes.push_back(std::move(node));
    }
  }
  std::vector<double> finish(nodes.size(), 0.0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = nodes.size(); i-- > 0;) {
      double start = 0;
      for (int p : nodes[i].preds) start = std::max(start, finish[p]);
      if (start + nodes[i].est != finish[i])
        finish[i] = start + nodes[i].est, changed = true;
    }
  }
  return finish.empty() ? 0.0 : *std::max_element(finish.begin(), finish.end());
}

TEST(PlannerTest, PlanEstimateIsTheListScheduleMakespan) {
  // Every strategy's est_ms is the makespan of its groups with no barrier
  // between micro-batches: the longest path above, at least the largest
  // micro-batch and at most their sum.
  int below_sum = 0, checked = 0;
  for (uint64_t seed = 1; seed <= testing::SampleSize(300); ++seed) {
    std::mt19937_64 rng(seed * 977);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 40;
    opt.max_ranks = 32;
    opt.one_micro_batch_feasible = false;
    const PlanRequest req = testing::RandomRequest(rng, opt);
    for (const char* strategy :
         {"fcp", "fcp-paper", "megatron", "deepspeed", "bytescale"}) {
      const Plan plan = MakePlan(req, {.strategy = strategy});
      if (plan.status != PlanStatus::kOk) continue;
      ++checked;
      double largest = 0, sum = 0;
      for (const auto& mb : plan.micro_batches) {
        largest = std::max(largest, mb.est_ms);
        sum += mb.est_ms;
      }
      const double want =
          LongestPathMs(req.cluster.num_ranks, plan.micro_batches);
      ASSERT_NEAR(plan.est_ms, want, 1e-9 * want)
          << strategy << " seed " << seed;
      ASSERT_GE(plan.est_ms, largest * (1 - 1e-12))
          << strategy << " seed " << seed;
      ASSERT_LE(plan.est_ms, sum * (1 + 1e-12)) << strategy << " seed " << seed;
      below_sum += plan.est_ms < sum * (1 - 1e-6);
    }
  }
  std::printf(
      "plan estimate below the sum of micro-batch maxima on %d of %d plans\n",
      below_sum, checked);
  EXPECT_GT(checked, testing::SampleSize(500));
  EXPECT_GT(below_sum, 0);  // the barrier-free estimate must actually differ
}

TEST(PlannerTest, FcpIsNeverWorseThanFcpPaper) {
  // Half the batches need several micro-batches, where the estimate is a list
  // schedule (fcp keeps fcp-paper's own plan among its candidates there).
  // The seeds after 1500 have N not a multiple of R (N = 17, 26, 29, 26, 19,
  // 31 ranks on nodes of 8, 8, 16, 16, 16, 16) and one micro-batch; out of
  // 60,000 seeds they were the ones where fcp's allocation packed the nodes
  // worse than fcp-paper's, e.g. seed 27325: degrees 8 8 5 5 on nodes of
  // 8 8 8 2 ranks, 13865 ms against fcp-paper's 13359 ms (8 4 3 3).
  std::vector<uint64_t> seeds;
  for (uint64_t seed = 1; seed <= testing::SampleSize(1500); ++seed)
    seeds.push_back(seed);
  for (uint64_t seed : {19948, 27325, 37118, 43497, 44670, 50462})
    seeds.push_back(seed);
  int strictly_better = 0, multi = 0;
  for (uint64_t seed : seeds) {
    std::mt19937_64 rng(seed * 31);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 30;
    opt.max_ranks = 32;
    opt.one_micro_batch_feasible = seed % 2 == 0;
    const PlanRequest req = testing::RandomRequest(rng, opt);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    const Plan paper = MakePlan(req, {.strategy = "fcp-paper"});
    ASSERT_EQ(fcp.status, paper.status);
    if (fcp.status != PlanStatus::kOk) continue;
    ASSERT_LE(fcp.est_ms, paper.est_ms * (1 + 1e-12)) << "seed " << seed;
    strictly_better += fcp.est_ms < paper.est_ms * (1 - 1e-6);
    multi += paper.micro_batches.size() > 1;
  }
  // The improvements must actually matter.
  EXPECT_GT(strictly_better, testing::SampleSize(100));
  EXPECT_GT(multi, testing::SampleSize(100));
}

TEST(PlannerTest, FullNodeAllocationHelpsOnlyWhereTheLastNodeIsPartial) {
  // RealizeGrouping with the full nodes' allocation as a further candidate:
  // its placed makespan is the largest group time on the ranks it placed the
  // group on (recomputed here from the plan), never above the makespan
  // without that candidate, identical when every node is full, and lower on
  // some batches with a partial last node.
  int partial = 0, lower = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    std::mt19937_64 rng(seed * 13);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 30;
    opt.max_ranks = 32;
    opt.with_model = false;  // ring groups only: the recomputation below
    const PlanRequest req = testing::RandomRequest(rng, opt);
    std::vector<int> all(req.sequences.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    const auto groups =
        planner::BestFitDecreasing(req.sequences, all, req.cost);
    const auto plain =
        planner::RealizeGrouping(req, groups, {.topology_aware = true});
    const auto full = planner::RealizeGrouping(
        req, groups, {.topology_aware = true, .full_nodes_too = true});
    ASSERT_EQ(plain.has_value(), full.has_value()) << "seed " << seed;
    if (!full) continue;
    double placed_s = 0;
    std::vector<int> owner(req.cluster.num_ranks, -1);
    for (const GroupPlan& g : full->micro_batch.groups) {
      GroupLoad load;
      for (int i : g.sequences) load.Add(req.sequences[i]);
      for (int r : g.ranks) {
        ASSERT_TRUE(r >= 0 && r < req.cluster.num_ranks && owner[r] < 0)
            << "seed " << seed;
        owner[r] = 0;
      }
      placed_s = std::max(
          placed_s, GroupTimeOnRanksS(req.cost, req.cluster, load, g.ranks));
    }
    ASSERT_NEAR(full->placed_makespan_s, placed_s, 1e-9 * placed_s)
        << "seed " << seed;
    if (req.cluster.num_ranks % req.cluster.ranks_per_node == 0) {
      ASSERT_EQ(full->placed_makespan_s, plain->placed_makespan_s)
          << "seed " << seed;
      continue;
    }
    ++partial;
    ASSERT_LE(full->placed_makespan_s, plain->placed_makespan_s)
        << "seed " << seed;
    lower += full->placed_makespan_s < plain->placed_makespan_s * (1 - 1e-9);
  }
  std::printf(
      "full-node allocation lower on %d of %d batches with a partial node\n",
      lower, partial);
  EXPECT_GT(lower, 0);
}

TEST(PlannerTest, OneMicroBatchPlansAreNeverBelowBruteForce) {
  // Both planners can only be at or above the exact optimum of the
  // one-micro-batch problem when they use one micro-batch.
  int checked = 0;
  double fcp_gap_sum = 0, paper_gap_sum = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed * 101);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 6;
    opt.max_ranks = 8;
    PlanRequest req = testing::RandomRequest(rng, opt);
    // The oracle enumerates ring groups; without a model shape fcp plans ring
    // groups only (all-to-all groups: AllToAllOnlyWhereTheModelSaysFaster).
    req.model.reset();
    const double exact_ms = 1000 * testing::BruteForceMakespanS(req);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    const Plan paper = MakePlan(req, {.strategy = "fcp-paper"});
    if (fcp.micro_batches.size() != 1 || paper.micro_batches.size() != 1)
      continue;
    ++checked;
    ASSERT_GE(fcp.est_ms, exact_ms * (1 - 1e-9)) << "seed " << seed;
    ASSERT_GE(paper.est_ms, exact_ms * (1 - 1e-9)) << "seed " << seed;
    ASSERT_GE(exact_ms, fcp.lower_bound_ms * (1 - 1e-9)) << "seed " << seed;
    fcp_gap_sum += fcp.est_ms / exact_ms - 1;
    paper_gap_sum += paper.est_ms / exact_ms - 1;
  }
  ASSERT_GT(checked, 100);
  EXPECT_LE(fcp_gap_sum, paper_gap_sum);
}

TEST(PlannerTest, VisionTokensArePricedAsTheBruteForcePricesThem) {
  // MLLM batches (vision tokens pay alpha2_vision on top of alpha2): fcp's
  // estimate is never below the exact optimum of the independent oracle, so
  // it does not leave the vision encoder out, and stays close to it.
  int checked = 0;
  double gap_sum = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed * 103);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 6;
    opt.max_ranks = 8;
    opt.vision_probability = 0.7;
    PlanRequest req = testing::RandomRequest(rng, opt);
    req.model.reset();  // ring groups only, as the oracle enumerates
    const double exact_ms = 1000 * testing::BruteForceMakespanS(req);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    if (fcp.micro_batches.size() != 1) continue;
    ++checked;
    ASSERT_GE(fcp.est_ms, exact_ms * (1 - 1e-9)) << "seed " << seed;
    gap_sum += fcp.est_ms / exact_ms - 1;
  }
  ASSERT_GT(checked, 100);
  std::printf(
      "vision batches: fcp %.4f %% above the exact optimum on average\n",
      100 * gap_sum / checked);
  EXPECT_LE(gap_sum / checked, 0.01);
}

TEST(PlannerTest, ShortSequencesWithSpareRanksGetTheirOwnGroups) {
  // 4 short sequences on 8 single-rank nodes: BFD merges them into one atomic
  // group (they fit one rank's memory), which then pays inter-node ring
  // traffic; fcp splits them so that less traffic crosses the slow links.
  const PlanRequest req = PresetRequest({4096, 4096, 4096, 4096}, 8, 1);
  const Plan paper = MakePlan(req, {.strategy = "fcp-paper"});
  const Plan fcp = MakePlan(req, {.strategy = "fcp"});
  ASSERT_EQ(paper.micro_batches.size(), 1u);
  EXPECT_EQ(paper.micro_batches[0].groups.size(), 1u);
  EXPECT_GE(fcp.micro_batches[0].groups.size(), 2u);
  EXPECT_LT(fcp.est_ms, 0.9 * paper.est_ms);
  // And fcp reaches the exact optimum here (brute force over all groupings).
  EXPECT_NEAR(fcp.est_ms, 1000 * testing::BruteForceMakespanS(req),
              1e-9 * fcp.est_ms);
}

TEST(PlannerTest, InfeasibleSequenceIsAResultNamingIt) {
  const PlanRequest req = PresetRequest({1000, int64_t{1} << 30, 2000}, 4, 4);
  const Plan plan = MakePlan(req);
  EXPECT_EQ(plan.status, PlanStatus::kInfeasible);
  EXPECT_EQ(plan.infeasible_sequence, 1);
  EXPECT_NE(plan.message.find("sequences[1]"), std::string::npos);
}

TEST(PlannerTest, BadInputThrowsNamingTheField) {
  PlanRequest req = PresetRequest({1000, 0, 2000});
  try {
    MakePlan(req);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "sequences[1].length");
  }
  req = PresetRequest({1000, 1000});
  EXPECT_THROW(MakePlan(req, {.strategy = "nope"}), InputError);
  req.cluster.ranks_per_node = 0;
  EXPECT_THROW(MakePlan(req), InputError);
  req = PresetRequest(std::vector<int64_t>{});
  EXPECT_THROW(MakePlan(req), InputError);
}

TEST(PlannerTest, MicroBatchesAreFeasibleAndBalanced) {
  // 48 sequences of 48k tokens: far more than one micro-batch of 8 ranks holds.
  const PlanRequest req = PresetRequest(std::vector<int64_t>(48, 48000), 8, 8);
  const auto mbs =
      planner::SplitMicroBatches(req.sequences, req.cost, req.cluster);
  ASSERT_GT(mbs.size(), 1u);
  size_t lo = 1000, hi = 0;
  for (const auto& mb : mbs) {
    int64_t ranks = 0;
    for (const auto& bin :
         planner::BestFitDecreasing(req.sequences, mb, req.cost)) {
      GroupLoad load;
      for (int i : bin) load.Add(req.sequences[i]);
      ranks += MinDegree(req.cost, load);
    }
    EXPECT_LE(ranks, 8);
    lo = std::min(lo, mb.size());
    hi = std::max(hi, mb.size());
  }
  EXPECT_LE(hi - lo, 1u);  // identical sequences: counts differ by at most one
  const Plan plan = MakePlan(req);
  EXPECT_EQ(ValidatePlan(req, plan), "");
}

// The micro-batch count search (issue 30): the count is one that BFD fits,
// and a count at most CountResolution below it is rejected (or it is the
// memory bound), checked against SplitIntoMicroBatches at every count below.
// Batches of long sequences on 8 ranks need 20-200 micro-batches, BFD's
// fragmentation a few to tens more than memory; the search this replaced
// stepped by one four times, then by an eighth of the count.
TEST(PlannerTest, MicroBatchCountIsWithinItsResolutionOfARejectedCount) {
  std::mt19937_64 rng(30);
  int above_memory = 0;
  for (int trial = 0; trial < 24; ++trial) {
    std::lognormal_distribution<double> length(8.5 + 0.05 * (trial % 20), 1.75);
    std::vector<int64_t> lengths(200 + 50 * (trial % 17));
    for (int64_t& s : lengths)
      s = static_cast<int64_t>(std::clamp(length(rng), 1.0, 120000.0));
    const PlanRequest req = PresetRequest(lengths, 8, 2 << (trial % 3));
    const int count = static_cast<int>(
        planner::SplitMicroBatches(req.sequences, req.cost, req.cluster)
            .size());
    const int fewest =
        planner::MinMicroBatches(req.sequences, req.cost, req.cluster);
    ASSERT_GE(count, fewest);
    ASSERT_FALSE(planner::SplitIntoMicroBatches(req.sequences, req.cost,
                                                req.cluster, count)
                     .empty());
    if (count == fewest) continue;
    ++above_memory;
    bool bracketed = false;
    for (int rejected = count - 1;
         rejected >= fewest &&
         count - rejected <= planner::CountResolution(rejected);
         --rejected) {
      bracketed |= planner::SplitIntoMicroBatches(req.sequences, req.cost,
                                                  req.cluster, rejected)
                       .empty();
    }
    EXPECT_TRUE(bracketed) << "trial " << trial << ": " << count
                           << " micro-batches, memory bound " << fewest;
  }
  EXPECT_GT(above_memory, 12);
}

// First fit decreasing by size, by scans (LptPack's fallback): the largest
// sequence not yet placed (the earliest in `order` among equal sizes) into
// the first bin with room; empty where none has.
std::vector<std::vector<int>> FirstFitBySizeByScan(
    const std::vector<int>& order, const std::vector<double>& size,
    double capacity, int count) {
  std::vector<bool> placed(order.size(), false);
  std::vector<std::vector<int>> bins(count);
  std::vector<double> used(count, 0.0);
  for (size_t step = 0; step < order.size(); ++step) {
    size_t next = order.size();
    for (size_t j = 0; j < order.size(); ++j) {
      if (!placed[j] &&
          (next == order.size() || size[order[j]] > size[order[next]])) {
        next = j;
      }
    }
    placed[next] = true;
    const int i = order[next];
    int b = 0;
    while (b < count && !bins[b].empty() && used[b] + size[i] > capacity) ++b;
    if (b == count) return {};
    bins[b].push_back(i);
    used[b] += size[i];
  }
  return bins;
}

// The least-loaded bin with room, by a scan of every bin (the oracle of
// LptPack, which switches from a heap to a treap mid-packing); empty where no
// bin has room.
std::vector<std::vector<int>> LptOnlyByScan(const std::vector<int>& order,
                                            const std::vector<double>& work,
                                            const std::vector<double>& size,
                                            double capacity, int count) {
  std::vector<std::vector<int>> bins(count);
  std::vector<double> load(count, 0.0), used(count, 0.0);
  for (int i : order) {
    int chosen = -1;
    for (int b = 0; b < count; ++b) {
      const bool room = bins[b].empty() || used[b] + size[i] <= capacity;
      if (room && (chosen < 0 || load[b] < load[chosen])) chosen = b;
    }
    if (chosen < 0) return {};
    bins[chosen].push_back(i);
    load[chosen] += work[i];
    used[chosen] += size[i];
  }
  return bins;
}

TEST(MicroBatchTest, LptPackMatchesTheScanOfEveryBin) {
  std::mt19937 rng(30);
  int switched_or_failed = 0, by_size = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // Every tenth packing into one bin, of one to three sequences half of
    // those times (an empty bin takes a sequence larger than its capacity).
    const bool one_bin = trial % 10 == 0;
    const int k = one_bin && trial % 20 == 0
                      ? 1 + static_cast<int>(rng() % 3)
                      : 1 + static_cast<int>(rng() % 300);
    const int count = one_bin ? 1 : 1 + static_cast<int>(rng() % 40);
    std::vector<double> work(k), size(k);
    double total = 0;
    for (int i = 0; i < k; ++i) {
      work[i] = static_cast<double>(rng() % 8);  // ties and zeros
      size[i] = 1.0 + static_cast<double>(rng() % 100);
      total += size[i];
    }
    std::vector<int> order(k);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return work[a] > work[b]; });
    // From roomy to so tight that some sequence fits no bin.
    const double capacity =
        total / count * (0.9 + 0.02 * static_cast<double>(rng() % 20));
    const auto packed = planner::LptPack(order, work, size, capacity, count);
    const auto lpt = LptOnlyByScan(order, work, size, capacity, count);
    EXPECT_EQ(packed, !lpt.empty()
                          ? lpt
                          : FirstFitBySizeByScan(order, size, capacity, count))
        << "trial " << trial;
    switched_or_failed += packed.empty() || capacity < total / count * 1.05;
    by_size += lpt.empty() && !packed.empty();
  }
  EXPECT_GT(switched_or_failed, 40);  // tight packings were drawn
  EXPECT_GT(by_size, 0);              // and some only first fit by size packs
}

TEST(PlacementTest, SmallGroupsStayInsideNodesWhenPossible) {
  // Degrees 3,3,2,2,2,2,1,1 on 2 nodes of 8: a node-aligned packing exists.
  const std::vector<int> degrees = {3, 2, 1, 3, 2, 2, 2, 1};
  const Cluster cluster{16, 8};
  const auto first =
      planner::PlaceGroups(degrees, cluster, [&](int /*p*/, int f, int d) {
        return RangeOnOneNode(cluster, f, d) ? 1.0 : 2.0;
      });
  std::vector<char> used(16, 0);
  for (size_t p = 0; p < degrees.size(); ++p) {
    EXPECT_TRUE(RangeOnOneNode(cluster, first[p], degrees[p])) << "group " << p;
    for (int r = first[p]; r < first[p] + degrees[p]; ++r)
      EXPECT_EQ(used[r]++, 0);
  }
}

// Lanes of 12, 5 and 4 ranks on 23 ranks of 4-rank nodes: no node has room
// for the 4 behind the 12 and the 5, so the node-aligned packing fails; laid
// out aligned degrees first (12, 4, then 5), the 4 fills a node of its own
// (issue 32: behind the 5 it straddled two nodes, a ring 2x slower).
TEST(PlacementTest, AlignedDegreesFirstWhereNoPackingKeepsThemInNodes) {
  const std::vector<int> degrees = {5, 12, 4};
  const Cluster cluster{23, 4};
  const auto first =
      planner::PlaceGroups(degrees, cluster, [&](int /*p*/, int f, int d) {
        return d <= 4 && !RangeOnOneNode(cluster, f, d) ? 2.0 : 1.0;
      });
  EXPECT_EQ(first, (std::vector<int>{16, 0, 12}));
}

TEST(PlacementTest, RanksPerNodeNeedNotDivideN) {
  const std::vector<int> degrees = {5, 3, 2};
  const Cluster cluster{10, 4};
  const auto first =
      planner::PlaceGroups(degrees, cluster, [](int, int, int) { return 1.0; });
  std::vector<char> used(10, 0);
  for (size_t p = 0; p < degrees.size(); ++p) {
    for (int r = first[p]; r < first[p] + degrees[p]; ++r) {
      ASSERT_GE(r, 0);
      ASSERT_LT(r, 10);
      EXPECT_EQ(used[r]++, 0);
    }
  }
}

// A bound to beat changes nothing but the work (RealizeGrouping's rank
// moves keep only a layout below it): on random degrees and placed times,
// the layout and max time of the unbounded call wherever that max is below
// the bound, and the bound itself (no layout kept) wherever it is not.
TEST(PlacementTest, ALayoutReachingTheBoundIsGivenUp) {
  std::mt19937_64 rng(4711);
  int kept = 0, given_up = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Cluster cluster{static_cast<int>(4 + rng() % 29),
                          static_cast<int>(1 + rng() % 8)};
    std::vector<int> degrees;
    for (int left = cluster.num_ranks; left > 0 && rng() % 6 != 0;) {
      degrees.push_back(static_cast<int>(1 + rng() % left));
      left -= degrees.back();
    }
    const uint64_t salt = rng();
    // Slower across nodes, and different per group and start.
    const auto placed_time = [&](int p, int f, int d) {
      const double base = 1.0 + static_cast<double>((salt >> (p % 32)) % 7);
      return (RangeOnOneNode(cluster, f, d) ? 1.0 : 1.5) * base + 0.01 * f;
    };
    double unbounded_s = 0;
    const auto layout =
        planner::PlaceGroups(degrees, cluster, placed_time, &unbounded_s);
    const double beat_s = unbounded_s * (0.9 + 0.05 * (rng() % 5));
    double bounded_s = 0;
    const auto bounded =
        planner::PlaceGroups(degrees, cluster, placed_time, &bounded_s, beat_s);
    if (unbounded_s < beat_s) {
      ++kept;
      EXPECT_EQ(bounded, layout) << "trial " << trial;
      EXPECT_EQ(bounded_s, unbounded_s) << "trial " << trial;
    } else {
      ++given_up;
      EXPECT_EQ(bounded_s, beat_s) << "trial " << trial;
    }
  }
  EXPECT_GT(kept, 100);
  EXPECT_GT(given_up, 100);
}

TEST(ValidatorTest, RejectsBrokenPlans) {
  const PlanRequest req = PresetRequest({8192, 4096, 2048, 1024}, 8, 8);
  const Plan good = MakePlan(req);
  ASSERT_EQ(ValidatePlan(req, good), "");
  auto broken = [&](auto mutate) {
    Plan p = good;
    mutate(p);
    return ValidatePlan(req, p);
  };
  // A sequence twice / missing.
  EXPECT_NE(broken([](Plan& p) {
              p.micro_batches[0].groups[0].sequences.push_back(
                  p.micro_batches[0].groups.back().sequences[0]);
            }),
            "");
  EXPECT_NE(broken([](Plan& p) {
              auto& g = p.micro_batches[0].groups;
              if (g.back().sequences.size() > 1)
                g.back().sequences.pop_back();
              else
                g.pop_back();
            }),
            "");
  // Overlapping ranks, a rank out of range, an empty group.
  EXPECT_NE(broken([](Plan& p) {
              auto& mb = p.micro_batches[0];
              mb.groups.push_back(
                  {{mb.groups[0].ranks[0]}, {}, CommKind::kRing, 0, 0});
            }),
            "");
  EXPECT_NE(broken([](Plan& p) { p.micro_batches[0].groups[0].ranks[0] = 8; }),
            "");
  EXPECT_NE(broken([](Plan& p) { p.micro_batches[0].groups[0].ranks.clear(); }),
            "");
  // Memory over capacity: everything on one rank with a tiny capacity.
  PlanRequest tight = req;
  tight.cost.mem_capacity = tight.cost.mem_static + 1;
  EXPECT_NE(ValidatePlan(tight, good), "");
  // Inconsistent totals.
  EXPECT_NE(broken([](Plan& p) { p.est_ms *= 2; }), "");
  // The former estimate (sum of micro-batch maxima) where ranks 4-7 need not
  // wait for ranks 0-3 between the micro-batches: the plan is shorter.
  Plan two;
  two.micro_batches.push_back(
      {{GroupPlan{{0, 1, 2, 3}, {0}, CommKind::kRing, 0, 0},
        GroupPlan{{4, 5, 6, 7}, {1}, CommKind::kRing, 0, 0}},
       0});
  two.micro_batches.push_back(
      {{GroupPlan{{4, 5, 6, 7}, {2, 3}, CommKind::kRing, 0, 0}}, 0});
  EvaluatePlan(req, two);
  ASSERT_EQ(ValidatePlan(req, two), "");
  const auto& mbs = two.micro_batches;
  const double t0 = mbs[0].groups[0].est_ms, t1 = mbs[0].groups[1].est_ms;
  const double t23 = mbs[1].groups[0].est_ms;
  EXPECT_NEAR(two.est_ms, std::max(t0, t1 + t23), 1e-9 * two.est_ms);
  ASSERT_LT(two.est_ms, mbs[0].est_ms + mbs[1].est_ms);
  two.est_ms = mbs[0].est_ms + mbs[1].est_ms;
  EXPECT_NE(ValidatePlan(req, two), "");
}

TEST(PlannerTest, AllToAllOnlyWhereTheModelSaysFaster) {
  // fcp runs a placed group as Ulysses all-to-all exactly when its degree
  // divides the query heads and the cost model prices it below the ring on
  // the same ranks, so with a model shape its plan
  // is never worse than the ring-only plan of the same batch (no shape).
  int switched = 0, groups = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 12;
    opt.max_ranks = 32;
    const PlanRequest req = testing::RandomRequest(rng, opt);
    ASSERT_TRUE(req.model.has_value());
    const Plan plan = MakePlan(req, {.strategy = "fcp"});
    if (plan.status != PlanStatus::kOk) continue;
    PlanRequest ring_only = req;
    ring_only.model.reset();
    const Plan ring_plan = MakePlan(ring_only, {.strategy = "fcp"});
    ASSERT_EQ(ring_plan.status, PlanStatus::kOk);
    EXPECT_LE(plan.est_ms, ring_plan.est_ms * (1 + 1e-12)) << "seed " << seed;
    for (const MicroBatchPlan& mb : plan.micro_batches) {
      for (const GroupPlan& g : mb.groups) {
        if (g.degree() < 2) {
          EXPECT_EQ(g.comm, CommKind::kRing);
          continue;
        }
        ++groups;
        GroupLoad load;
        for (int i : g.sequences) load.Add(req.sequences[i]);
        // Independent re-computation of both prices on the group's ranks.
        bool one_node = true;
        for (int r : g.ranks)
          one_node &= r / req.cluster.ranks_per_node ==
                      g.ranks[0] / req.cluster.ranks_per_node;
        const Link link = one_node ? Link::kIntraNode : Link::kInterNode;
        const double ring = GroupTimeS(req.cost, load, g.degree(), link);
        // All-to-all bandwidth: the rank with the fewest same-node peers
        // sends 1/(d-1) of its bytes to each peer over both links at once.
        std::map<int, int> per_node;
        for (int r : g.ranks) ++per_node[r / req.cluster.ranks_per_node];
        int fewest = g.degree();
        for (const auto& [node, count] : per_node)
          fewest = std::min(fewest, count);
        const double same = fewest - 1, other = g.degree() - fewest;
        const double bw =
            (g.degree() - 1) / std::max(same / req.cost.bw_intra_node,
                                        other / req.cost.bw_inter_node);
        const double a2a =
            AllToAllGroupTimeS(req.cost, *req.model, load, g.degree(), bw);
        // No runtime pads heads: an all-to-all degree divides the query heads.
        const bool allowed = req.model->q_heads % g.degree() == 0;
        if (g.comm == CommKind::kAllToAll) {
          ++switched;
          EXPECT_TRUE(allowed) << "seed " << seed << " degree " << g.degree();
          EXPECT_LT(a2a, ring) << "seed " << seed;
          EXPECT_NEAR(g.est_ms, 1000 * a2a, 1e-9 * g.est_ms);
        } else if (allowed) {
          EXPECT_LE(ring, a2a * (1 + 1e-12)) << "seed " << seed;
        }
      }
    }
  }
  std::printf("all-to-all groups: %d of %d groups with d > 1\n", switched,
              groups);
  EXPECT_GT(groups, 50);
}

}  // namespace
}  // namespace fcp
