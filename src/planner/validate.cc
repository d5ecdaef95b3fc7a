// ValidatePlan: the structural checks every produced plan must pass, and
// CheckPlanShape, the part every entry point that takes a plan from outside
// (Scheduler.estimate/observe, fcp.validate_plan, simulate --plan) applies
// before it indexes anything by the plan's ranks or sequence indices.
#include <cmath>
#include <string>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/plan_check.h"
#include "fcp/scheduler.h"

namespace fcp {

void CheckPlanShape(const PlanRequest& request, const Plan& plan,
                    const std::string& field) {
  if (plan.status != PlanStatus::kOk) {
    throw InputError(field + ".status",
                     "must be \"ok\" (an infeasible plan cannot run)");
  }
  const int n = request.cluster.num_ranks;
  if (plan.num_ranks != n) {
    throw InputError(field + ".ranks",
                     "the plan is for " + std::to_string(plan.num_ranks) +
                         " ranks, the cluster has " + std::to_string(n));
  }
  if (plan.micro_batches.empty())
    throw InputError(field + ".micro_batches", "must not be empty");
  const size_t k = request.sequences.size();
  std::vector<char> seen(k, 0);
  // The micro-batch (+ 1) that last used each rank: one pass, O(N + sum of
  // degrees), not O(N) per micro-batch.
  std::vector<size_t> rank_stamp(static_cast<size_t>(n), 0);
  for (size_t m = 0; m < plan.micro_batches.size(); ++m) {
    const MicroBatchPlan& mb = plan.micro_batches[m];
    const std::string where =
        field + ".micro_batches[" + std::to_string(m) + "]";
    if (mb.groups.empty())
      throw InputError(where + ".groups", "must not be empty");
    for (size_t gi = 0; gi < mb.groups.size(); ++gi) {
      const GroupPlan& g = mb.groups[gi];
      auto gfield = [&](const char* key) {
        return where + ".groups[" + std::to_string(gi) + "]." + key;
      };
      if (g.ranks.empty())
        throw InputError(gfield("ranks"), "must not be empty");
      if (g.sequences.empty())
        throw InputError(gfield("sequences"), "must not be empty");
      for (size_t i = 0; i < g.ranks.size(); ++i) {
        const int r = g.ranks[i];
        if (r < 0 || r >= n) {
          throw InputError(gfield("ranks") + "[" + std::to_string(i) + "]",
                           "rank " + std::to_string(r) + " outside [0, " +
                               std::to_string(n) + ")");
        }
        if (rank_stamp[r] == m + 1) {
          throw InputError(gfield("ranks"),
                           "rank " + std::to_string(r) +
                               " is used twice in this micro-batch");
        }
        rank_stamp[r] = m + 1;
      }
      for (size_t i = 0; i < g.sequences.size(); ++i) {
        const int s = g.sequences[i];
        if (s < 0 || static_cast<size_t>(s) >= k) {
          throw InputError(gfield("sequences") + "[" + std::to_string(i) + "]",
                           "sequence index " + std::to_string(s) +
                               " outside [0, " + std::to_string(k) +
                               ") (the batch has " + std::to_string(k) +
                               " sequences)");
        }
        if (seen[s]++) {
          throw InputError(
              gfield("sequences"),
              "sequence " + std::to_string(s) + " is scheduled twice");
        }
      }
      if (g.comm != CommKind::kRing && g.comm != CommKind::kAllToAll) {
        throw InputError(gfield("comm"), "must be \"ring\" or \"all-to-all\"");
      }
    }
  }
  for (size_t s = 0; s < k; ++s) {
    if (!seen[s]) {
      throw InputError(
          field + ".micro_batches",
          "sequence " + std::to_string(s) + " of the batch is not scheduled");
    }
  }
}

std::string ValidatePlan(const PlanRequest& request, const Plan& plan) {
  try {
    CheckPlanShape(request, plan, "plan");
  } catch (const InputError& e) {
    return e.what();
  }
  const int n = request.cluster.num_ranks;
  for (size_t m = 0; m < plan.micro_batches.size(); ++m) {
    const MicroBatchPlan& mb = plan.micro_batches[m];
    const std::string where = "micro_batches[" + std::to_string(m) + "]";
    double max_ms = 0;
    for (size_t gi = 0; gi < mb.groups.size(); ++gi) {
      const GroupPlan& g = mb.groups[gi];
      if (g.comm == CommKind::kAllToAll && request.model &&
          !AllToAllDegreeRuns(*request.model, g.degree())) {
        return where + ".groups[" + std::to_string(gi) +
               "].ranks: an all-to-all group of degree " +
               std::to_string(g.degree()) + " does not divide q_heads = " +
               std::to_string(request.model->q_heads) +
               " (no runtime pads heads)";
      }
      GroupLoad load;
      for (int s : g.sequences) load.Add(request.sequences[s]);
      const double mem = GroupMemBytes(request.cost, load, g.degree());
      if (mem > request.cost.mem_capacity * (1 + 1e-12)) {
        return where + ".groups[" + std::to_string(gi) +
               "]: " + std::to_string(mem) +
               " bytes per rank exceed mem_capacity";
      }
      if (!std::isfinite(g.est_ms) || g.est_ms < 0) {
        return where + ".groups[" + std::to_string(gi) + "]: bad est_ms";
      }
      max_ms = std::max(max_ms, g.est_ms);
    }
    if (std::abs(mb.est_ms - max_ms) > 1e-9 * std::max(1.0, max_ms)) {
      return where + ": est_ms is not the max of its groups";
    }
  }
  // Ranks were checked above, so the list schedule may index by them.
  const double makespan_ms = ListScheduleMs(n, plan.micro_batches);
  if (std::abs(plan.est_ms - makespan_ms) > 1e-9 * std::max(1.0, makespan_ms)) {
    return "est_ms is not the list-schedule makespan of its micro-batches";
  }
  if (plan.lower_bound_ms > plan.est_ms * (1 + 1e-9)) {
    return "lower_bound_ms exceeds est_ms";
  }
  return "";
}

}  // namespace fcp
