// Stage 2 of FCP: choose a degree d_p >= d_min(G_p) per atomic group with
// Σ d_p <= N minimising max_p T(G_p, d_p). Two solvers with the same optimum:
// the paper's Algorithm 1 (2D-DP, O(K'·N²)) and the exact fast allocator
// (monotone envelope + bottleneck heap, O(K' + N log K')). Both return
// canonical degrees: each group gets the fewest ranks that meet the optimal
// makespan, so the two solvers return identical degree vectors.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/types.h"

namespace fcp::planner {

struct AllocGroup {
  GroupLoad load;
  int64_t min_degree = 1;  // d_min(G)
  // Topology-aware allocation: placement could not keep this group inside a
  // node, so it is costed at inter-node figures for every degree.
  bool inter_node = false;
};

// T(G, d) used for allocation (seconds); placement-independent.
using GroupTimeFn = std::function<double(const AllocGroup&, int degree)>;

// Best-case estimate: the faster link when d <= R (unless the group is marked
// inter_node), else inter-node.
GroupTimeFn BestCaseTime(const CostModel& cm, const Cluster& cluster);

struct Allocation {
  bool feasible = false;  // false when Σ d_min > N
  double makespan_s = 0;  // max_p T(G_p, d_p)
  std::vector<int>
      degrees;  // canonical: min d >= d_min with T(G, d) <= makespan
};

// Algorithm 1 of the paper (2D dynamic programme over groups × ranks used).
Allocation AllocateDp(const std::vector<AllocGroup>& groups, int num_ranks,
                      const GroupTimeFn& time);

// Exact fast allocator: every spare rank goes to the current bottleneck of the
// monotone envelope T̂(G, d) = min_{d_min <= d' <= d} T(G, d').
Allocation AllocateFast(const std::vector<AllocGroup>& groups, int num_ranks,
                        const GroupTimeFn& time);

// AllocateFast's makespan for variants of one set of groups (a few left out,
// a few added) while it is below the makespan M of an allocation of them,
// from a handful of grants instead of N. The greedy hands out ranks in
// non-increasing order of T̂, so its makespan is the (N - Σ d_min + 1)-th
// largest T̂(G, d) over all groups G and d >= d_min(G), whatever the order of
// ties. When that is below M, each kept group already holds every rank below
// its canonical degree c for M (where T̂ > M), and T̂(G, c) = T(G, c): the
// greedy resumes from there with the same values and the same result.
// Otherwise the resumed greedy still ends at some allocation's makespan, never
// below AllocateFast's, so it is >= M.
class ResumedAllocator {
 public:
  // `degrees`: AllocateFast's canonical degrees of `groups` for makespan M;
  // `times[p]` = time(groups[p], degrees[p]). Keeps references to `groups`
  // and `time`.
  ResumedAllocator(const std::vector<AllocGroup>& groups,
                   const std::vector<int>& degrees,
                   const std::vector<double>& times, int num_ranks,
                   const GroupTimeFn& time);
  // AllocateFast's makespan for `groups` without the (distinct) indices
  // `removed` plus `added`, when it is below M; else a value >= M, +inf when
  // the minimum degrees do not fit.
  double Makespan(const std::vector<int>& removed,
                  const std::vector<AllocGroup>& added);

 private:
  const std::vector<AllocGroup>& groups_;
  const GroupTimeFn& time_;
  int num_ranks_;
  std::vector<int> degrees_;
  std::vector<double> times_;
  std::vector<int> by_time_;   // group indices, times_ descending
  int64_t used_ = 0;           // Σ degrees_
  std::vector<char> removed_;  // scratch: marks of Makespan's `removed`
};

}  // namespace fcp::planner
