// Beyond the paper (strategy `fcp`): a dual-approximation grouping and a
// move-based local search, both judged by the exact fast allocator.
// Thread-safety: pure functions; a DualApprox is used by one thread.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "fcp/scheduler.h"
#include "planner/realize.h"

namespace fcp::planner {

// Dual approximation (Hochbaum–Shmoys style) for one micro-batch `members`:
// binary-search the makespan τ; for each τ every sequence that cannot meet τ on
// one rank gets its own group with the fewest ranks that do; the others go
// (best fit by time slack, memory-checked) first into those groups' headroom,
// then onto single-rank groups. The test of a τ is not monotone, so on at most
// 256 sequences a few τ below an unmet `upper_s`, or below the bisection's
// last failure, are tried too. Returns the grouping of the smallest feasible
// τ found, or nullopt when none is met. An infinite `upper_s`
// starts from a τ where only memory can bind. `d_min_model`, when given, is
// the cost model whose memory sets each sequence's minimum degree (lanes:
// the real one, while `request` relaxes memory for a lane as a whole). With
// `rule` says at which degrees groups open and how sequences fill them
// (DualRule).
struct DualRule {
  // A group of d > 1 opens at a node-aligned degree only (placement.h:
  // AlignedDegree), which keeps rings inside whole nodes;
  bool aligned_degrees = false;
  int multiple_of = 1;           // only at a multiple of this;
  bool all_to_all_only = false;  // only where all-to-all may run (realize.h).
  // A sequence that fits none of the few tightest groups it tries (best fit)
  // tries the roomiest too: best fit alone gave up on a 499-token sequence
  // after three 4-rank groups a few percent too full, with a 12-rank group a
  // fifth empty, and found no grouping below 4.85 s where one of 4.45 s
  // exists (issue 32: a wider random batch, 6.3 % behind ref-bisect).
  bool roomiest_too = false;
};
std::optional<std::vector<std::vector<int>>> DualApproxGrouping(
    const PlanRequest& request, const std::vector<int>& members, double upper_s,
    const CostModel* d_min_model = nullptr, const DualRule& rule = {});

struct DualContext;

// DualApproxGrouping prepared once for `members` and run under several degree
// rules (LaneGroupings: free, node-aligned, even and all-to-all degrees): the
// order, minimum degrees, single-rank times and the bisection's lower end are
// the same for every rule, and each sequence is priced at each degree once.
// `request` (and `d_min_model`) must outlive it. `pricing` says at which
// bandwidth an all-to-all group of a degree that straddles nodes is priced
// (realize.h; DualApproxGrouping: at its worst placement's).
class DualApprox {
 public:
  DualApprox(const PlanRequest& request, const std::vector<int>& members,
             const CostModel* d_min_model = nullptr,
             AllToAllPricing pricing = AllToAllPricing::kWorstPlacement);
  DualApprox(DualApprox&&) noexcept;
  DualApprox& operator=(DualApprox&&) noexcept;
  ~DualApprox();
  // DualApproxGrouping(request, members, upper_s, d_min_model, rule). With
  // `memory_of`, the groups' memory is checked against that request's
  // cost_model.mem_* instead: the same batch, cluster and timing
  // coefficients with other memory figures (LaneGroupings relaxes memory for
  // lanes and reuses fcp's one-micro-batch preparation; every minimum degree
  // stays the one prepared, as with `d_min_model`). It must outlive the call.
  std::optional<std::vector<std::vector<int>>> Group(
      double upper_s, const DualRule& rule,
      const PlanRequest* memory_of = nullptr);
  // Whether memory decided any choice in the last Group call: a group passed
  // over for memory, or a sequence sized for the single-rank bins by its
  // memory rather than its time. When not, the same call with memory relaxed (a
  // larger mem_capacity, the same minimum degrees) returns the same grouping.
  bool memory_decided() const;

 private:
  std::unique_ptr<DualContext> ctx_;
};

// Merges the bottleneck group into another, or moves one of its sequences to
// the groups with the most slack or to a new group, while the fast
// allocator's makespan improves;
// at most `max_trials` allocator evaluations. Returns the makespan (s).
double LocalSearch(const PlanRequest& request,
                   std::vector<std::vector<int>>& groups, int max_trials);

}  // namespace fcp::planner
