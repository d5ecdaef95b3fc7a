// Micro-batch planner: splits a global batch into micro-batches that are each
// feasible on N ranks after stage 1 (Σ d_min of the BFD bins <= N), balancing
// their work (Σ alpha1·(1+eta)·s² + alpha2·s) by longest-processing-time first.
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "fcp/types.h"

namespace fcp::planner {

// Work of one sequence in rank-seconds: alpha1·(1+eta)·s² + alpha2·s.
double SequenceWorkS(const CostModel& cm, const Sequence& s);

// Precondition: every sequence fits alone on N ranks (d_min(s) <= N).
// Returns micro-batches of sequence indices (each sorted ascending), ordered
// by their first index.
std::vector<std::vector<int>> SplitMicroBatches(const std::vector<Sequence>& seqs,
                                                const CostModel& cm,
                                                const Cluster& cluster);

// Same, with a fixed number of micro-batches (LPT by work, memory-aware);
// returns an empty vector when that count is not feasible: some micro-batch
// exceeds N ranks' memory or, with `check_bfd`, its BFD grouping needs more
// than N ranks.
std::vector<std::vector<int>> SplitIntoMicroBatches(const std::vector<Sequence>& seqs,
                                                    const CostModel& cm,
                                                    const Cluster& cluster,
                                                    int count, bool check_bfd = true);

// The fewest micro-batches memory allows: ceil(Σ mem_per_token·s / (N·headroom)).
int MinMicroBatches(const std::vector<Sequence>& seqs, const CostModel& cm,
                    const Cluster& cluster);

}  // namespace fcp::planner
