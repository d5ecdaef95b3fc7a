// Stage 1 of FCP (the paper): Best-Fit-Decreasing atomic grouping by memory.
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "fcp/types.h"

namespace fcp::planner {

// Groups `members` (indices into `seqs`) into atomic groups. Sequences are
// taken by memory (length) descending, ties by index; each opens a bin of
// d_min(s)·(mem_capacity - mem_static) activation bytes unless it fits the
// open bin with the least remaining headroom that still holds it.
// Returns groups of sequence indices, in opening order.
std::vector<std::vector<int>> BestFitDecreasing(
    const std::vector<Sequence>& seqs, const std::vector<int>& members,
    const CostModel& cm);

}  // namespace fcp::planner
