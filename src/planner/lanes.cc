#include "planner/lanes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>

#include "fcp/cost_model.h"
#include "planner/allocation.h"
#include "planner/first_fit.h"
#include "planner/microbatch.h"
#include "planner/placement.h"
#include "planner/realize.h"
#include "planner/refine.h"

namespace fcp::planner {

std::vector<LaneGrouping> LaneGroupings(const PlanRequest& request,
                                        double upper_s, bool dual,
                                        int multiple_of) {
  // Memory never binds a lane as a whole: each sequence needs only its own
  // d_min, which LaneRankSets and ChunkLanes enforce.
  PlanRequest relaxed = request;
  const double headroom = request.cost.mem_capacity - request.cost.mem_static;
  relaxed.cost.mem_capacity =
      request.cost.mem_static +
      headroom * static_cast<double>(request.sequences.size());
  std::vector<int> members(request.sequences.size());
  std::iota(members.begin(), members.end(), 0);
  // One lane of everything: every rank on every sequence, in as few
  // micro-batches as memory allows.
  std::vector<LaneGrouping> out = {{{members}, {}}};
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
  std::vector<LaneDegrees> rules = {{}};
  if (nodes_matter) rules.push_back({.node_aligned = true});
  if (multiple_of > 1) rules.push_back({.multiple_of = multiple_of});
  DualApprox dual_approx(relaxed, members, &request.cost);
  for (const LaneDegrees& rule : rules) {
    if (auto grouping =
            dual_approx.Group(upper_s, rule.node_aligned, rule.multiple_of)) {
      out.push_back({std::move(*grouping), rule});
    }
  }
  return out;
}

std::optional<std::vector<std::vector<int>>> LaneRankSets(
    const PlanRequest& request, const std::vector<std::vector<int>>& lanes,
    const LaneDegrees& degrees) {
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
  GroupTimeFn time = degrees.node_aligned
                         ? AlignedRingOrAllToAll(cm, cluster, shape)
                         : BestCaseRingOrAllToAll(cm, cluster, shape);
  if (degrees.multiple_of > 1) {
    // +inf elsewhere: the allocator's monotone envelope grants only these.
    time = [time = std::move(time), g = degrees.multiple_of](
               const AllocGroup& group, int d) {
      return d > 1 && d % g != 0 ? std::numeric_limits<double>::infinity()
                                 : time(group, d);
    };
  }
  const Allocation alloc = AllocateFast(groups, cluster.num_ranks, time);
  // An infinite makespan: some lane has no allowed degree within N ranks.
  if (!alloc.feasible || !std::isfinite(alloc.makespan_s)) return std::nullopt;
  const std::vector<int> first =
      PlaceGroups(alloc.degrees, cluster, [&](int p, int f, int d) {
        return RingOrAllToAllS(cm, cluster, shape, groups[p].load, f, d);
      });
  std::vector<std::vector<int>> rank_sets(lanes.size());
  for (size_t p = 0; p < lanes.size(); ++p) {
    rank_sets[p].resize(alloc.degrees[p]);
    std::iota(rank_sets[p].begin(), rank_sets[p].end(), first[p]);
  }
  return rank_sets;
}

namespace {

// How many of the lightest groups a sequence tries before balanced chunking
// gives up on its lane (keeps it O(K log C) for C groups).
constexpr int kBalanceTries = 4;

// `seqs` (longest first) into `count` groups of `degree` ranks, each onto the
// group with the least work whose memory still holds it (at most
// kBalanceTries tried); empty when one finds no room.
std::vector<std::vector<int>> BalancedChunks(const PlanRequest& request,
                                             const std::vector<int>& seqs,
                                             size_t count, int degree) {
  const CostModel& cm = request.cost;
  using Entry = std::pair<double, size_t>;  // (work in the group, group)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> lightest;
  for (size_t c = 0; c < count; ++c) lightest.push({0.0, c});
  std::vector<double> tokens(count, 0.0);
  std::vector<std::vector<int>> chunks(count);
  std::vector<Entry> tried;
  for (int k : seqs) {
    const Sequence& s = request.sequences[k];
    tried.clear();
    bool placed = false;
    while (!placed && static_cast<int>(tried.size()) < kBalanceTries &&
           !lightest.empty()) {
      Entry e = lightest.top();
      lightest.pop();
      GroupLoad load;
      load.sum_tokens = tokens[e.second];
      load.Add(s);
      if (GroupMemBytes(cm, load, degree) <= cm.mem_capacity) {
        tokens[e.second] += static_cast<double>(s.length_tokens);
        chunks[e.second].push_back(k);
        e.first += SequenceWorkS(cm, s);
        placed = true;
      }
      tried.push_back(e);
    }
    if (!placed) return {};
    for (const Entry& e : tried) lightest.push(e);
  }
  return chunks;
}

// Longest first, ties in their order; a lane already so ordered (the same
// lanes are chunked on several layouts) costs one pass.
void SortLongestFirst(const PlanRequest& request, std::vector<int>& seqs) {
  auto longer = [&](int a, int b) {
    return request.sequences[a].length_tokens >
           request.sequences[b].length_tokens;
  };
  if (!std::is_sorted(seqs.begin(), seqs.end(), longer))
    std::stable_sort(seqs.begin(), seqs.end(), longer);
}

// `seqs` (longest first) first fit into groups of `degree` ranks that fit
// memory.
std::vector<std::vector<int>> FirstFit(const PlanRequest& request,
                                       const std::vector<int>& seqs,
                                       int degree) {
  const CostModel& cm = request.cost;
  // Memory grows with a group's tokens alone, so when the whole lane fits
  // every prefix does, and first fit keeps one group: no search (most lanes).
  GroupLoad whole;
  for (int k : seqs)
    whole.sum_tokens += static_cast<double>(request.sequences[k].length_tokens);
  if (!seqs.empty() && GroupMemBytes(cm, whole, degree) <= cm.mem_capacity)
    return {seqs};
  FirstFitChunks first_fit(seqs.size());
  std::vector<std::vector<int>> chunks;
  for (int k : seqs) {
    const Sequence& s = request.sequences[k];
    const size_t c = first_fit.Find([&](double sum_tokens) {
      GroupLoad load;
      load.sum_tokens = sum_tokens;
      load.Add(s);
      return GroupMemBytes(cm, load, degree) <= cm.mem_capacity;
    });
    if (c == chunks.size()) chunks.emplace_back();
    chunks[c].push_back(k);
    first_fit.Add(c, static_cast<double>(s.length_tokens));
  }
  return chunks;
}

}  // namespace

std::vector<std::vector<int>> LongestFirst(
    const PlanRequest& request, std::vector<std::vector<int>> lanes) {
  for (std::vector<int>& lane : lanes) SortLongestFirst(request, lane);
  return lanes;
}

std::vector<MicroBatchPlan> ChunkLanes(
    const PlanRequest& request, const std::vector<std::vector<int>>& lanes,
    const std::vector<std::vector<int>>& rank_sets, Chunking chunking,
    bool* several) {
  std::vector<MicroBatchPlan> out;
  if (several) *several = false;
  for (size_t p = 0; p < lanes.size(); ++p) {
    const int d = static_cast<int>(rank_sets[p].size());
    std::vector<int> seqs = lanes[p];
    SortLongestFirst(request, seqs);
    std::vector<std::vector<int>> chunks = FirstFit(request, seqs, d);
    if (chunks.size() > 1) {
      if (several) *several = true;
      if (chunking == Chunking::kBalanced) {
        auto balanced = BalancedChunks(request, seqs, chunks.size(), d);
        if (!balanced.empty()) chunks = std::move(balanced);
      }
    }
    if (out.size() < chunks.size()) out.resize(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      GroupPlan g;
      g.ranks = rank_sets[p];
      g.sequences = std::move(chunks[c]);
      out[c].groups.push_back(std::move(g));
    }
  }
  return out;
}

std::vector<std::vector<int>> HeldLayout(int num_ranks,
                                         const std::set<std::vector<int>>& held,
                                         bool largest_first) {
  std::vector<const std::vector<int>*> sets;
  for (const std::vector<int>& s : held)
    if (s.size() > 1) sets.push_back(&s);
  std::stable_sort(sets.begin(), sets.end(), [&](auto* a, auto* b) {
    return largest_first ? a->size() > b->size() : a->size() < b->size();
  });
  std::vector<bool> used(num_ranks, false);
  std::vector<std::vector<int>> layout;
  for (const std::vector<int>* s : sets) {
    if (std::any_of(s->begin(), s->end(), [&](int r) { return used[r]; }))
      continue;
    for (int r : *s) used[r] = true;
    layout.push_back(*s);
  }
  for (int r = 0; r < num_ranks; ++r)
    if (!used[r]) layout.push_back({r});
  return layout;
}

std::optional<std::vector<MicroBatchPlan>> LaneMicroBatchesOn(
    const PlanRequest& request, const std::vector<std::vector<int>>& layout,
    const std::vector<double>& work, const std::vector<int>& order) {
  // Lanes of one degree are interchangeable but for their loads: one
  // min-heap of (load, lane) per degree keeps a sequence's choice O(degrees).
  using Entry = std::pair<double, size_t>;
  std::map<int, std::priority_queue<Entry, std::vector<Entry>, std::greater<>>>
      by_degree;
  for (size_t p = 0; p < layout.size(); ++p)
    by_degree[static_cast<int>(layout[p].size())].push({0.0, p});
  std::vector<std::vector<int>> lanes(layout.size());
  for (int k : order) {
    const int64_t d_min =
        MinDegree(request.cost, GroupLoad::Of(request.sequences[k]));
    int best_d = 0;
    double best_finish = std::numeric_limits<double>::infinity();
    for (auto it = by_degree.lower_bound(static_cast<int>(
             std::min<int64_t>(d_min, std::numeric_limits<int>::max())));
         it != by_degree.end(); ++it) {
      const double finish = (it->second.top().first + work[k]) / it->first;
      if (finish < best_finish) {
        best_finish = finish;
        best_d = it->first;
      }
    }
    if (best_d == 0) return std::nullopt;
    auto& heap = by_degree[best_d];
    auto [load, lane] = heap.top();
    heap.pop();
    heap.push({load + work[k], lane});
    lanes[lane].push_back(k);
  }
  std::vector<std::vector<int>> used_lanes, used_sets;
  for (size_t p = 0; p < layout.size(); ++p) {
    if (lanes[p].empty()) continue;
    used_lanes.push_back(std::move(lanes[p]));
    used_sets.push_back(layout[p]);
  }
  return ChunkLanes(request, used_lanes, used_sets);
}

}  // namespace fcp::planner
