// Lanes (lanes.h) on fcp's own lane groupings of seeded random batches:
// ChunkLanes' first fit and its balanced split against scans of every group
// (the latter: "longest first onto the group with the least work that has
// memory room, among the 4 lightest"), as many groups as first fit, every
// group within memory and every sequence in exactly one; LaneRankSets at even
// degrees gives disjoint rank sets of degree 1 or even, each at least its
// sequences' d_min.
#include "planner/lanes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "fcp/cost_model.h"
#include "planner/microbatch.h"
#include "testing/random_batch.h"
#include "testing/sample_size.h"

namespace fcp::planner {
namespace {

// Lane p's groups in `mbs` (micro-batch m holds each lane's m-th group; a
// lane is told by its rank set).
std::vector<std::vector<std::vector<int>>> GroupsByLane(
    const std::vector<MicroBatchPlan>& mbs,
    const std::vector<std::vector<int>>& rank_sets) {
  std::map<std::vector<int>, size_t> lane_of;
  for (size_t p = 0; p < rank_sets.size(); ++p) lane_of[rank_sets[p]] = p;
  std::vector<std::vector<std::vector<int>>> out(rank_sets.size());
  for (const MicroBatchPlan& mb : mbs)
    for (const GroupPlan& g : mb.groups)
      out[lane_of.at(g.ranks)].push_back(g.sequences);
  return out;
}

// Longest first, ties in lane order (both scans' order).
void SortLongestFirst(const PlanRequest& req, std::vector<int>& seqs) {
  std::stable_sort(seqs.begin(), seqs.end(), [&](int a, int b) {
    return req.sequences[a].length_tokens > req.sequences[b].length_tokens;
  });
}

// The scan: `count` groups, longest first onto the lightest (least work, then
// lowest index) of the 4 lightest groups that holds it; empty when one fits
// none of them.
std::vector<std::vector<int>> ScanBalanced(const PlanRequest& req,
                                           std::vector<int> seqs, size_t count,
                                           int degree) {
  SortLongestFirst(req, seqs);
  std::vector<double> work(count, 0.0), tokens(count, 0.0);
  std::vector<std::vector<int>> groups(count);
  for (int k : seqs) {
    std::vector<size_t> by_work(count);
    std::iota(by_work.begin(), by_work.end(), 0);
    std::stable_sort(by_work.begin(), by_work.end(),
                     [&](size_t a, size_t b) { return work[a] < work[b]; });
    bool placed = false;
    for (size_t i = 0; i < std::min<size_t>(4, count) && !placed; ++i) {
      const size_t c = by_work[i];
      GroupLoad load;
      load.sum_tokens = tokens[c];
      load.Add(req.sequences[k]);
      if (GroupMemBytes(req.cost, load, degree) > req.cost.mem_capacity)
        continue;
      tokens[c] += static_cast<double>(req.sequences[k].length_tokens);
      work[c] += SequenceWorkS(req.cost, req.sequences[k]);
      groups[c].push_back(k);
      placed = true;
    }
    if (!placed) return {};
  }
  return groups;
}

// First fit by a scan of every open group, longest first (ties in lane
// order); a new group takes any sequence.
std::vector<std::vector<int>> ScanFirstFit(const PlanRequest& req,
                                           std::vector<int> seqs, int degree) {
  SortLongestFirst(req, seqs);
  std::vector<std::vector<int>> groups;
  std::vector<double> tokens;
  for (int k : seqs) {
    size_t c = 0;
    for (; c < groups.size(); ++c) {
      GroupLoad load;
      load.sum_tokens = tokens[c];
      load.Add(req.sequences[k]);
      if (GroupMemBytes(req.cost, load, degree) <= req.cost.mem_capacity) break;
    }
    if (c == groups.size()) groups.emplace_back(), tokens.push_back(0);
    groups[c].push_back(k);
    tokens[c] += static_cast<double>(req.sequences[k].length_tokens);
  }
  return groups;
}

// fcp's lane groupings of the first `seeds` seeded random batches, each
// passed to `check` with its rank sets (LaneRankSets at free degrees) and its
// batch's seed.
void ForEachLaneGrouping(
    const std::function<void(uint64_t, const PlanRequest&, const LaneGrouping&,
                             const std::vector<std::vector<int>>&)>& check,
    int seeds = 150) {
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
    const PlanRequest req = testing::RandomRequestMaybeSync(seed, 7919, 48);
    for (const LaneGrouping& grouping :
         LaneGroupings(req, std::numeric_limits<double>::infinity(),
                       /*dual=*/true, /*multiple_of=*/2)) {
      const auto rank_sets = LaneRankSets(req, grouping.lanes, {});
      if (rank_sets) check(seed, req, grouping, *rank_sets);
    }
  }
}

// ChunkLanes' first fit (a segment tree, and no search at all when the whole
// lane fits) and its balanced split, each against its scan, on lanes that fit
// whole and lanes that do not.
TEST(ChunkLanesTest, SplitsMatchTheScans) {
  int lanes_checked = 0, lanes_split = 0, lanes_balanced = 0;
  ForEachLaneGrouping([&](uint64_t seed, const PlanRequest& req,
                          const LaneGrouping& grouping,
                          const std::vector<std::vector<int>>& rank_sets) {
    const auto first_fit = GroupsByLane(
        ChunkLanes(req, grouping.lanes, rank_sets, Chunking::kFirstFit),
        rank_sets);
    const auto balanced = GroupsByLane(
        ChunkLanes(req, grouping.lanes, rank_sets, Chunking::kBalanced),
        rank_sets);
    for (size_t p = 0; p < grouping.lanes.size(); ++p) {
      const int d = static_cast<int>(rank_sets[p].size());
      ++lanes_checked;
      EXPECT_EQ(first_fit[p], ScanFirstFit(req, grouping.lanes[p], d))
          << "seed " << seed << ", lane " << p;
      lanes_split += first_fit[p].size() > 1;
      ASSERT_EQ(balanced[p].size(), first_fit[p].size()) << "seed " << seed;
      std::vector<int> members;
      for (const std::vector<int>& g : balanced[p]) {
        GroupLoad load;
        for (int k : g) load.Add(req.sequences[k]);
        EXPECT_LE(GroupMemBytes(req.cost, load, d), req.cost.mem_capacity)
            << "seed " << seed;
        members.insert(members.end(), g.begin(), g.end());
      }
      std::vector<int> lane = grouping.lanes[p];
      std::sort(members.begin(), members.end());
      std::sort(lane.begin(), lane.end());
      EXPECT_EQ(members, lane) << "seed " << seed << ", lane " << p;
      if (first_fit[p].size() < 2) continue;
      const auto want =
          ScanBalanced(req, grouping.lanes[p], first_fit[p].size(), d);
      // No room within the tries: the lane keeps its first-fit groups.
      EXPECT_EQ(balanced[p], want.empty() ? first_fit[p] : want)
          << "seed " << seed << ", lane " << p;
      lanes_balanced += !want.empty();
    }
  });
  std::printf("%d lanes, %d in several groups, %d split balanced\n",
              lanes_checked, lanes_split, lanes_balanced);
  EXPECT_GT(lanes_split, 20);
  EXPECT_GT(lanes_balanced, 20);
}

TEST(LaneRankSetsTest, RestrictedDegreesKeepTheirRuleDisjointAndHold) {
  // Each grouping laid out at the degrees it was opened at: even ones, and
  // ones where all-to-all may run (AllToAllAllowed), the rule's oracle.
  int even_lanes = 0, all_to_all_lanes = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    const PlanRequest req = testing::RandomRequestMaybeSync(seed, 7919, 48);
    for (const LaneGrouping& grouping :
         LaneGroupings(req, std::numeric_limits<double>::infinity(),
                       /*dual=*/true, /*multiple_of=*/2)) {
      const LaneDegrees& rule = grouping.degrees;
      if (rule.multiple_of == 1 && !rule.all_to_all_only) continue;
      const auto rank_sets = LaneRankSets(req, grouping.lanes, rule);
      if (!rank_sets) continue;
      std::vector<int> owner(req.cluster.num_ranks, -1);
      for (size_t p = 0; p < rank_sets->size(); ++p) {
        const int d = static_cast<int>((*rank_sets)[p].size());
        EXPECT_TRUE(d == 1 || d % rule.multiple_of == 0)
            << "seed " << seed << ": d " << d;
        EXPECT_TRUE(d == 1 || !rule.all_to_all_only ||
                    AllToAllAllowed(ShapeOf(req), d))
            << "seed " << seed << ": d " << d;
        even_lanes += d > 1 && rule.multiple_of == 2;
        all_to_all_lanes += d > 1 && rule.all_to_all_only;
        for (int k : grouping.lanes[p]) {
          EXPECT_LE(MinDegree(req.cost, GroupLoad::Of(req.sequences[k])), d)
              << "seed " << seed;
        }
        for (int r : (*rank_sets)[p]) {
          ASSERT_TRUE(r >= 0 && r < req.cluster.num_ranks) << "seed " << seed;
          EXPECT_EQ(owner[r], -1) << "seed " << seed << ": rank " << r;
          owner[r] = static_cast<int>(p);
        }
      }
    }
  }
  std::printf("lanes of d > 1: %d even, %d at all-to-all degrees\n", even_lanes,
              all_to_all_lanes);
  EXPECT_GT(even_lanes, 100);
  EXPECT_GT(all_to_all_lanes, 100);
}

// Lane p's time as the plan will have it, priced here group by group: its
// first-fit groups (ChunkLanes) on its ranks, each ring or, where the heads
// allow, all-to-all, whichever is faster (s).
std::vector<double> LaneTimesS(const PlanRequest& req,
                               const std::vector<std::vector<int>>& lanes,
                               const std::vector<std::vector<int>>& rank_sets) {
  std::vector<double> out(lanes.size(), 0.0);
  const auto by_lane =
      GroupsByLane(ChunkLanes(req, lanes, rank_sets), rank_sets);
  for (size_t p = 0; p < lanes.size(); ++p) {
    const std::vector<int>& ranks = rank_sets[p];
    const int d = static_cast<int>(ranks.size());
    for (const std::vector<int>& g : by_lane[p]) {
      GroupLoad load;
      for (int k : g) load.Add(req.sequences[k]);
      double t = GroupTimeOnRanksS(req.cost, req.cluster, load, ranks);
      if (req.model && req.model->kv_heads > 0 && d > 1 &&
          AllToAllDegreeRuns(*req.model, d)) {
        t = std::min(t, AllToAllGroupTimeS(req.cost, *req.model, load, d,
                                           AllToAllBandwidthOnRanks(
                                               req.cost, req.cluster, ranks)));
      }
      out[p] += t;
    }
  }
  return out;
}

bool FitsOnce(const PlanRequest& req, const std::vector<int>& lane, int d) {
  GroupLoad load;
  for (int k : lane) load.Add(req.sequences[k]);
  return GroupMemBytes(req.cost, load, d) <= req.cost.mem_capacity;
}

// Whether no single move of a sequence out of `lanes`' slowest lane (at
// `after`, s per lane) leaves both lanes below the makespan while saving at
// least kPolishMinGainPerRise of what it adds to the other where that ends
// within kPolishRiseHeadroom of the two (PolishLanes' rule; a lane that runs
// as one group is not split). Every lane is a
// destination: meant for at most 9 lanes (PolishLanes tries the 8 fastest).
void ExpectNoSingleMoveLeft(const PlanRequest& req,
                            const std::vector<std::vector<int>>& lanes,
                            const std::vector<std::vector<int>>& rank_sets,
                            const std::vector<double>& after, uint64_t seed) {
  const size_t slow = static_cast<size_t>(
      std::max_element(after.begin(), after.end()) - after.begin());
  const double after_s = after[slow];
  for (size_t i = 0; i < lanes[slow].size(); ++i) {
    const int k = lanes[slow][i];
    for (size_t q = 0; q < lanes.size(); ++q) {
      const int d = static_cast<int>(rank_sets[q].size());
      if (q == slow ||
          MinDegree(req.cost, GroupLoad::Of(req.sequences[k])) > d) {
        continue;
      }
      std::vector<std::vector<int>> moved = lanes;
      moved[slow].erase(moved[slow].begin() + static_cast<long>(i));
      moved[q].push_back(k);
      if (FitsOnce(req, lanes[q], d) && !FitsOnce(req, moved[q], d)) continue;
      const auto t = LaneTimesS(req, moved, rank_sets);
      const double worse_s = std::max(t[slow], t[q]);
      const double gain_s = after_s - worse_s;
      // Not counted where lane q ends clear of the makespan.
      const double rise_s = t[q] > (1 - kPolishRiseHeadroom) * worse_s
                                ? std::max(0.0, t[q] - after[q])
                                : 0.0;
      EXPECT_TRUE(gain_s <= after_s * 1e-9 ||
                  gain_s < kPolishMinGainPerRise * rise_s * (1 + 1e-9))
          << "seed " << seed << ": moving sequence " << k << " to lane " << q
          << " saves " << gain_s << " s for " << rise_s << " s";
    }
  }
}

// Every sequence of `req` in exactly one of `lanes`, each lane on at least
// its sequences' d_min ranks.
void ExpectEachSequenceOnceWithinDMin(
    const PlanRequest& req, const std::vector<std::vector<int>>& lanes,
    const std::vector<std::vector<int>>& rank_sets, uint64_t seed) {
  std::vector<int> seen(req.sequences.size(), 0);
  for (size_t p = 0; p < lanes.size(); ++p) {
    for (int k : lanes[p]) {
      ++seen[k];
      EXPECT_LE(MinDegree(req.cost, GroupLoad::Of(req.sequences[k])),
                static_cast<int64_t>(rank_sets[p].size()))
          << "seed " << seed;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1),
            static_cast<std::ptrdiff_t>(seen.size()))
      << "seed " << seed;
}

// PolishLanes on fcp's lane groupings of seeded random batches, against the
// lanes priced group by group (LaneTimesS): every sequence stays in exactly
// one lane of at least its d_min ranks, the makespan never rises and is the
// one returned, a lane that ran as one group still does, and (with trials to
// spare, on at most 9 lanes) no single move is left (ExpectNoSingleMoveLeft).
TEST(PolishLanesTest, NeverSlowerAndNoSingleMoveLeft) {
  int changed = 0, faster = 0, checked_optimal = 0;
  ForEachLaneGrouping([&](uint64_t seed, const PlanRequest& req,
                          const LaneGrouping& grouping,
                          const std::vector<std::vector<int>>& rank_sets) {
    std::vector<std::vector<int>> lanes = grouping.lanes;
    const std::vector<double> before = LaneTimesS(req, lanes, rank_sets);
    const Polished polished = PolishLanes(req, lanes, rank_sets, 1'000'000);
    const std::vector<double> after = LaneTimesS(req, lanes, rank_sets);
    const double before_s = *std::max_element(before.begin(), before.end());
    const double after_s = *std::max_element(after.begin(), after.end());
    EXPECT_LE(after_s, before_s * (1 + 1e-12)) << "seed " << seed;
    EXPECT_NEAR(polished.makespan_s, after_s, after_s * 1e-9)
        << "seed " << seed;
    changed += polished.changes > 0;
    faster += after_s < before_s * (1 - 1e-9);
    ExpectEachSequenceOnceWithinDMin(req, lanes, rank_sets, seed);
    for (size_t p = 0; p < lanes.size(); ++p) {
      const int d = static_cast<int>(rank_sets[p].size());
      if (FitsOnce(req, grouping.lanes[p], d)) {
        EXPECT_TRUE(FitsOnce(req, lanes[p], d)) << "seed " << seed;
      }
    }
    if (lanes.size() > 9) return;
    ExpectNoSingleMoveLeft(req, lanes, rank_sets, after, seed);
    ++checked_optimal;
  });
  std::printf("%d lane groupings changed, %d faster, %d checked optimal\n",
              changed, faster, checked_optimal);
  EXPECT_GT(faster, 20);
  EXPECT_GT(checked_optimal, 100);
}

// `rank_sets` are disjoint runs of consecutive ranks within [0, num_ranks).
void ExpectDisjointRuns(const std::vector<std::vector<int>>& rank_sets,
                        int num_ranks, uint64_t seed) {
  std::vector<int> owners(num_ranks, 0);
  for (const std::vector<int>& ranks : rank_sets) {
    ASSERT_FALSE(ranks.empty()) << "seed " << seed;
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_EQ(ranks[i], ranks[0] + static_cast<int>(i)) << "seed " << seed;
      ASSERT_GE(ranks[i], 0);
      ASSERT_LT(ranks[i], num_ranks) << "seed " << seed;
      ++owners[ranks[i]];
    }
  }
  EXPECT_LE(*std::max_element(owners.begin(), owners.end()), 1)
      << "seed " << seed;
}

// ReshapeLanes on fcp's polished lane groupings of seeded random batches,
// against the lanes priced group by group (LaneTimesS): what it returns is
// strictly faster than the makespan it was given and is the makespan
// returned; the rank sets are disjoint runs of ranks within N; every
// sequence is in exactly one lane, of at least its d_min ranks; lanes dealt
// again on the same rank sets save at least kPolishMinGainPerRise of what
// they add to the lanes narrower than the slowest that end near the makespan
// (kPolishRiseHeadroom). It must find faster
// lanes on some batches, on the same rank sets and on others (polishing
// alone leaves lanes dealt loosely or at the wrong degrees: issue 32).
TEST(ReshapeLanesTest, FasterValidLanes) {
  int tried = 0, reshaped = 0, dealt_again = 0;
  const auto check = [&](uint64_t seed, const PlanRequest& req,
                         const LaneGrouping& grouping,
                         const std::vector<std::vector<int>>& rank_sets) {
    if (grouping.lanes.size() < 2) return;
    std::vector<std::vector<int>> lanes = grouping.lanes;
    PolishLanes(req, lanes, rank_sets, 1'000'000);
    const std::vector<double> polished = LaneTimesS(req, lanes, rank_sets);
    const double polished_s =
        *std::max_element(polished.begin(), polished.end());
    const WorkOrder work_order = MakeWorkOrder(req.sequences, req.cost);
    ++tried;
    const auto got = ReshapeLanes(req, lanes, rank_sets, polished_s,
                                  work_order.work, work_order.order, {});
    if (!got) return;
    ++reshaped;
    const std::vector<double> after =
        LaneTimesS(req, got->lanes, got->rank_sets);
    const double after_s = *std::max_element(after.begin(), after.end());
    EXPECT_LT(after_s, polished_s) << "seed " << seed;
    EXPECT_NEAR(got->makespan_s, after_s, after_s * 1e-9) << "seed " << seed;
    EXPECT_GE(got->degree_changes, 0);
    EXPECT_LE(got->degree_changes, ReshapeOptions{}.max_rounds);
    if (got->degree_changes == 0) {
      // Dealt again on the same rank sets: PolishLanes' rule for a change
      // holds for the whole deal.
      ASSERT_EQ(got->rank_sets, rank_sets);
      const size_t slow = static_cast<size_t>(
          std::max_element(polished.begin(), polished.end()) -
          polished.begin());
      // On the lanes narrower than the slowest that end within
      // kPolishRiseHeadroom of the makespan.
      double rise_s = 0;
      for (size_t p = 0; p < after.size(); ++p) {
        if (rank_sets[p].size() < rank_sets[slow].size() &&
            after[p] > (1 - kPolishRiseHeadroom) * after_s)
          rise_s += std::max(0.0, after[p] - polished[p]);
      }
      EXPECT_GE(polished_s - after_s,
                kPolishMinGainPerRise * rise_s * (1 - 1e-9))
          << "seed " << seed;
      ++dealt_again;
    }
    ASSERT_EQ(got->lanes.size(), got->rank_sets.size());
    ExpectDisjointRuns(got->rank_sets, req.cluster.num_ranks, seed);
    ExpectEachSequenceOnceWithinDMin(req, got->lanes, got->rank_sets, seed);
  };
  ForEachLaneGrouping(check, testing::SampleSize(150));
  std::printf(
      "reshaped %d of %d polished lane groupings (%d on the same rank sets)\n",
      reshaped, tried, dealt_again);
  EXPECT_GT(reshaped, testing::SampleSize(10));
  EXPECT_GT(dealt_again, 0);
}

// SearchDeal on tiny batches (up to 7 sequences onto 2 or 3 lanes of
// random degrees, memory ample so that every lane runs as one group)
// against every assignment of the sequences to the lanes, priced group by
// group (LaneTimesS): its deal is as fast as the fastest, and none is found
// strictly below that.
TEST(SearchDealTest, ExactOnTinyBatches) {
  int compared = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    testing::RandomInstanceOptions opt;
    opt.max_sequences = 7;
    opt.min_ranks = 3;
    opt.max_ranks = 12;
    PlanRequest req = testing::RandomRequest(rng, opt);
    req.cost.mem_capacity = 1e18;  // every lane one group: SearchDeal exact
    const int n = req.cluster.num_ranks;
    const size_t num_lanes = 2 + rng() % 2;
    // Contiguous rank sets of at least one rank each, some ranks idle.
    std::vector<std::vector<int>> rank_sets(num_lanes);
    int next = 0;
    for (size_t p = 0; p < num_lanes; ++p) {
      const int left = n - next - static_cast<int>(num_lanes - p - 1);
      const int degree = 1 + static_cast<int>(rng() % left);
      for (int r = 0; r < degree; ++r) rank_sets[p].push_back(next++);
    }
    const size_t k = req.sequences.size();
    double best_s = std::numeric_limits<double>::infinity();
    std::vector<std::vector<int>> lanes(num_lanes);
    size_t assignments = 1;
    for (size_t i = 0; i < k; ++i) assignments *= num_lanes;
    for (size_t code = 0; code < assignments; ++code) {
      for (auto& lane : lanes) lane.clear();
      for (size_t i = 0, c = code; i < k; ++i, c /= num_lanes)
        lanes[c % num_lanes].push_back(static_cast<int>(i));
      const std::vector<double> times =
          LaneTimesS(req, LongestFirst(req, lanes), rank_sets);
      best_s = std::min(best_s, *std::max_element(times.begin(), times.end()));
    }
    const std::vector<int> order = MakeWorkOrder(req.sequences, req.cost).order;
    const auto deal = SearchDeal(req, rank_sets, order,
                                 std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<int64_t>::max());
    ASSERT_TRUE(deal.has_value()) << "seed " << seed;
    ExpectEachSequenceOnceWithinDMin(req, *deal, rank_sets, seed);
    const std::vector<double> times =
        LaneTimesS(req, LongestFirst(req, *deal), rank_sets);
    EXPECT_NEAR(*std::max_element(times.begin(), times.end()), best_s,
                best_s * 1e-9)
        << "seed " << seed;
    EXPECT_FALSE(SearchDeal(req, rank_sets, order, best_s * (1 - 1e-9),
                            std::numeric_limits<int64_t>::max())
                     .has_value())
        << "seed " << seed;
    ++compared;
  }
  EXPECT_EQ(compared, 200);
}

// LanesOf: a lane plan's lanes and rank sets come back whole; rank sets that
// overlap without being equal are no lanes.
TEST(LanesOfTest, LanePlansAndOverlaps) {
  // Lanes in the order their rank sets first appear, ranks as first given.
  const std::vector<std::vector<int>> rank_sets = {{0, 1}, {3, 4, 5}, {2}};
  const std::vector<std::vector<int>> lanes = {{0, 3}, {2, 4, 5}, {1}};
  std::vector<MicroBatchPlan> plan(2);
  plan[0].groups = {{.ranks = {0, 1}, .sequences = {0}},
                    {.ranks = {3, 4, 5}, .sequences = {2, 4}}};
  plan[1].groups = {{.ranks = {1, 0}, .sequences = {3}},
                    {.ranks = {2}, .sequences = {1}},
                    {.ranks = {3, 4, 5}, .sequences = {5}}};
  std::vector<std::vector<int>> got_sets;
  EXPECT_EQ(LanesOf(plan, &got_sets), lanes);
  EXPECT_EQ(got_sets, rank_sets);
  plan[1].groups[1].ranks = {2, 3};  // overlaps {3, 4, 5}
  EXPECT_TRUE(LanesOf(plan, nullptr).empty());
}

// GainsEnoughAcross against its rule worked by hand: before, 4 ranks at
// 10 ms and one at 8 ms (two groups of 4), so the slowest lane has 4 ranks
// and the gain must be at least kPolishMinGainPerRise of the rises of
// narrower lanes over the longest their ranks were busy before, where they
// end within kPolishRiseHeadroom of the makespan after.
TEST(GainsEnoughAcrossTest, RisesOfNarrowerLanesRankByRank) {
  ASSERT_EQ(kPolishMinGainPerRise, 0.25);
  ASSERT_EQ(kPolishRiseHeadroom, 0.05);
  auto group = [](std::vector<int> ranks, double est_ms) {
    GroupPlan g;
    g.ranks = std::move(ranks);
    g.est_ms = est_ms;
    return g;
  };
  auto lane_plan = [](std::vector<GroupPlan> groups) {
    std::vector<MicroBatchPlan> plan(1);
    plan[0].groups = std::move(groups);
    return plan;
  };
  std::vector<MicroBatchPlan> before =
      lane_plan({group({0, 1, 2, 3}, 10), group({4}, 4)});
  before.resize(2);
  before[1].groups = {group({4}, 4)};
  // 3 and 4 run 9.8 ms together, below rank 3's 10 ms: no rise; gain 0.1.
  EXPECT_TRUE(GainsEnoughAcross(
      5, before, lane_plan({group({0, 1, 2}, 9.9), group({3, 4}, 9.8)})));
  // Rank 4 alone at 9.5 ms, within 5 % of the 9.9 ms makespan, rises
  // 1.5 ms: 0.1 < 0.375.
  EXPECT_FALSE(GainsEnoughAcross(
      5, before, lane_plan({group({0, 1, 2, 3}, 9.9), group({4}, 9.5)})));
  // With the slowest lane at 9.5 ms and rank 4 at 9.1 ms it rises 1.1 ms:
  // 0.5 >= 0.275.
  EXPECT_TRUE(GainsEnoughAcross(
      5, before, lane_plan({group({0, 1, 2, 3}, 9.5), group({4}, 9.1)})));
  // At 9.0 ms, 9 % below the makespan, its 1 ms rise is not counted.
  EXPECT_TRUE(GainsEnoughAcross(
      5, before, lane_plan({group({0, 1, 2, 3}, 9.9), group({4}, 9.0)})));
  // A rise on a lane as wide as the slowest is not counted; without a gain
  // any counted rise is too much.
  EXPECT_TRUE(GainsEnoughAcross(
      5, before, lane_plan({group({1, 2, 3, 4}, 9.95), group({0}, 9.9)})));
  EXPECT_FALSE(GainsEnoughAcross(
      5, before, lane_plan({group({0, 1, 2, 3}, 10), group({4}, 9.6)})));
}

}  // namespace
}  // namespace fcp::planner
