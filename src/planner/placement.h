// Placement: contiguous rank ranges for the groups of one micro-batch.
// Thread-safety: pure function.
#pragma once

#include <functional>
#include <limits>
#include <vector>

#include "fcp/types.h"

namespace fcp::planner {

// Time of group `p` if placed on [first, first + degree) (seconds); a function
// of its arguments (PlaceGroups may reuse a value instead of asking again).
using PlacedTimeFn = std::function<double(int p, int first, int degree)>;

// d divides the node size R or is a multiple of it (d >= 1).
bool AlignedDegree(const Cluster& cluster, int degree);

// Returns the first rank of each group (Σ degrees <= N). Groups with d <= R are
// packed best-fit-decreasing into nodes so that they do not straddle a node
// boundary whenever that is possible; groups with d > R (multi-node anyway) are
// laid out first from rank 0. Among this and plain sequential layouts (by
// degree descending; where that node-aligned packing fails, the same with
// unaligned degrees last; as given) the one with the smallest max placed time
// wins (ties: the earliest of these).
// `max_placed_time`, when given, receives the winner's max over its groups of
// placed_time (0 when there are none), so callers need not evaluate it again.
// A layout is given up once some group's time reaches `beat` (a caller that
// keeps only a layout below it: the rest of its groups are not costed); when
// every layout reaches it the first is returned and *max_placed_time is
// `beat`.
std::vector<int> PlaceGroups(
    const std::vector<int>& degrees, const Cluster& cluster,
    const PlacedTimeFn& placed_time, double* max_placed_time = nullptr,
    double beat = std::numeric_limits<double>::infinity());

}  // namespace fcp::planner
