// Brute-force oracle for the per-micro-batch FCP problem (test-only).
//
// Problem: ONE micro-batch holding ALL sequences of `request`; choose a
// partition of the sequences into groups, a degree d >= 1 per group and a
// contiguous rank range [first, first + d) per group, ranges disjoint within
// [0, N) (ranks may stay idle), every group within memory
// (mem_static + mem_per_token * Σ s / d <= mem_capacity). Minimise the
// makespan max_G T(G, d) where T is docs/design.md §2 with the bandwidth of the
// ACTUAL placement: intra-node iff first / R == (first + d - 1) / R.
//
// Independence: the cost formula is re-implemented here from docs/design.md §2
// (ReferenceGroupTimeS), not taken from src/cost, and the search is a plain
// enumeration (set partitions x ordered disjoint interval placements) with
// branch-and-bound pruning only, so it can check both the cost code and the
// planners/`optimal`.
//
// Limits: K <= 8 sequences and N <= 16 ranks (FCP_CHECK); practical (well
// under a second) for K <= 6 and N <= 8. Times in seconds.
// Thread-safety: reentrant.
#pragma once

#include <limits>
#include <vector>

#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp::testing {

inline constexpr int kBruteForceMaxSequences = 8;
inline constexpr int kBruteForceMaxRanks = 16;

// T(G, d) of docs/design.md §2 for the sequences `members` of `sequences`
// placed on the contiguous ranks [first, first + degree) of `cluster`
// (seconds).
double ReferenceGroupTimeS(const CostModel& cm, const Cluster& cluster,
                           const std::vector<Sequence>& sequences,
                           const std::vector<int>& members, int first,
                           int degree);

struct BruteForceGroup {
  std::vector<int> sequences;  // indices into request.sequences, ascending
  int first_rank = 0;
  int degree = 0;
  double time_s = 0;
};

struct BruteForceResult {
  // Optimal makespan (s); +infinity when no single micro-batch holds all
  // sequences within memory.
  double makespan_s = std::numeric_limits<double>::infinity();
  std::vector<BruteForceGroup> groups;  // one optimal solution (empty if none)
  bool feasible() const { return !groups.empty(); }
};

// Exhaustive optimum of the problem above. `request.sequences` non-empty.
BruteForceResult BruteForceOptimum(const PlanRequest& request);

// Shorthand: BruteForceOptimum(request).makespan_s (seconds).
double BruteForceMakespanS(const PlanRequest& request);

}  // namespace fcp::testing
