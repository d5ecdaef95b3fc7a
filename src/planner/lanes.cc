#include "planner/lanes.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "fcp/cost_model.h"
#include "planner/allocation.h"
#include "planner/first_fit.h"
#include "planner/placement.h"
#include "planner/realize.h"
#include "planner/refine.h"

namespace fcp::planner {

std::vector<std::vector<std::vector<int>>> LaneGroupings(
    const PlanRequest& request, double upper_s, bool dual) {
  // Memory never binds a lane as a whole: each sequence needs only its own
  // d_min, which LaneMicroBatches enforces.
  PlanRequest relaxed = request;
  const double headroom = request.cost.mem_capacity - request.cost.mem_static;
  relaxed.cost.mem_capacity =
      request.cost.mem_static +
      headroom * static_cast<double>(request.sequences.size());
  std::vector<int> members(request.sequences.size());
  std::iota(members.begin(), members.end(), 0);
  // One lane of everything: every rank on every sequence, in as few
  // micro-batches as memory allows.
  std::vector<std::vector<std::vector<int>>> out = {{members}};
  if (!dual) return out;
  // Each sequence keeps its own d_min: a lane narrower than that could not
  // run it (the grouping would then be judged at degrees it never gets).
  // Lanes opened at node-aligned degrees are a second grouping: their rings
  // stay inside nodes where free degrees straddle them (issue 32: Ascend,
  // go-src lengths, 64 ranks, gbs 1,024).
  // On one node (or nodes of one rank) every ring already stays inside one.
  const bool nodes_matter =
      request.cluster.ranks_per_node > 1 &&
      request.cluster.num_ranks > request.cluster.ranks_per_node;
  for (bool aligned : {false, true}) {
    if (aligned && !nodes_matter) break;
    if (auto grouping = DualApproxGrouping(relaxed, members, upper_s,
                                           &request.cost, aligned)) {
      out.push_back(std::move(*grouping));
    }
  }
  return out;
}

std::optional<std::vector<MicroBatchPlan>> LaneMicroBatches(
    const PlanRequest& request, const std::vector<std::vector<int>>& lanes,
    bool aligned_degrees) {
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  std::vector<AllocGroup> groups(lanes.size());
  for (size_t p = 0; p < lanes.size(); ++p) {
    for (int k : lanes[p]) {
      groups[p].load.Add(request.sequences[k]);
      groups[p].min_degree =
          std::max(groups[p].min_degree,
                   MinDegree(cm, GroupLoad::Of(request.sequences[k])));
    }
  }
  const ModelShape* shape = ShapeOf(request);
  const GroupTimeFn time = aligned_degrees
                               ? AlignedRingOrAllToAll(cm, cluster, shape)
                               : BestCaseRingOrAllToAll(cm, cluster, shape);
  const Allocation alloc = AllocateFast(groups, cluster.num_ranks, time);
  if (!alloc.feasible) return std::nullopt;
  const std::vector<int> first =
      PlaceGroups(alloc.degrees, cluster, [&](int p, int f, int d) {
        return RingOrAllToAllS(cm, cluster, shape, groups[p].load, f, d);
      });
  std::vector<MicroBatchPlan> out;
  for (size_t p = 0; p < lanes.size(); ++p) {
    const int d = alloc.degrees[p];
    std::vector<int> seqs = lanes[p];
    std::stable_sort(seqs.begin(), seqs.end(), [&](int a, int b) {
      return request.sequences[a].length_tokens >
             request.sequences[b].length_tokens;
    });
    FirstFitChunks first_fit(seqs.size());
    std::vector<std::vector<int>> chunks;
    for (int k : seqs) {
      const Sequence& s = request.sequences[k];
      const size_t c = first_fit.Find([&](double sum_tokens) {
        GroupLoad load;
        load.sum_tokens = sum_tokens;
        load.Add(s);
        return GroupMemBytes(cm, load, d) <= cm.mem_capacity;
      });
      if (c == chunks.size()) chunks.emplace_back();
      chunks[c].push_back(k);
      first_fit.Add(c, static_cast<double>(s.length_tokens));
    }
    if (out.size() < chunks.size()) out.resize(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      GroupPlan g;
      g.ranks.resize(d);
      std::iota(g.ranks.begin(), g.ranks.end(), first[p]);
      g.sequences = std::move(chunks[c]);
      out[c].groups.push_back(std::move(g));
    }
  }
  return out;
}

}  // namespace fcp::planner
