// ValidatePlan: the structural checks every produced plan must pass.
#include <cmath>
#include <string>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/scheduler.h"

namespace fcp {

std::string ValidatePlan(const PlanRequest& request, const Plan& plan) {
  if (plan.status != PlanStatus::kOk) return "plan status is not ok";
  const int n = request.cluster.num_ranks;
  const size_t k = request.sequences.size();
  if (plan.num_ranks != n) return "num_ranks differs from the cluster";
  std::vector<int> seen(k, 0);
  for (size_t m = 0; m < plan.micro_batches.size(); ++m) {
    const MicroBatchPlan& mb = plan.micro_batches[m];
    const std::string where = "micro_batches[" + std::to_string(m) + "]";
    if (mb.groups.empty()) return where + ": no groups";
    std::vector<char> rank_used(n, 0);
    double max_ms = 0;
    for (size_t gi = 0; gi < mb.groups.size(); ++gi) {
      const GroupPlan& g = mb.groups[gi];
      const std::string gwhere = where + ".groups[" + std::to_string(gi) + "]";
      if (g.ranks.empty()) return gwhere + ": degree must be >= 1";
      if (g.comm == CommKind::kAllToAll && request.model &&
          !AllToAllDegreeRuns(*request.model, g.degree())) {
        return gwhere + ".ranks: an all-to-all group of degree " +
               std::to_string(g.degree()) + " does not divide q_heads = " +
               std::to_string(request.model->q_heads) + " (no runtime pads heads)";
      }
      if (g.sequences.empty()) return gwhere + ": no sequences";
      for (int r : g.ranks) {
        if (r < 0 || r >= n) return gwhere + ": rank " + std::to_string(r) + " outside [0, N)";
        if (rank_used[r]++) return gwhere + ": rank " + std::to_string(r) + " used twice";
      }
      GroupLoad load;
      for (int s : g.sequences) {
        if (s < 0 || static_cast<size_t>(s) >= k) {
          return gwhere + ": sequence index " + std::to_string(s) + " out of range";
        }
        if (seen[s]++) return gwhere + ": sequence " + std::to_string(s) + " scheduled twice";
        load.Add(request.sequences[s]);
      }
      const double mem = GroupMemBytes(request.cost, load, g.degree());
      if (mem > request.cost.mem_capacity * (1 + 1e-12)) {
        return gwhere + ": " + std::to_string(mem) + " bytes per rank exceed mem_capacity";
      }
      if (!std::isfinite(g.est_ms) || g.est_ms < 0) return gwhere + ": bad est_ms";
      max_ms = std::max(max_ms, g.est_ms);
    }
    if (std::abs(mb.est_ms - max_ms) > 1e-9 * std::max(1.0, max_ms)) {
      return where + ": est_ms is not the max of its groups";
    }
  }
  for (size_t s = 0; s < k; ++s) {
    if (!seen[s]) return "sequence " + std::to_string(s) + " is not scheduled";
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
