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

namespace fcp::planner {

// Which degrees a lane of d > 1 may take (d = 1 always may).
struct LaneDegrees {
  bool node_aligned = false;  // AlignedDegree (realize.h)
  int multiple_of = 1;        // d % multiple_of == 0
};

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
// above 1 (each sequence keeps its own d_min in all).
std::vector<LaneGrouping> LaneGroupings(const PlanRequest& request,
                                        double upper_s, bool dual,
                                        int multiple_of);

// The lanes' rank sets: degrees by the exact fast allocator over the lanes'
// whole loads (each lane at least the largest d_min of its sequences) at
// `degrees` only, contiguous placement (PlaceGroups). nullopt when the lanes'
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
// (`chunking`); micro-batch m runs every lane's m-th group. Groups are ring
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

// Lanes on a fixed `layout` of rank sets: sequences in `order` (LPT), each
// onto the lane of degree >= its d_min whose load (`work`, s) divided by its
// degree ends lowest, then ChunkLanes; lanes left empty are dropped. nullopt
// when a sequence's d_min exceeds every lane's degree.
std::optional<std::vector<MicroBatchPlan>> LaneMicroBatchesOn(
    const PlanRequest& request, const std::vector<std::vector<int>>& layout,
    const std::vector<double>& work, const std::vector<int>& order);

}  // namespace fcp::planner
