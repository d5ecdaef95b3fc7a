// `flexsp`: FlexSP (ASPLOS'25)-style heterogeneous Ulysses groups. Per
// micro-batch a MILP (CBC) chooses how many power-of-two Ulysses groups of
// each size to form and which sequences each runs, minimising the
// micro-batch makespan under per-rank memory. docs/baselines.md has the
// formulation. The whole strategy respects PlanOptions::time_limit_s (split
// over micro-batches); notes report milp_status and milp_time_s.
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
  Plan Solve(const PlanRequest& request, const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
