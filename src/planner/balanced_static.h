// The yardstick (docs/design.md §3): work-balanced static context parallelism.
// One CP degree `cp` for every sequence, DP = N / cp replicas on the rank
// blocks [j·cp, (j+1)·cp); sequences are dealt to the replicas by work
// (longest-processing-time first onto the least-loaded replica, work =
// alpha1·(1+eta)·s² + alpha2·s), then each replica packs its share into
// micro-batches that fit its memory (LPT again, over the fewest micro-batches
// every replica can use); micro-batch i holds the i-th of every replica's
// (each replica's micro-batches heaviest first). Replicas share no ranks, so
// the plan's estimate (the list-schedule makespan) is the busiest replica's
// total time: replicas that need fewer micro-batches do not wait for others.
//
// Lives in the planner because `fcp` keeps the best such plan among its
// candidates; the `megatron` / `deepspeed` baselines use it for their
// balanced dealing. Thread-safety: pure functions.
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include "fcp/scheduler.h"
#include "fcp/types.h"
#include "planner/microbatch.h"

namespace fcp::planner {

// Micro-batches of a balanced static plan with degree `cp` (cp | N, every
// sequence fits on cp ranks: otherwise nullopt). Groups carry ranks,
// sequences and `comm`; no estimates.
std::optional<std::vector<MicroBatchPlan>> BalancedStaticMicroBatches(
    const PlanRequest& request, int cp, CommKind comm);

struct BalancedStatic {
  int cp = 0;         // the chosen degree
  double est_ms = 0;  // its estimate (EstimateMicroBatches, ms)
  std::vector<MicroBatchPlan> micro_batches;
};

// The best balanced static ring plan over every divisor of N (nullopt when no
// divisor holds every sequence). Degrees whose bound (the heaviest sequence
// alone on cp ranks) is >= `below_ms` are not built: the caller only needs a
// plan that beats `below_ms`, so nullopt also means "none can".
std::optional<BalancedStatic> BestBalancedStatic(
    const PlanRequest& request,
    double below_ms = std::numeric_limits<double>::infinity());

// The same plans for many degrees of one request: the per-sequence work, the
// LPT order and the memory-bound smallest degree are computed once (fcp
// builds every divisor of N; these were O(K log K) per degree). Keeps a
// reference to `request`, which must outlive it.
class BalancedStaticBuilder {
 public:
  // `work_order`, when given, is MakeWorkOrder(request.sequences,
  // request.cost).
  explicit BalancedStaticBuilder(const PlanRequest& request,
                                 const WorkOrder* work_order = nullptr);
  // BalancedStaticMicroBatches(request, cp, comm).
  std::optional<std::vector<MicroBatchPlan>> MicroBatches(int cp,
                                                          CommKind comm) const;
  // BestBalancedStatic(request, below_ms).
  std::optional<BalancedStatic> Best(
      double below_ms = std::numeric_limits<double>::infinity()) const;

 private:
  std::vector<std::vector<int>> PackFewest(const std::vector<int>& share,
                                           int at_least,
                                           double cap_tokens) const;

  const PlanRequest& request_;
  std::vector<int>
      order_;  // sequences by work, descending (ties: longer, then index)
  std::vector<double> work_;    // SequenceWorkS per sequence (s)
  std::vector<double> tokens_;  // length per sequence (tokens)
  int64_t max_min_degree_ = 1;  // max_k d_min({s_k}): the smallest usable cp
};

}  // namespace fcp::planner
