#include "planner/realize.h"

#include "fcp/cost_model.h"

namespace fcp::planner {

std::vector<AllocGroup> MakeAllocGroups(const std::vector<Sequence>& seqs,
                                        const std::vector<std::vector<int>>& groups,
                                        const CostModel& cm) {
  std::vector<AllocGroup> out(groups.size());
  for (size_t p = 0; p < groups.size(); ++p) {
    for (int i : groups[p]) out[p].load.Add(seqs[i]);
    out[p].min_degree = MinDegree(cm, out[p].load);
  }
  return out;
}

std::optional<Realized> RealizeGrouping(const PlanRequest& request,
                                        const std::vector<std::vector<int>>& groups,
                                        Allocator allocator) {
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  const std::vector<AllocGroup> alloc_groups = MakeAllocGroups(request.sequences, groups, cm);
  const GroupTimeFn time = BestCaseTime(cm, cluster);
  const Allocation alloc = allocator == Allocator::kDp
                               ? AllocateDp(alloc_groups, cluster.num_ranks, time)
                               : AllocateFast(alloc_groups, cluster.num_ranks, time);
  if (!alloc.feasible) return std::nullopt;
  auto placed_time = [&](int p, int first, int degree) {
    const double bw = RangeOnOneNode(cluster, first, degree) ? cm.bw_intra_node
                                                             : cm.bw_inter_node;
    return GroupTimeS(cm, alloc_groups[p].load, degree, bw);
  };
  const std::vector<int> first = PlaceGroups(alloc.degrees, cluster, placed_time);
  Realized r;
  r.alloc_makespan_s = alloc.makespan_s;
  for (size_t p = 0; p < groups.size(); ++p) {
    GroupPlan g;
    g.sequences = groups[p];
    g.ranks.resize(alloc.degrees[p]);
    for (int i = 0; i < alloc.degrees[p]; ++i) g.ranks[i] = first[p] + i;
    r.placed_makespan_s =
        std::max(r.placed_makespan_s, placed_time(static_cast<int>(p), first[p], alloc.degrees[p]));
    r.micro_batch.groups.push_back(std::move(g));
  }
  return r;
}

}  // namespace fcp::planner
