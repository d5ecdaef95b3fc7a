#include "planner/realize.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp::planner {

std::vector<AllocGroup> MakeAllocGroups(
    const std::vector<Sequence>& seqs,
    const std::vector<std::vector<int>>& groups, const CostModel& cm) {
  std::vector<AllocGroup> out(groups.size());
  for (size_t p = 0; p < groups.size(); ++p) {
    for (int i : groups[p]) out[p].load.Add(seqs[i]);
    out[p].min_degree = MinDegree(cm, out[p].load);
  }
  return out;
}

const ModelShape* ShapeOf(const PlanRequest& request) {
  return request.model && request.model->q_heads > 0 &&
                 request.model->kv_heads > 0
             ? &*request.model
             : nullptr;
}

bool AllToAllAllowed(const ModelShape* shape, int degree) {
  return shape && shape->kv_heads > 0 && degree > 1 &&
         AllToAllDegreeRuns(*shape, degree);
}

bool DegreeAllowed(const ModelShape* shape, int degree, int multiple_of,
                   bool all_to_all_only) {
  return degree == 1 || (degree % multiple_of == 0 &&
                         (!all_to_all_only || AllToAllAllowed(shape, degree)));
}

// With a model shape (`shape` non-null), fcp runs a group of d > 1 as Ulysses
// all-to-all where that is cheaper than the ring (fcp_strategies.cc), so the
// group costs the smaller of the two on its ranks [first, first + degree)...
double RingOrAllToAllS(const CostModel& cm, const Cluster& cluster,
                       const ModelShape* shape, const GroupLoad& load,
                       int first, int degree) {
  const double ring =
      GroupTimeS(cm, load, degree,
                 RangeOnOneNode(cluster, first, degree) ? Link::kIntraNode
                                                        : Link::kInterNode);
  if (!AllToAllAllowed(shape, degree)) return ring;
  return std::min(ring, AllToAllGroupTimeS(cm, *shape, load, degree,
                                           AllToAllBandwidthOnRange(
                                               cm, cluster, first, degree)));
}

namespace {

// AllToAllFactorsFor(shape, d), computed once per degree: an allocator prices
// thousands of (group, degree) pairs. A value type, as a GroupTimeFn's state.
class FactorsByDegree {
 public:
  explicit FactorsByDegree(const ModelShape& shape) : shape_(shape) {}
  const AllToAllFactors& operator()(int degree) {
    const size_t d = static_cast<size_t>(degree);
    if (d >= factors_.size()) factors_.resize(d + 1);
    if (!factors_[d]) factors_[d] = AllToAllFactorsFor(shape_, degree);
    return *factors_[d];
  }

 private:
  ModelShape shape_;
  std::vector<std::optional<AllToAllFactors>> factors_;
};

// The allocator's T: the ring at its best case (BestCaseTime), or with a model
// shape the cheaper of that and all-to-all at `bandwidth(group, d)` (bytes/s;
// the time falls with the bandwidth, rounding included, so the fastest link
// a group may get is the only one priced). Keeps each degree's all-to-all
// factors as it prices.
template <class Bandwidth>
GroupTimeFn RingOrAllToAllAt(const CostModel& cm, const Cluster& cluster,
                             const ModelShape* shape, Bandwidth bandwidth) {
  const GroupTimeFn ring = BestCaseTime(cm, cluster);
  if (!shape) return ring;
  return [ring, cm, s = *shape, factors = FactorsByDegree(*shape),
          bandwidth = std::move(bandwidth)](const AllocGroup& g,
                                            int degree) mutable {
    const double t = ring(g, degree);
    if (!AllToAllAllowed(&s, degree)) return t;
    return std::min(t, AllToAllGroupTimePartsS(cm, factors(degree), g.load,
                                               degree, bandwidth(g, degree))
                           .total_s);
  };
}

}  // namespace

// RingOrAllToAllS placement-independent, at its best case (the allocator's T).
GroupTimeFn BestCaseRingOrAllToAll(const CostModel& cm, const Cluster& cluster,
                                   const ModelShape* shape) {
  // Across nodes at the inter-node link alone: the bandwidth of the worst
  // contiguous placement (a rank alone on its node), so a placed group is
  // never slower than allocated and allowing all-to-all never makes the
  // plan worse than rings only (a property test). A group that may fit in
  // one node gets the faster link.
  return RingOrAllToAllAt(
      cm, cluster, shape, [cm, cluster](const AllocGroup& g, int degree) {
        const bool may_be_one_node =
            !g.inter_node && degree <= cluster.ranks_per_node;
        return may_be_one_node ? std::max(cm.bw_inter_node, cm.bw_intra_node)
                               : cm.bw_inter_node;
      });
}

namespace {

// Degrees → placement → the placed makespan; `placed` receives the first rank
// of each group. Placements reaching `beat` are given up (PlaceGroups): the
// makespan is then `beat`.
double PlaceAndCost(const std::vector<AllocGroup>& groups,
                    const std::vector<int>& degrees, const CostModel& cm,
                    const Cluster& cluster, const ModelShape* shape,
                    std::vector<int>& placed,
                    double beat = std::numeric_limits<double>::infinity()) {
  auto placed_time = [&](int p, int first, int degree) {
    return RingOrAllToAllS(cm, cluster, shape, groups[p].load, first, degree);
  };
  // PlaceGroups computed the makespan of the layout it chose: max from 0 over
  // the groups in order, as here before.
  double makespan = 0;
  placed = PlaceGroups(degrees, cluster, placed_time, &makespan, beat);
  return makespan;
}

// What a grouping is placed and costed with.
struct Placing {
  const std::vector<AllocGroup>& groups;
  const CostModel& cm;
  const Cluster& cluster;
  const ModelShape* shape;
};

// Degrees and placement of one RealizeGrouping start.
struct Attempt {
  std::vector<int> degrees, first;
  double makespan = 0;
  bool topology_bound = false;  // some group straddled a node boundary
};

// Degree vectors one rank move from `degrees` around the placed bottleneck
// `b` (`placed_s`: each group's placed time): a spare rank for it, or for
// each of its ties (one move cannot lower a max that several share); one
// rank fewer for it; a rank from one of kMoveDonors other groups with slack,
// fastest first; and, where it straddles a node boundary, its rank to one of
// kMoveDonors others (one rank fewer may fit it inside a node only once the
// group before it fills that node's first part).
std::vector<std::vector<int>> RankMoves(const Placing& at,
                                        const std::vector<int>& degrees,
                                        const std::vector<int>& first,
                                        const std::vector<double>& placed_s,
                                        int b) {
  const std::vector<AllocGroup>& groups = at.groups;
  const int n = at.cluster.num_ranks;
  const int used = std::accumulate(degrees.begin(), degrees.end(), 0);
  std::vector<std::vector<int>> moves;
  if (used < n) {
    moves.push_back(degrees);
    ++moves.back()[b];
  }
  std::vector<int> tied;
  for (size_t p = 0; p < groups.size(); ++p) {
    if (placed_s[p] >= placed_s[b] * (1 - 1e-9))
      tied.push_back(static_cast<int>(p));
  }
  if (tied.size() > 1 && used + static_cast<int>(tied.size()) <= n) {
    moves.push_back(degrees);
    for (int p : tied) ++moves.back()[p];
  }
  if (degrees[b] > groups[b].min_degree) {
    moves.push_back(degrees);
    --moves.back()[b];
  }
  std::vector<int> others;
  for (size_t q = 0; q < groups.size(); ++q)
    if (static_cast<int>(q) != b) others.push_back(static_cast<int>(q));
  std::stable_sort(others.begin(), others.end(),
                   [&](int x, int y) { return placed_s[x] < placed_s[y]; });
  size_t donors = 0;
  for (int q : others) {
    if (donors == kMoveDonors) break;
    if (degrees[q] <= groups[q].min_degree) continue;
    ++donors;
    moves.push_back(degrees);
    --moves.back()[q];
    ++moves.back()[b];
  }
  const bool b_straddles = degrees[b] > 1 &&
                           degrees[b] <= at.cluster.ranks_per_node &&
                           !RangeOnOneNode(at.cluster, first[b], degrees[b]);
  if (b_straddles && degrees[b] > groups[b].min_degree) {
    for (size_t i = 0; i < others.size() && i < kMoveDonors; ++i) {
      moves.push_back(degrees);
      ++moves.back()[others[i]];
      --moves.back()[b];
    }
  }
  return moves;
}

// `out`'s degrees and placement improved in place by rank moves around the
// placed bottleneck (RankMoves), each placed and costed as placed: per
// round the best strict improvement is kept; rounds after the first only
// while some group with 1 < d <= R straddles a node boundary. Bounded:
// 2 kTopologyRounds · (2 kMoveDonors + 3) placements.
void MoveRanks(const Placing& at, Attempt& out) {
  const std::vector<AllocGroup>& groups = at.groups;
  for (int round = 0; round < 2 * kTopologyRounds; ++round) {
    std::vector<double> placed_s(groups.size());
    int b = 0;
    bool straddles = false;
    for (size_t p = 0; p < groups.size(); ++p) {
      const int d = out.degrees[p];
      straddles |= d > 1 && d <= at.cluster.ranks_per_node &&
                   !RangeOnOneNode(at.cluster, out.first[p], d);
      placed_s[p] = RingOrAllToAllS(at.cm, at.cluster, at.shape, groups[p].load,
                                    out.first[p], d);
      if (placed_s[p] > placed_s[b]) b = static_cast<int>(p);
    }
    if (!straddles && round > 0) break;
    double best_m = out.makespan * (1 - 1e-12);
    std::optional<Attempt> best;
    for (std::vector<int>& degrees :
         RankMoves(at, out.degrees, out.first, placed_s, b)) {
      std::vector<int> first;
      // Only a move below best_m is kept: a layout stops being costed there.
      const double m = PlaceAndCost(groups, degrees, at.cm, at.cluster,
                                    at.shape, first, best_m);
      if (m < best_m) {
        best_m = m;
        best = Attempt{std::move(degrees), std::move(first), m,
                       out.topology_bound};
      }
    }
    if (!best) break;
    out = std::move(*best);
  }
}

}  // namespace

GroupTimeFn AlignedOnly(const Cluster& cluster, GroupTimeFn time) {
  return [cluster, time = std::move(time)](const AllocGroup& g, int degree) {
    return AlignedDegree(cluster, degree)
               ? time(g, degree)
               : std::numeric_limits<double>::infinity();
  };
}

GroupTimeFn PackedRingOrAllToAll(const CostModel& cm, const Cluster& cluster,
                                 const ModelShape* shape) {
  return RingOrAllToAllAt(
      cm, cluster, shape, [cm, cluster](const AllocGroup&, int degree) {
        return AllToAllBandwidthOnRange(cm, cluster, 0, degree);
      });
}

bool PackingPricesAllToAll(const PlanRequest& request) {
  const ModelShape* shape = ShapeOf(request);
  const int r = request.cluster.ranks_per_node;
  for (int d = r + 1; shape && d <= request.cluster.num_ranks; ++d)
    if (AllToAllAllowed(shape, d)) return true;
  return false;
}

bool SomeDegreeRingOnly(const PlanRequest& request) {
  const ModelShape* shape = ShapeOf(request);
  for (int d = 2; shape && d <= request.cluster.num_ranks; ++d)
    if (!AllToAllAllowed(shape, d)) return true;
  return false;
}

GroupTimeFn AlignedRingOrAllToAll(const CostModel& cm, const Cluster& cluster,
                                  const ModelShape* shape) {
  return AlignedOnly(cluster, PackedRingOrAllToAll(cm, cluster, shape));
}

// Long because: its steps share one set of groups, degrees and ranks.
std::optional<Realized> RealizeGrouping(
    const PlanRequest& request, const std::vector<std::vector<int>>& groups,
    const RealizeOptions& options) {
  const bool topology_aware = options.topology_aware;
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  const std::vector<AllocGroup> alloc_groups =
      MakeAllocGroups(request.sequences, groups, cm);
  // fcp (topology-aware) may run groups as all-to-all; fcp-paper is ring only.
  const ModelShape* shape = topology_aware && request.model &&
                                    request.model->q_heads > 0 &&
                                    request.model->kv_heads > 0
                                ? &*request.model
                                : nullptr;
  const Placing at{alloc_groups, cm, cluster, shape};
  const GroupTimeFn best_case =
      options.aligned_degrees ? AlignedRingOrAllToAll(cm, cluster, shape)
      : options.pricing == AllToAllPricing::kPacked
          ? PackedRingOrAllToAll(cm, cluster, shape)
          : BestCaseRingOrAllToAll(cm, cluster, shape);
  // Allocate `usable` ranks, place, and (topology-aware) re-allocate the
  // groups that placement could not keep inside a node.
  auto allocate = [&](const std::vector<AllocGroup>& costed, int usable) {
    return options.allocator == Allocator::kDp
               ? AllocateDp(costed, usable, best_case)
               : AllocateFast(costed, usable, best_case);
  };
  auto attempt = [&](int usable, const Allocation& alloc) {
    Attempt out;
    out.degrees = alloc.degrees;
    out.makespan =
        PlaceAndCost(alloc_groups, out.degrees, cm, cluster, shape, out.first);
    if (!topology_aware) return out;
    // Allocate-then-place above is the first candidate. The allocator costed
    // every group with d <= R at intra-node figures; a group that placement
    // could not keep inside a node is re-costed at inter-node figures for
    // every degree and the allocation redone, so degrees and placement are
    // decided together. A few rounds; the best placed makespan wins, so this
    // is never worse than allocate-then-place.
    std::vector<bool> inter_only(groups.size(), false);
    std::vector<int> cur_degrees = out.degrees, cur_first = out.first;
    Attempt placed_first = out;
    for (int round = 0; round < kTopologyRounds; ++round) {
      bool changed = false;
      for (size_t p = 0; p < groups.size(); ++p) {
        if (inter_only[p] || cur_degrees[p] > cluster.ranks_per_node) continue;
        if (!RangeOnOneNode(cluster, cur_first[p], cur_degrees[p]) &&
            cur_degrees[p] > 1) {
          inter_only[p] = changed = true;
        }
      }
      if (!changed) break;
      out.topology_bound = true;
      std::vector<AllocGroup> costed = alloc_groups;
      for (size_t p = 0; p < groups.size(); ++p)
        costed[p].inter_node = inter_only[p];
      const Allocation a = allocate(costed, usable);
      if (!a.feasible) break;
      std::vector<int> f;
      const double m =
          PlaceAndCost(alloc_groups, a.degrees, cm, cluster, shape, f);
      cur_degrees = a.degrees;
      cur_first = f;
      if (m < out.makespan * (1 - 1e-12)) {
        out.makespan = m;
        out.degrees = a.degrees;
        out.first = std::move(f);
      }
    }
    if (!out.topology_bound) return out;
    // Rank moves from the re-allocated best and from allocate-then-place:
    // re-costing a straddling group at inter-node figures grows it across
    // the boundary, where a rank moved out of it keeps both groups inside a
    // node (issue 32: 15 and 14 ranks on nodes of 16 and 13 re-allocated to
    // 18 and 11 took 644 ms where 15 and 13 take 470 ms).
    MoveRanks(at, out);
    if (placed_first.degrees != out.degrees) {
      MoveRanks(at, placed_first);
      if (placed_first.makespan < out.makespan * (1 - 1e-12))
        out = std::move(placed_first);
    }
    return out;
  };
  const Allocation alloc = allocate(alloc_groups, cluster.num_ranks);
  if (!alloc.feasible) return std::nullopt;
  Attempt best = attempt(cluster.num_ranks, alloc);
  // The full nodes alone (see realize.h): the lower placed makespan wins.
  const int full_node_ranks =
      cluster.num_ranks - cluster.num_ranks % cluster.ranks_per_node;
  if (topology_aware && options.full_nodes_too && full_node_ranks > 0 &&
      full_node_ranks < cluster.num_ranks) {
    const Allocation on_full_nodes = allocate(alloc_groups, full_node_ranks);
    if (on_full_nodes.feasible) {
      Attempt alt = attempt(full_node_ranks, on_full_nodes);
      if (alt.makespan < best.makespan * (1 - 1e-12)) best = std::move(alt);
    }
  }
  const std::vector<int>& degrees = best.degrees;
  const std::vector<int>& first = best.first;
  const double makespan = best.makespan;
  Realized r;
  r.alloc_makespan_s = alloc.makespan_s;
  r.placed_makespan_s = makespan;
  for (size_t p = 0; p < groups.size(); ++p) {
    GroupPlan g;
    g.sequences = groups[p];
    g.ranks.resize(degrees[p]);
    for (int i = 0; i < degrees[p]; ++i) g.ranks[i] = first[p] + i;
    if (AllToAllAllowed(shape, degrees[p])) {
      const bool one_node = RangeOnOneNode(cluster, first[p], degrees[p]);
      const GroupLoad& load = alloc_groups[p].load;
      const double ring = GroupTimeS(
          cm, load, degrees[p], one_node ? Link::kIntraNode : Link::kInterNode);
      const double a2a = AllToAllGroupTimeS(
          cm, *shape, load, degrees[p],
          AllToAllBandwidthOnRange(cm, cluster, first[p], degrees[p]));
      if (a2a < ring) {
        g.comm = CommKind::kAllToAll;
      }
    }
    r.micro_batch.groups.push_back(std::move(g));
  }
  return r;
}

}  // namespace fcp::planner
