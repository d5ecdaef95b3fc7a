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
  bool feasible = false;     // false when Σ d_min > N
  double makespan_s = 0;     // max_p T(G_p, d_p)
  std::vector<int> degrees;  // canonical: min d >= d_min with T(G, d) <= makespan
};

// Algorithm 1 of the paper (2D dynamic programme over groups × ranks used).
Allocation AllocateDp(const std::vector<AllocGroup>& groups, int num_ranks,
                      const GroupTimeFn& time);

// Exact fast allocator: every spare rank goes to the current bottleneck of the
// monotone envelope T̂(G, d) = min_{d_min <= d' <= d} T(G, d').
Allocation AllocateFast(const std::vector<AllocGroup>& groups, int num_ranks,
                        const GroupTimeFn& time);

// AllocateFast's greedy resumed from `start[p]` (>= min_degree) ranks per
// group, `start_envelope[p]` being T̂(G_p, start[p]); returns only the
// makespan, +inf when Σ start > num_ranks. The greedy hands out ranks in
// non-increasing order of T̂, so its makespan is the (N - Σ d_min + 1)-th
// largest T̂(G_p, d) over all p and d >= d_min: when every skipped value
// T̂(G_p, d), d < start[p], is above AllocateFast's makespan, the result is
// exactly that makespan (same T values); otherwise it is some allocation's
// makespan, never below AllocateFast's. A caller that knows every group's
// canonical degree for a makespan M (its T there is T̂ there) resumes from
// them after changing a few groups, and learns the exact makespan whenever it
// is below M, from a handful of grants instead of N.
double ResumeFastMakespan(const std::vector<AllocGroup>& groups, int num_ranks,
                          const GroupTimeFn& time, const std::vector<int>& start,
                          const std::vector<double>& start_envelope);

}  // namespace fcp::planner
