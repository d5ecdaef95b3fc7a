// Persistent groups ("lanes", strategy fcp; ours): the global batch grouped
// once, each group given its ranks for the whole batch and run back to back
// in as many micro-batches as its memory needs.
//
// Why: fcp otherwise splits the batch into micro-batches first (balancing
// work) and then groups and allocates each micro-batch on its own. Each
// micro-batch then pays its own bottleneck, and unless the bottlenecks of
// consecutive micro-batches share ranks the list schedule (docs/design.md §2)
// cannot fill the gaps. A lane instead balances rank time over the whole
// batch: a long sequence holds its ranks while single-rank lanes run many
// short sequences one after another. Issue 32 measured simple lane heuristics
// (src/baselines/heuristics.h) ahead of fcp in fcp's own model.
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <set>
#include <vector>

#include "fcp/scheduler.h"
#include "planner/realize.h"

namespace fcp::planner {

// Which degrees a lane of d > 1 may take (d = 1 always may), and how the
// allocator prices all-to-all lanes across nodes at free degrees.
struct LaneDegrees {
  bool node_aligned = false;     // AlignedDegree (placement.h)
  int multiple_of = 1;           // d % multiple_of == 0
  bool all_to_all_only = false;  // AllToAllAllowed (realize.h)
  AllToAllPricing all_to_all = AllToAllPricing::kWorstPlacement;
  bool operator==(const LaneDegrees&) const = default;
};

class DualApprox;  // refine.h

// A grouping of every sequence into lanes, and the degrees it was opened at
// (its lanes are laid out at those; free ones at free and aligned degrees).
struct LaneGrouping {
  std::vector<std::vector<int>> lanes;
  LaneDegrees degrees;
};

// Groupings of every sequence of `request` into lanes, judged with memory
// relaxed (a lane spreads its sequences over micro-batches): one lane of
// everything, and with `dual` the dual approximation (refine.h) searched
// below `upper_s` (the makespan to beat, s; +inf: unbounded) at free
// degrees, at node-aligned degrees, and at multiples of `multiple_of` when
// above 1 (on at most 256 sequences also of twice it, and where all-to-all
// may run; each sequence keeps its own d_min in all).
// `free_grouping`, when given, is taken as the free degrees' grouping instead
// of searching it: a dual grouping of every sequence at free degrees that
// memory did not shape (DualApprox::memory_decided), so one the relaxed search
// finds from the same bound. `prepared`, when given, is a DualApprox of
// every sequence of `request` (refine.h; fcp's one-micro-batch split has
// one): its order, minimum degrees and prices are reused, with memory relaxed
// (at 8,192 sequences on 1,024 ranks a second one cost 3 % of planning).
std::vector<LaneGrouping> LaneGroupings(
    const PlanRequest& request, double upper_s, bool dual, int multiple_of,
    const std::vector<std::vector<int>>* free_grouping = nullptr,
    DualApprox* prepared = nullptr);

// The lanes' rank sets: degrees by the exact fast allocator over the lanes'
// whole loads (each lane at least the largest d_min of its sequences) at
// `degrees` only (priced as `degrees.all_to_all` says), contiguous placement
// (PlaceGroups). nullopt when the lanes'
// minimum degrees exceed N, or some lane has no allowed degree within N.
std::optional<std::vector<std::vector<int>>> LaneRankSets(
    const PlanRequest& request, const std::vector<std::vector<int>>& lanes,
    const LaneDegrees& degrees);

// How ChunkLanes splits a lane into memory-feasible groups.
enum class Chunking {
  // First fit, longest first: the fewest groups, the last often small.
  kFirstFit,
  // As many groups as first fit needs, longest first onto the group with the
  // least work that has memory room (LPT): each group then runs about
  // the lane's time over their count, so that none is too short to hide the
  // gradient sync's collectives behind (StepMs). Falls back to first fit for
  // a lane where LPT finds no room for some sequence within a few tries.
  kBalanced,
};

// Each lane's sequences longest first, ties in their order (ChunkLanes'
// order: lanes passed to it in this order are not sorted again).
std::vector<std::vector<int>> LongestFirst(const PlanRequest& request,
                                           std::vector<std::vector<int>> lanes);

// Lane p's sequences split into memory-feasible groups on `rank_sets[p]`
// (`chunking`; an empty lane has none); micro-batch m runs every lane's m-th
// group. Groups are ring
// (the caller switches to all-to-all where faster); estimates are not filled.
// `*several`, when given, is set to whether some lane needs several groups.
std::vector<MicroBatchPlan> ChunkLanes(
    const PlanRequest& request, const std::vector<std::vector<int>>& lanes,
    const std::vector<std::vector<int>>& rank_sets,
    Chunking chunking = Chunking::kFirstFit, bool* several = nullptr);

// A partition of the N ranks into rank sets that already have communicators
// (`held`, each sorted; those of one rank are ignored), picked greedily,
// largest or smallest first, disjoint; every rank left over runs alone.
std::vector<std::vector<int>> HeldLayout(int num_ranks,
                                         const std::set<std::vector<int>>& held,
                                         bool largest_first);

// Sequences in `order` (LPT) dealt onto a fixed `layout` of rank sets, each
// onto the lane of degree >= its d_min whose load (`work`, s) divided by its
// degree ends lowest: lane p's sequences (some may be empty). nullopt when a
// sequence's d_min exceeds every lane's degree.
std::optional<std::vector<std::vector<int>>> DealOnto(
    const PlanRequest& request, const std::vector<std::vector<int>>& layout,
    const std::vector<double>& work, const std::vector<int>& order);

// DealOnto, then ChunkLanes; lanes left empty are dropped.
std::optional<std::vector<MicroBatchPlan>> LaneMicroBatchesOn(
    const PlanRequest& request, const std::vector<std::vector<int>>& layout,
    const std::vector<double>& work, const std::vector<int>& order);

// The lanes of `plan` when its groups form lanes: every two groups' rank sets
// are equal or disjoint. Each lane holds the sequences of the groups on one
// rank set; `*rank_sets` (when given) gets each lane's ranks as the plan
// orders them. Empty when some two rank sets overlap without being equal.
std::vector<std::vector<int>> LanesOf(const std::vector<MicroBatchPlan>& plan,
                                      std::vector<std::vector<int>>* rank_sets);

// How much of what a polishing change adds to the other lanes it touches it
// must save on the slowest lane (PolishLanes). Group estimates err by about
// 1 % in opposite directions by shape (single ranks of many short sequences
// under, wide rings over: scripts/est_vs_sim.py --groups), so moving work
// from a wide lane onto a narrow one for a small gain can lose in truth
// (issue 32: Ascend go-src, 64 ranks, gbs 16: 1.2 ms gained on a 63-rank
// lane for 52 ms added to a single rank, 0.8 % slower simulated).
inline constexpr double kPolishMinGainPerRise = 0.25;

// A lane that ends at least this share below the makespan after a change
// stays clear of it whichever way the estimates err (by about 1 %), so what
// the change adds to it is not counted against the gain (issue 32: a
// 177-token sequence moved off a 14-rank lane onto a single rank ending 23 %
// below the makespan, refused, 0.02 % behind ref-bisect).
inline constexpr double kPolishRiseHeadroom = 0.05;

// Whether a lane ending at `lane_after` where the makespan is
// `makespan_after` (any one unit) counts its rise: it ends within
// kPolishRiseHeadroom of the makespan.
inline bool RiseCounts(double lane_after, double makespan_after) {
  return lane_after > (1 - kPolishRiseHeadroom) * makespan_after;
}

// Whether the lane plan `after` saves on the makespan at least
// kPolishMinGainPerRise of what it adds, rank by rank, to its lanes
// narrower than the slowest lane of the lane plan `before` (on other rank
// sets, both on `num_ranks` ranks, estimates filled) that end near its
// makespan (RiseCounts): GainsEnough's rule (lanes.cc) across rank sets. A
// lane's rise is its time over the longest its ranks were busy before.
bool GainsEnoughAcross(int num_ranks, const std::vector<MicroBatchPlan>& before,
                       const std::vector<MicroBatchPlan>& after);

// The most sequences whose lanes, where they run several groups, are dealt
// below the makespan as several groups too (ReshapeLanes, and past 16 lanes
// fcp's TryPolishedLanes): each deal prices every sequence on every lane's
// groups, and at 8,192 Go-source sequences on 64 ranks (22 micro-batches)
// the deals took 63 % of planning, 2.8x its time.
inline constexpr size_t kSeveralGroupsMaxSequences = 1024;

// Whether `lanes` on `rank_sets` are dealt as several groups each: some holds
// more than its ranks' memory takes at once, so that it runs as several, and
// there are at most kSeveralGroupsMaxSequences sequences.
bool DealtAsSeveralGroups(const PlanRequest& request,
                          const std::vector<std::vector<int>>& lanes,
                          const std::vector<std::vector<int>>& rank_sets);

struct Polished {
  int changes = 0;
  double makespan_s = 0;  // the slowest lane's time after them
  size_t slowest = 0;     // that lane
};

// Lanes on fixed `rank_sets` improved step by step, each step one change
// out of the slowest lane: a sequence moved to another lane, or swapped with
// one of another lane's, or either followed by one of the receiving lane's
// sequences moved on to a third lane (an ejection chain, tried only where no
// move or swap is left). A change is made when the slowest of the lanes it
// touches ends faster than the slowest lane was, and it saves at least
// kPolishMinGainPerRise of what it adds to the others: the lanes' times
// sorted from the slowest down then fall lexicographically, so lanes tied at
// the makespan do not stop the search. Each step makes the best change
// found. A lane's time is its first-fit groups' (ChunkLanes) on its ranks,
// each ring or all-to-all, whichever is faster; a sequence goes only to the
// 8 fastest lanes of at least its d_min ranks; a lane that runs as one group
// is never split into two. At most `max_trials` trials: a lane priced from
// its load is one, a lane of several groups one more per 8 of its sequences.
// Emptied lanes are kept (empty).
Polished PolishLanes(const PlanRequest& request,
                     std::vector<std::vector<int>>& lanes,
                     const std::vector<std::vector<int>>& rank_sets,
                     int max_trials);

// The deal of every sequence (in `order`, the heaviest first) onto lanes on
// fixed `rank_sets` whose slowest lane is fastest, below `beat_s` (s; +inf:
// any): a depth-first branch and bound over at most `max_pricings` lane
// times, each priced as PolishLanes prices it (a lane of several groups split
// first fit in the order dealt). Exact where it finishes within the budget
// and every lane runs as one group; ReshapeLanes deals with it where moving
// one sequence at a time is stuck. nullopt when none below `beat_s` is found.
std::optional<std::vector<std::vector<int>>> SearchDeal(
    const PlanRequest& request, const std::vector<std::vector<int>>& rank_sets,
    const std::vector<int>& order, double beat_s, int64_t max_pricings);

// Lanes dealt again, and at other degrees, where polishing on fixed rank
// sets is stuck: the best lanes may need a tighter deal, or other degrees (4
// and 3 ranks where the lanes have 2 and 5).
//
// First `lanes` on `rank_sets` are dealt again below their makespan
// `makespan_s` (s): every sequence, the heaviest first (`order`), onto the
// lane it leaves closest below a target 0.1 %, 0.03 % or 0.01 % under it,
// the first target that fits (best fit at a target, as the dual
// approximation fills groups; each lane one group, or where the lanes are
// DealtAsSeveralGroups split as ChunkLanes splits them, and then also at the
// lowest target met), and by SearchDeal (`search_pricings`), each deal
// polished (PolishLanes).
//
// Then each round takes every multiset of lane degrees one rank away from
// the current one (a rank moved between lanes, to a lane of its own or from
// the idle ranks; a lane halved; two lanes merged, or merged with the rank
// that frees given to the slowest lane), those that change the slowest
// lane's degree first. For each, every sequence is dealt afresh (DealOnto on
// `work`, s; on at most 64 sequences by each lane's best-case time instead)
// and the deal screened by its lanes' best-case times as one group each
// (memory relaxed, placement ignored). The
// `polished_per_round` fastest (`small_batch_polished_per_round` on at most
// 64 sequences) are placed (PlaceGroups, as LaneRankSets places lanes),
// polished
// (`trials_per_try` each) and dealt below the makespan to beat as above
// (SearchDeal at `trial_search_pricings`). The round's best is kept when its
// makespan is below the best so far. At most `max_rounds`, and at most
// `max_dealt` sequences dealt by work in all; the lanes kept last are
// searched at `search_pricings` once more.
//
// nullopt when nothing is faster than `makespan_s`. Thread-safety: pure
// function.
struct ReshapeOptions {
  int max_rounds = 4;
  // Sequences dealt over all rounds, at most: about 170 x86-64 instructions
  // each (callgrind: 2,048 go-src sequences onto 11 lanes), so at most
  // about 22 M instructions in all.
  int64_t max_dealt = 131072;
  size_t polished_per_round = 2;  // the neighbours fastest as screened
  // The same on batches of at most 64 sequences (screened by time), where
  // each costs little: with 4, one of heuristics_test's 3,000 batches stayed
  // 0.75 % behind ref-bisect.
  size_t small_batch_polished_per_round = 8;
  int trials_per_try = 200;
  // SearchDeal's lane times on the given and on the kept lanes, and on each
  // trial's: 20,000 on every trial doubled the mean planning time on random
  // batches of up to 48 sequences on 32 ranks (0.6 to 1.3 ms) and left fcp
  // behind a heuristic on 4 instead of 5 of heuristics_test's 6,474.
  int64_t search_pricings = 20000;
  int64_t trial_search_pricings = 1000;
};
struct Reshaped {
  std::vector<std::vector<int>> lanes, rank_sets;
  double makespan_s = 0;
  int degree_changes = 0;  // rounds whose new degrees were kept
};
std::optional<Reshaped> ReshapeLanes(
    const PlanRequest& request, std::vector<std::vector<int>> lanes,
    const std::vector<std::vector<int>>& rank_sets, double makespan_s,
    const std::vector<double>& work, const std::vector<int>& order,
    const ReshapeOptions& options);

}  // namespace fcp::planner
