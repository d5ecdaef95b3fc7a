// Turns a grouping of one micro-batch (atomic groups of sequence indices) into
// a placed MicroBatchPlan: stage-2 allocation, then placement.
// Thread-safety: pure functions (BestCaseRingOrAllToAll's result caches).
#pragma once

#include <optional>
#include <vector>

#include "fcp/scheduler.h"
#include "fcp/types.h"
#include "planner/allocation.h"
#include "planner/placement.h"

namespace fcp::planner {

enum class Allocator { kDp, kFast };

std::vector<AllocGroup> MakeAllocGroups(
    const std::vector<Sequence>& seqs,
    const std::vector<std::vector<int>>& groups, const CostModel& cm);

// Whether a group of `degree` ranks may run as all-to-all: a model shape with
// head counts, d > 1, and d dividing the query heads (no runtime pads heads).
bool AllToAllAllowed(const ModelShape* shape, int degree);

// Whether a degree rule lets a group open at `degree` ranks: d = 1 always;
// d > 1 at multiples of `multiple_of` only and, with `all_to_all_only`, where
// all-to-all may run (AllToAllAllowed). The dual approximation and the lane
// allocation share it; node alignment is AlignedDegree's (placement.h).
bool DegreeAllowed(const ModelShape* shape, int degree, int multiple_of,
                   bool all_to_all_only);

// The request's model shape when it has head counts (all-to-all groups can be
// priced), else nullptr: what RingOrAllToAllS and the grouping stages take.
const ModelShape* ShapeOf(const PlanRequest& request);

// T(G, d) of a group on [first, first + degree) (s): the ring, or with a
// model shape (`shape` non-null) the cheaper of ring and all-to-all.
double RingOrAllToAllS(const CostModel& cm, const Cluster& cluster,
                       const ModelShape* shape, const GroupLoad& load,
                       int first, int degree);
// The same, placement-independent at its best case: the allocator's T. The
// function keeps each degree's all-to-all factors as it prices: call one
// copy from one thread at a time.
GroupTimeFn BestCaseRingOrAllToAll(const CostModel& cm, const Cluster& cluster,
                                   const ModelShape* shape);

// How the allocator prices an all-to-all group of d ranks across nodes.
enum class AllToAllPricing {
  // At the worst contiguous placement's bandwidth (a rank alone on its node):
  // a placed group is never slower than allocated (BestCaseRingOrAllToAll).
  kWorstPlacement,
  // At its bandwidth from a node boundary, where PlaceGroups puts the first
  // group (PackedRingOrAllToAll). Differs from the worst placement only on
  // degrees above the node size (PackingPricesAllToAll).
  kPacked,
};

// BestCaseRingOrAllToAll with every all-to-all group at its bandwidth on
// [0, d) (AllToAllBandwidthOnRange): 6 ranks on 4-rank nodes then price at
// 4 peers on the faster link, not at the inter-node link alone (issue 32: the
// worst placement's price kept fcp on 8-rank rings where 6-rank all-to-all
// groups ran 6 % faster, placed). Same caching as BestCaseRingOrAllToAll.
GroupTimeFn PackedRingOrAllToAll(const CostModel& cm, const Cluster& cluster,
                                 const ModelShape* shape);

// Whether kPacked prices some allowed degree differently: an all-to-all
// degree within N above the node size R.
bool PackingPricesAllToAll(const PlanRequest& request);

// Whether the request's model has head counts and some degree in [2, N] may
// not run all-to-all (AllToAllAllowed).
bool SomeDegreeRingOnly(const PlanRequest& request);

struct Realized {
  MicroBatchPlan micro_batch;  // groups with ranks and sequences (no estimates)
  double placed_makespan_s = 0;  // max T over groups at their actual placement
  double alloc_makespan_s =
      0;  // the allocator's (placement-independent) optimum
};

// Rounds of topology-aware re-allocation (see RealizeGrouping).
inline constexpr int kTopologyRounds = 3;
// Donor groups tried per rank-move round (see RealizeGrouping).
inline constexpr size_t kMoveDonors = 8;

// How RealizeGrouping allocates and places (see there).
struct RealizeOptions {
  Allocator allocator = Allocator::kFast;
  bool topology_aware = false;
  bool full_nodes_too = false;
  bool aligned_degrees = false;
  AllToAllPricing pricing = AllToAllPricing::kWorstPlacement;
};

// nullopt when Σ d_min > N. With `topology_aware` (strategy fcp), degrees and
// placement are decided together: allocate-then-place is the first
// candidate; groups that placement could not keep inside a node are re-costed
// at inter-node figures and the allocation redone (a few rounds); the
// smallest placed makespan wins, so it is never worse than allocate-then-place.
// While some group with d <= R straddles a node boundary, single-rank moves to
// or from the placed bottleneck are tried too (each placed and costed as
// placed), from the re-allocated best and from allocate-then-place. With
// `full_nodes_too` (topology-aware only) and a partial last node (N not a
// multiple of R), the same is also done allocating the full nodes' ranks only,
// and the lower placed makespan wins: the allocator counts the partial node's
// ranks as if any d <= R could use them, e.g. degrees 8 8 5 5 on nodes of 8 8 8
// 2 ranks, where a 5 must straddle (8 8 4 4 on the full nodes fit). With
// `aligned_degrees`, every degree is node-aligned (AlignedDegree): such groups
// pack into whole nodes, so none straddles a node boundary. `pricing` says how
// the allocator prices all-to-all groups across nodes (aligned degrees are
// always priced packed).
std::optional<Realized> RealizeGrouping(
    const PlanRequest& request, const std::vector<std::vector<int>>& groups,
    const RealizeOptions& options = {});

// `time` where the degree is aligned, +inf elsewhere: the allocator's monotone
// envelope then grants only aligned degrees (a group leaves the extra idle).
GroupTimeFn AlignedOnly(const Cluster& cluster, GroupTimeFn time);
// BestCaseRingOrAllToAll on aligned degrees only (+inf elsewhere), with an
// all-to-all group's bandwidth on whole nodes, where PlaceGroups puts an
// aligned multi-node group (the worst placement's is far lower).
GroupTimeFn AlignedRingOrAllToAll(const CostModel& cm, const Cluster& cluster,
                                  const ModelShape* shape);

}  // namespace fcp::planner
