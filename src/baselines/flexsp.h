// `flexsp`: FlexSP (ASPLOS'25)-style heterogeneous Ulysses groups. Per
// micro-batch a MILP (CBC) chooses how many power-of-two Ulysses groups of
// each size to form and which sequences each runs, minimising the
// micro-batch makespan under per-rank memory. docs/baselines.md has the
// formulation. The whole planning call respects PlanOptions::time_limit_s
// (set-up included; below the O(K log K) floor of sorting and one greedy
// packing, a labelled fallback plan); notes report milp_status and deadline,
// never a wall-clock time.
// Thread-safety: stateless (one CBC model per call).
#pragma once

#include "fcp/scheduler.h"

namespace fcp::baselines {

class FlexSpStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "flexsp"; }
  std::string_view description() const override {
    return "FlexSP: power-of-two Ulysses groups, sequence-to-group MILP (CBC, "
           "--time-limit)";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
