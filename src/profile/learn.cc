// Learning from measured steps: a plan's groups with their measured times as
// samples for RecalibrateCostModel. See include/fcp/profiler.h.
#include <cmath>
#include <string>

#include "fcp/cost_model.h"
#include "fcp/plan_check.h"
#include "fcp/profiler.h"

namespace fcp {

std::vector<FitSample> MeasuredGroupSamples(
    const PlanRequest& request, const Plan& plan,
    std::span<const double> group_times_s) {
  CheckPlanShape(request, plan);  // the shared check, naming the field
  if (const std::string why = ValidatePlan(request, plan); !why.empty())
    throw InputError("plan", why);
  size_t groups = 0;
  for (const auto& mb : plan.micro_batches) groups += mb.groups.size();
  if (group_times_s.size() != groups)
    throw InputError("group_times_s", "needs one time per group of the plan (" +
                                          std::to_string(groups) + "), got " +
                                          std::to_string(group_times_s.size()));
  std::vector<FitSample> out;
  size_t i = 0;
  for (const auto& mb : plan.micro_batches) {
    for (const auto& g : mb.groups) {
      const double t = group_times_s[i];
      if (!std::isnan(t) && !(t > 0 && std::isfinite(t)))
        throw InputError("group_times_s[" + std::to_string(i) + "]",
                         "must be > 0 seconds (NaN: not measured)");
      ++i;
      if (std::isnan(t)) continue;
      FitSample s;
      for (int k : g.sequences) s.load.Add(request.sequences[k]);
      s.degree = g.degree();
      s.comm = g.comm;
      s.link = OnOneNode(request.cluster, g.ranks) ? Link::kIntraNode
                                                   : Link::kInterNode;
      if (g.comm == CommKind::kAllToAll) {
        s.bw_bytes_per_s =
            AllToAllBandwidthOnRanks(request.cost, request.cluster, g.ranks);
      } else {
        s.bw_bytes_per_s = s.link == Link::kIntraNode
                               ? request.cost.bw_intra_node
                               : request.cost.bw_inter_node;
      }
      s.total_s = t;
      out.push_back(s);
    }
  }
  return out;
}

const CostModel& CoefficientLearner::Learn(
    const PlanRequest& request, const Plan& plan,
    std::span<const double> group_times_s) {
  const std::vector<FitSample> groups =
      MeasuredGroupSamples(request, plan, group_times_s);
  measured_.insert(measured_.end(), groups.begin(), groups.end());
  learnt_ = RecalibrateCostModel(start_, measured_, options_);
  return learnt_.cost_model;
}

}  // namespace fcp
