// `optimal`: the exact optimum of the per-micro-batch FCP problem — ONE
// micro-batch holding all sequences, any partition into ring groups, any
// degree d >= d_min per group, groups on contiguous disjoint rank ranges
// (ranks may idle), each group's time from its actual placement (docs/design.md
// §2). Solved exhaustively by dynamic programming over (first free rank,
// set of unplaced sequences): f(p, S) = min( f(p+1, S),
//   min_{G ⊆ S, d} max(T(G, d, [p, p+d)), f(p+d, S \ G)) ), O(3^K N^2).
// Limits: at most kOptimalMaxSequences sequences and kOptimalMaxRanks ranks,
// else InputError("sequences" / "cluster.num_ranks"). A batch that no single
// micro-batch can hold (memory) throws InputError("sequences") too; a
// sequence that does not fit on N ranks gives a kInfeasible plan.
// Thread-safety: stateless.
#pragma once

#include "fcp/scheduler.h"

namespace fcp::baselines {

inline constexpr int kOptimalMaxSequences = 12;
inline constexpr int kOptimalMaxRanks = 32;

class OptimalStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "optimal"; }
  std::string_view description() const override {
    return "exact optimum of one micro-batch by exhaustive DP (<= 12 "
           "sequences, "
           "<= 32 ranks): the yardstick";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
