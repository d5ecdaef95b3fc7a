// Per-strategy aggregation of measured steps, shared by RunExperiment and
// ReplayPlannedBatches (`fcp simulate --plan`) so that both report the same
// figures by the same rules. Internal to src/eval. Not thread-safe.
#pragma once

#include <vector>

#include "fcp/experiment.h"

namespace fcp::sim {

struct StepTotals {
  std::vector<double> iter_s, solver_s;  // per measured step, seconds
  double tokens = 0, compute_s = 0, grad_sync_s = 0, schedule_ms = 0,
         micro_batches = 0, busy = 0;
  // One measured step: `hide_behind_s` is the previous step's simulated time
  // (asynchronous planning hides the solver behind it); `new_groups`
  // communicators were created in this step.
  void Add(const Plan& plan, const SimResult& sim, double hide_behind_s,
           double new_groups, double group_create_s, double tokens,
           StrategyResult& r);
  // Means into `r` (needs at least one step); vs_bound from `lower_bound_s`.
  void Finish(double lower_bound_s, StrategyResult& r) const;
};

}  // namespace fcp::sim
