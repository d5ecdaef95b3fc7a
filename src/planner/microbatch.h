// Micro-batch planner: splits a global batch into micro-batches that are each
// feasible on N ranks after stage 1 (Σ d_min of the BFD bins <= N), balancing
// their work (Σ WorkS, fcp/cost_model.h) by longest-processing-time first.
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "fcp/types.h"

namespace fcp::planner {

// Work of one sequence in rank-seconds: WorkS of it alone at d = 1,
// alpha1·(1+eta)·(s² + h·s) + alpha2·s.
double SequenceWorkS(const CostModel& cm, const Sequence& s);

// Every sequence's work (SequenceWorkS) and the LPT order: indices by work
// descending, then length descending, then index. Computed once per request
// and shared by the micro-batch splits and the balanced static plans.
struct WorkOrder {
  std::vector<double> work;
  std::vector<int> order;
};
WorkOrder MakeWorkOrder(const std::vector<Sequence>& seqs, const CostModel& cm);

// Precondition: every sequence fits alone on N ranks (d_min(s) <= N).
// The count is the fewest whose split (SplitIntoMicroBatches) BFD fits, to
// within CountResolution: a fitting count c with a rejected one, or the
// memory bound MinMicroBatches - 1, at most CountResolution below it (the
// exact fewest below 128 micro-batches when fitting is monotone in the
// count). Returns micro-batches of sequence indices (each sorted ascending),
// ordered by their first index. `work_order`, when given, is
// MakeWorkOrder(seqs, cm) (saves the sort). `bfd_groups`, when given, receives
// the BestFitDecreasing grouping of each returned micro-batch where the split
// computed it for its feasibility check (same order as the result), or is left
// empty.
std::vector<std::vector<int>> SplitMicroBatches(
    const std::vector<Sequence>& seqs, const CostModel& cm,
    const Cluster& cluster,
    std::vector<std::vector<std::vector<int>>>* bfd_groups = nullptr,
    const WorkOrder* work_order = nullptr);

// Same, with a fixed number of micro-batches (LPT by work, memory-aware);
// returns an empty vector when that count is not feasible: some micro-batch
// exceeds N ranks' memory or, with `check_bfd`, its BFD grouping needs more
// than N ranks.
std::vector<std::vector<int>> SplitIntoMicroBatches(
    const std::vector<Sequence>& seqs, const CostModel& cm,
    const Cluster& cluster, int count, bool check_bfd = true,
    std::vector<std::vector<std::vector<int>>>* bfd_groups = nullptr,
    const WorkOrder* work_order = nullptr);

// Longest-processing-time packing with a capacity: each index of `order`
// (heaviest first) goes to the least-loaded of `count` bins (load = Σ work)
// whose Σ size stays within `capacity`; an empty bin takes anything. Where
// an index fits no bin, first fit decreasing by size into `count` bins
// instead (a tight packing LPT misses; bins may stay empty). Returns the bins
// (in `order`'s order within each, or by size descending after the fallback),
// or empty when neither packs. `work` and `size` are indexed by the values in
// `order`.
std::vector<std::vector<int>> LptPack(const std::vector<int>& order,
                                      const std::vector<double>& work,
                                      const std::vector<double>& size,
                                      double capacity, int count);

// How close SplitMicroBatches brackets the fewest fitting count near
// `count`: max(1, count / 64).
int CountResolution(int count);

// The fewest micro-batches memory allows: ceil(Σ mem_per_token·s /
// (N·headroom)).
int MinMicroBatches(const std::vector<Sequence>& seqs, const CostModel& cm,
                    const Cluster& cluster);

}  // namespace fcp::planner
