// The planner core's half of MakePlan: options and input checks, the strategy's
// Solve, estimates, lower bound and validation. Which strategies exist is not
// known here: src/strategies/registry.cc looks the name up and calls this.
// Thread-safety: reentrant.
#pragma once

#include "fcp/scheduler.h"

namespace fcp::planner {

// Runs `strategy` on `request` as MakePlan documents (throws InputError for a
// bad option or input; an infeasible batch is a kInfeasible Plan).
Plan RunStrategy(const Strategy& strategy, const PlanRequest& request,
                 const PlanOptions& options);

}  // namespace fcp::planner
