// Turns a grouping of one micro-batch (atomic groups of sequence indices) into
// a placed MicroBatchPlan: stage-2 allocation, then placement.
// Thread-safety: pure function.
#pragma once

#include <optional>
#include <vector>

#include "fcp/scheduler.h"
#include "fcp/types.h"
#include "planner/allocation.h"
#include "planner/placement.h"

namespace fcp::planner {

enum class Allocator { kDp, kFast };

std::vector<AllocGroup> MakeAllocGroups(const std::vector<Sequence>& seqs,
                                        const std::vector<std::vector<int>>& groups,
                                        const CostModel& cm);

struct Realized {
  MicroBatchPlan micro_batch;    // groups with ranks and sequences (no estimates)
  double placed_makespan_s = 0;  // max T over groups at their actual placement
  double alloc_makespan_s = 0;   // the allocator's (placement-independent) optimum
};

// nullopt when Σ d_min > N.
std::optional<Realized> RealizeGrouping(const PlanRequest& request,
                                        const std::vector<std::vector<int>>& groups,
                                        Allocator allocator);

}  // namespace fcp::planner
