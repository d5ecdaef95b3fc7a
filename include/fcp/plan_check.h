// Checks of input that comes from outside the planner and is not a batch:
// plans (a plan from an untrusted source, issue 30) and the model-memory
// check of derived cost models. No MPI or torch here.
#pragma once

#include <string>

#include "fcp/presets.h"
#include "fcp/scheduler.h"

namespace fcp {

// The one check of a plan that comes from outside the planner (Scheduler.
// estimate / observe / validate, fcp.validate_plan, `fcp simulate --plan`, the
// training runtimes through the bindings), before anything is indexed by its
// ranks or sequence indices: status ok, num_ranks equal to the cluster's N,
// every micro-batch with >= 1 group, every group with >= 1 rank in [0, N) used
// once per micro-batch and >= 1 sequence index in [0, K), every sequence
// scheduled exactly once, comm ring or all-to-all. Estimates are not read.
// Throws InputError naming the field under `field`
// ("plan.micro_batches[0].groups[2].ranks[1]"). O(N + K + total degree).
// ValidatePlan (fcp/scheduler.h) applies it first.
void CheckPlanShape(const PlanRequest& request, const Plan& plan,
                    const std::string& field = "plan");

// InputError("model", "<model>'s states need X GiB per rank on N ranks of
// <cluster> ...: they do not fit one rank ...") when `derived` (DeriveCostModel
// of them, memory not overridden) leaves no room for activations.
void CheckModelFitsOneRank(const CostModel& derived, const ModelPreset& model,
                           const ClusterPreset& cluster);

}  // namespace fcp
