#include "planner/lanes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <utility>

#include "fcp/cost_model.h"
#include "planner/allocation.h"
#include "planner/first_fit.h"
#include "planner/heap.h"
#include "planner/microbatch.h"
#include "planner/placement.h"
#include "planner/realize.h"
#include "planner/refine.h"

namespace fcp::planner {

// The most sequences whose lanes are also opened at all-to-all degrees only
// (LaneGroupings): at 512 sequences on 64 ranks and 8,192 on 1,024 that
// grouping took 14 % and 17 % more planning instructions and changed no plan
// of the study's 92 cases.
constexpr size_t kAllToAllLanesMaxSequences = 256;

namespace {

// The degree rules LaneGroupings opens lanes at (the first: free degrees).
std::vector<LaneDegrees> LaneRules(const PlanRequest& request,
                                   int multiple_of) {
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
  // On at most kAllToAllLanesMaxSequences, at twice that multiple too: each
  // long sequence opens at the fewest ranks that meet the target, which
  // leaves no lane room for a second one, while wider lanes run two or three
  // back to back (issue 32: on 21 ranks, lanes of 4 holding 31k and 29k
  // tokens, and 25k, 22k and 14k, 2.5 % ahead of fcp, whose even lanes
  // needed 2 ranks more than there were). Four times it as well put an
  // Ascend msrvtt batch on 8 ring lanes of 8 that ran 0.4 % slower,
  // simulated, with the presets' coefficients.
  if (request.sequences.size() <= kAllToAllLanesMaxSequences &&
      multiple_of > 1 && 2 * multiple_of < request.cluster.num_ranks) {
    rules.push_back({.multiple_of = 2 * multiple_of});
  }
  // Lanes opened where all-to-all may run are another, on batches of at
  // most kAllToAllLanesMaxSequences: free degrees open a long sequence at
  // the fewest ranks that meet the target, often a ring where a wider
  // all-to-all lane takes short sequences too (issue 32: 16 and 12 ranks of
  // all-to-all, 7 % ahead of fcp's rings on 29 ranks).
  if (request.sequences.size() <= kAllToAllLanesMaxSequences &&
      SomeDegreeRingOnly(request)) {
    rules.push_back({.all_to_all_only = true});
  }
  return rules;
}

}  // namespace

std::vector<LaneGrouping> LaneGroupings(
    const PlanRequest& request, double upper_s, bool dual, int multiple_of,
    const std::vector<std::vector<int>>* free_grouping, DualApprox* prepared) {
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
  const std::vector<LaneDegrees> rules = LaneRules(request, multiple_of);
  // Each sequence keeps its own d_min: a lane narrower than that could not
  // run it (the grouping would then be judged at degrees it never gets).
  std::optional<DualApprox> own;
  DualApprox& dual_approx =
      prepared ? *prepared : own.emplace(request, members);
  const auto dual_rule = [](const LaneDegrees& rule, bool roomiest_too) {
    return DualRule{.aligned_degrees = rule.node_aligned,
                    .multiple_of = rule.multiple_of,
                    .all_to_all_only = rule.all_to_all_only,
                    .roomiest_too = roomiest_too};
  };
  const auto add = [&](std::optional<std::vector<std::vector<int>>> grouping,
                       const LaneDegrees& rule) {
    if (!grouping) return;
    for (const LaneGrouping& earlier : out)
      if (earlier.lanes == *grouping && earlier.degrees == rule) return;
    out.push_back({std::move(*grouping), rule});
  };
  for (const LaneDegrees& rule : rules) {
    if (free_grouping && !rule.node_aligned && rule.multiple_of == 1 &&
        !rule.all_to_all_only) {
      out.push_back({*free_grouping, rule});
    } else {
      add(dual_approx.Group(upper_s, dual_rule(rule, false), &relaxed), rule);
    }
  }
  // On at most kAllToAllLanesMaxSequences, each rule again with the
  // roomiest group tried too (DualRule::roomiest_too; issue 32: a wider
  // random batch 6.3 % behind ref-bisect), and all-to-all lanes priced
  // packed (realize.h) where that prices some degree otherwise: three 37k-
  // token sequences on 16 all-to-all ranks over nodes of 6 priced at the
  // inter-node link alone came to 8.55 s, above the 8.41 s to beat; packed
  // from a node boundary they run 7.80 s (8.3 % behind ref-bisect).
  if (request.sequences.size() > kAllToAllLanesMaxSequences) return out;
  for (const LaneDegrees& rule : rules)
    add(dual_approx.Group(upper_s, dual_rule(rule, true), &relaxed), rule);
  if (rules.back().all_to_all_only && PackingPricesAllToAll(request)) {
    const LaneDegrees packed{.all_to_all_only = true,
                             .all_to_all = AllToAllPricing::kPacked};
    add(DualApprox(relaxed, members, &request.cost, AllToAllPricing::kPacked)
            .Group(upper_s, dual_rule(packed, false)),
        packed);
  }
  return out;
}

namespace {

// Each lane's load.
std::vector<GroupLoad> LoadsOf(const PlanRequest& request,
                               const std::vector<std::vector<int>>& lanes) {
  std::vector<GroupLoad> loads(lanes.size());
  for (size_t p = 0; p < lanes.size(); ++p)
    for (int k : lanes[p]) loads[p].Add(request.sequences[k]);
  return loads;
}

// Rank sets for lanes of `loads` at `degrees`: contiguous runs placed by
// PlaceGroups, each lane priced as one group at its placed time.
std::vector<std::vector<int>> PlaceLanes(const PlanRequest& request,
                                         const std::vector<GroupLoad>& loads,
                                         const std::vector<int>& degrees) {
  const ModelShape* shape = ShapeOf(request);
  const std::vector<int> first =
      PlaceGroups(degrees, request.cluster, [&](int p, int f, int d) {
        return RingOrAllToAllS(request.cost, request.cluster, shape, loads[p],
                               f, d);
      });
  std::vector<std::vector<int>> rank_sets(degrees.size());
  for (size_t p = 0; p < degrees.size(); ++p) {
    rank_sets[p].resize(degrees[p]);
    std::iota(rank_sets[p].begin(), rank_sets[p].end(), first[p]);
  }
  return rank_sets;
}

}  // namespace

std::optional<std::vector<std::vector<int>>> LaneRankSets(
    const PlanRequest& request, const std::vector<std::vector<int>>& lanes,
    const LaneDegrees& degrees) {
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  std::vector<AllocGroup> groups(lanes.size());
  for (size_t p = 0; p < lanes.size(); ++p) {
    if (lanes[p].empty()) continue;
    const Sequence* longest = &request.sequences[lanes[p].front()];
    for (int k : lanes[p]) {
      groups[p].load.Add(request.sequences[k]);
      if (request.sequences[k].length_tokens > longest->length_tokens)
        longest = &request.sequences[k];
    }
    // d_min grows with a load's tokens alone: the lane's largest is its
    // longest sequence's.
    groups[p].min_degree =
        std::max(groups[p].min_degree, MinDegree(cm, GroupLoad::Of(*longest)));
  }
  const ModelShape* shape = ShapeOf(request);
  GroupTimeFn time = degrees.node_aligned
                         ? AlignedRingOrAllToAll(cm, cluster, shape)
                     : degrees.all_to_all == AllToAllPricing::kPacked
                         ? PackedRingOrAllToAll(cm, cluster, shape)
                         : BestCaseRingOrAllToAll(cm, cluster, shape);
  if (degrees.multiple_of > 1 || degrees.all_to_all_only) {
    // +inf elsewhere: the allocator's monotone envelope grants only these.
    time = [time = std::move(time), g = degrees.multiple_of,
            a2a = degrees.all_to_all_only,
            shape](const AllocGroup& group, int d) {
      return DegreeAllowed(shape, d, g, a2a)
                 ? time(group, d)
                 : std::numeric_limits<double>::infinity();
    };
  }
  const Allocation alloc = AllocateFast(groups, cluster.num_ranks, time);
  // An infinite makespan: some lane has no allowed degree within N ranks.
  if (!alloc.feasible || !std::isfinite(alloc.makespan_s)) return std::nullopt;
  std::vector<GroupLoad> loads;
  for (const AllocGroup& group : groups) loads.push_back(group.load);
  return PlaceLanes(request, loads, alloc.degrees);
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

namespace {

// Each rank set's size: the lanes' degrees.
std::vector<int> DegreesOf(const std::vector<std::vector<int>>& rank_sets) {
  std::vector<int> degrees;
  degrees.reserve(rank_sets.size());
  for (const std::vector<int>& ranks : rank_sets)
    degrees.push_back(static_cast<int>(ranks.size()));
  return degrees;
}

// Each sequence's d_min (MinDegree), indexed by sequence.
std::vector<int64_t> MinDegrees(const PlanRequest& request) {
  std::vector<int64_t> d_min;
  d_min.reserve(request.sequences.size());
  for (const Sequence& s : request.sequences)
    d_min.push_back(MinDegree(request.cost, GroupLoad::Of(s)));
  return d_min;
}

// DealOnto onto lanes of `degrees` ranks (where they lie does not matter),
// each sequence's d_min given.
std::optional<std::vector<std::vector<int>>> DealOntoDegrees(
    const std::vector<int>& degrees, const std::vector<int64_t>& d_min,
    const std::vector<double>& work, const std::vector<int>& order) {
  // Lanes of one degree are interchangeable but for their loads: one
  // min-heap of (load, lane) per degree, degrees ascending, keeps a
  // sequence's choice O(degrees); each heap's least load is kept in a flat
  // array for that scan.
  using Entry = std::pair<double, size_t>;
  using Heap = std::vector<Entry>;  // under PairGreater: least load on top
  std::vector<std::pair<int, size_t>> by_size;  // (degree, lane)
  for (size_t p = 0; p < degrees.size(); ++p)
    by_size.push_back({degrees[p], p});
  std::sort(by_size.begin(), by_size.end());
  std::vector<int> degree;    // per degree class, ascending
  std::vector<Heap> heaps;    // its lanes by load
  std::vector<double> least;  // its least load
  for (const auto& [d, p] : by_size) {
    if (degree.empty() || degree.back() != d) {
      degree.push_back(d);
      heaps.emplace_back();
      least.push_back(0.0);
    }
    heaps.back().push_back({0.0, p});  // lanes ascending: already a heap
  }
  // Each sequence's lane, in `order`; the lanes are filled after, sized once.
  std::vector<size_t> lane_of;
  lane_of.reserve(order.size());
  std::vector<size_t> sizes(degrees.size(), 0);
  for (int k : order) {
    size_t best = degree.size();
    double best_finish = std::numeric_limits<double>::infinity();
    for (size_t j = static_cast<size_t>(
             std::lower_bound(degree.begin(), degree.end(), d_min[k]) -
             degree.begin());
         j < degree.size(); ++j) {
      const double finish = (least[j] + work[k]) / degree[j];
      if (finish < best_finish) {
        best_finish = finish;
        best = j;
      }
    }
    if (best == degree.size()) return std::nullopt;
    const auto [load, lane] = heaps[best].front();
    ReplaceHeapTop(heaps[best], Entry{load + work[k], lane}, PairGreater{});
    least[best] = heaps[best].front().first;
    lane_of.push_back(lane);
    ++sizes[lane];
  }
  std::vector<std::vector<int>> lanes(degrees.size());
  for (size_t p = 0; p < lanes.size(); ++p) lanes[p].reserve(sizes[p]);
  for (size_t i = 0; i < order.size(); ++i)
    lanes[lane_of[i]].push_back(order[i]);
  return lanes;
}

}  // namespace

std::optional<std::vector<std::vector<int>>> DealOnto(
    const PlanRequest& request, const std::vector<std::vector<int>>& layout,
    const std::vector<double>& work, const std::vector<int>& order) {
  return DealOntoDegrees(DegreesOf(layout), MinDegrees(request), work, order);
}

std::optional<std::vector<MicroBatchPlan>> LaneMicroBatchesOn(
    const PlanRequest& request, const std::vector<std::vector<int>>& layout,
    const std::vector<double>& work, const std::vector<int>& order) {
  auto lanes = DealOnto(request, layout, work, order);
  if (!lanes) return std::nullopt;
  return ChunkLanes(request, *lanes, layout);
}

std::vector<std::vector<int>> LanesOf(
    const std::vector<MicroBatchPlan>& plan,
    std::vector<std::vector<int>>* rank_sets) {
  int num_ranks = 0;
  for (const MicroBatchPlan& mb : plan)
    for (const GroupPlan& g : mb.groups)
      for (int r : g.ranks) num_ranks = std::max(num_ranks, r + 1);
  // A group is on lane p when each of its ranks is and it has as many.
  std::vector<int> owner(num_ranks, -1);
  std::vector<std::vector<int>> lanes, sets;
  for (const MicroBatchPlan& mb : plan) {
    for (const GroupPlan& g : mb.groups) {
      if (g.ranks.empty()) return {};
      int p = owner[g.ranks.front()];
      if (p < 0) {
        p = static_cast<int>(lanes.size());
        for (int r : g.ranks) {
          if (owner[r] >= 0) return {};
          owner[r] = p;
        }
        lanes.emplace_back();
        sets.push_back(g.ranks);
      } else if (g.ranks.size() != sets[p].size() ||
                 std::any_of(g.ranks.begin(), g.ranks.end(),
                             [&](int r) { return owner[r] != p; })) {
        return {};
      }
      lanes[p].insert(lanes[p].end(), g.sequences.begin(), g.sequences.end());
    }
  }
  if (rank_sets) *rank_sets = std::move(sets);
  return lanes;
}

namespace {

// How many of the fastest lanes a polishing step tries for each sequence.
constexpr size_t kPolishTargets = 8;
// A lane of several groups priced again costs one more trial per this many
// of its sequences (`fcp eval noise`, whose lanes hold up to hundreds of
// sequences in tens of groups, took 1.4x as long with one trial per lane).
constexpr size_t kSequencesPerTrial = 8;

// Up to kPolishTargets lanes, held in place: a polishing step asks for them
// per sequence and per ejection, and a vector's allocation there was a tenth
// of the planning instructions on a batch of 22 sequences.
struct PolishTargets {
  std::array<size_t, kPolishTargets> lanes{};
  size_t count = 0;
  bool empty() const { return count == 0; }
  size_t front() const { return lanes[0]; }
  const size_t* begin() const { return lanes.data(); }
  const size_t* end() const { return lanes.data() + count; }
};

// Prices lanes on fixed rank sets as ChunkLanes and UseAllToAllWhereFaster
// make their groups (each rank set's link and all-to-all bandwidth found
// once).
class LanePricer {
 public:
  LanePricer(const PlanRequest& request,
             const std::vector<std::vector<int>>& rank_sets)
      : request_(request), shape_(ShapeOf(request)) {
    for (const std::vector<int>& ranks : rank_sets) {
      RankSet set{.degree = static_cast<int>(ranks.size())};
      set.link = OnOneNode(request.cluster, ranks) ? Link::kIntraNode
                                                   : Link::kInterNode;
      set.all_to_all = AllToAllAllowed(shape_, set.degree);
      if (set.all_to_all) {
        set.all_to_all_bw =
            AllToAllBandwidthOnRanks(request.cost, request.cluster, ranks);
        set.factors = AllToAllFactorsFor(*shape_, set.degree);
      }
      sets_.push_back(set);
    }
  }
  int degree(size_t p) const { return sets_[p].degree; }
  // Whether `load` fits lane p's ranks in one group (first fit then keeps
  // the lane whole).
  bool FitsOnce(size_t p, const GroupLoad& load) const {
    return GroupMemBytes(request_.cost, load, sets_[p].degree) <=
           request_.cost.mem_capacity;
  }
  // One group of `load` on lane p's ranks, ring or all-to-all (s).
  double GroupS(size_t p, const GroupLoad& load) const {
    const RankSet& set = sets_[p];
    const double ring = GroupTimeS(request_.cost, load, set.degree, set.link);
    if (!set.all_to_all) return ring;
    return std::min(ring,
                    AllToAllGroupTimePartsS(request_.cost, set.factors, load,
                                            set.degree, set.all_to_all_bw)
                        .total_s);
  }
  // Lane p's time holding `seqs` (longest first) of load `load`: one group's
  // when the load fits its ranks at once, else TimeS (0 when empty).
  double LaneS(size_t p, const std::vector<int>& seqs,
               const GroupLoad& load) const {
    if (seqs.empty()) return 0;
    return FitsOnce(p, load) ? GroupS(p, load) : TimeS(p, seqs);
  }
  // Lane p's time holding `seqs` (longest first): its groups', split first
  // fit as FirstFit (ChunkLanes) splits them (FirstFitChunks: a lane of
  // 10^6 sequences in thousands of groups), each kept as its load only.
  double TimeS(size_t p, const std::vector<int>& seqs) const {
    std::vector<GroupLoad> groups;
    FirstFitChunks first_fit(seqs.size());
    for (int k : seqs) {
      const Sequence& s = request_.sequences[k];
      const size_t g = first_fit.Find([&](double tokens) {
        GroupLoad load;
        load.sum_tokens = tokens;
        load.Add(s);
        return GroupMemBytes(request_.cost, load, sets_[p].degree) <=
               request_.cost.mem_capacity;
      });
      if (g == groups.size()) groups.emplace_back();
      groups[g].Add(s);
      first_fit.Add(g, static_cast<double>(s.length_tokens));
    }
    double total_s = 0;
    for (const GroupLoad& load : groups) total_s += GroupS(p, load);
    return total_s;
  }
  // Whether lanes p and q price every load alike (same degree, link and
  // all-to-all bandwidth): dealing onto either of two such empty lanes is the
  // same deal.
  bool PricedAlike(size_t p, size_t q) const {
    const RankSet& a = sets_[p];
    const RankSet& b = sets_[q];
    return a.degree == b.degree && a.link == b.link &&
           a.all_to_all == b.all_to_all && a.all_to_all_bw == b.all_to_all_bw;
  }

 private:
  struct RankSet {
    int degree = 1;
    Link link = Link::kIntraNode;
    bool all_to_all = false;
    double all_to_all_bw = 0;
    AllToAllFactors factors{};  // AllToAllFactorsFor(shape, degree)
  };
  const PlanRequest& request_;
  const ModelShape* shape_;
  std::vector<RankSet> sets_;
};

// Sequence `seq` leaves lane `from` for lane `to`.
struct Move {
  int seq = 0;
  size_t from = 0, to = 0;
};

// Up to three moves made together: a move, a swap, or either followed by
// one ejection.
struct LaneChange {
  std::array<Move, 3> moves;
  size_t count = 0;
  LaneChange With(Move m) const {
    LaneChange c = *this;
    c.moves[c.count++] = m;
    return c;
  }
};

// PolishLanes' state: the lanes (each longest first), their loads and times,
// the lanes ordered by time, and the trials left. A lane that fits its ranks
// in one group is priced from its load alone (O(1) per trial).
class LanePolisher {
 public:
  LanePolisher(const PlanRequest& request, std::vector<std::vector<int>>& lanes,
               const std::vector<std::vector<int>>& rank_sets, int max_trials)
      : request_(request),
        lanes_(lanes),
        price_(request, rank_sets),
        loads_(lanes.size()),
        time_s_(lanes.size()),
        d_min_(request.sequences.size(), 0),
        trials_left_(max_trials) {
    for (size_t p = 0; p < lanes_.size(); ++p) {
      SortLongestFirst(request, lanes_[p]);
      for (int k : lanes_[p]) loads_[p].Add(request.sequences[k]);
      time_s_[p] = LaneS(p);
      by_time_.insert({time_s_[p], p});
    }
  }

  double MakespanS() const {
    return by_time_.empty() ? 0.0 : by_time_.rbegin()->first;
  }
  size_t SlowestLane() const {
    return by_time_.empty() ? 0 : by_time_.rbegin()->second;
  }
  // One change out of the slowest lane, the best found: single moves and
  // swaps, or with `chains` ejection chains (Settle); false when none makes
  // it faster (or no trial is left).
  bool Step(bool chains) {
    if (lanes_.size() < 2 || trials_left_ <= 0) return false;
    chains_ = chains;
    slow_ = by_time_.rbegin()->second;
    best_.reset();
    best_s_ = time_s_[slow_] * (1 - 1e-12);
    for (size_t i = 0; i < lanes_[slow_].size() && trials_left_ > 0; ++i) {
      const int k = lanes_[slow_][i];
      const PolishTargets targets = Targets(k, slow_, slow_);
      if (targets.empty()) continue;
      // The slowest lane without k, wherever k goes.
      const double rest_s =
          PricedS(slow_, LaneChange{}.With({k, slow_, targets.front()}));
      for (size_t other : targets) {
        const LaneChange move = LaneChange{}.With({k, slow_, other});
        if (rest_s < best_s_) Settle(move, rest_s);
        Swaps(move);
      }
    }
    if (!best_) return false;
    Apply(*best_);
    return true;
  }

 private:
  // Lane p's time as it is (s): from its load when it runs as one group.
  double LaneS(size_t p) const { return price_.LaneS(p, lanes_[p], loads_[p]); }
  // Lane p's time after `change` (s); one trial.
  double PricedS(size_t p, const LaneChange& change) {
    --trials_left_;
    GroupLoad load = loads_[p];
    std::ptrdiff_t size = static_cast<std::ptrdiff_t>(lanes_[p].size());
    for (size_t m = 0; m < change.count; ++m) {
      const Move& move = change.moves[m];
      const Sequence& s = request_.sequences[move.seq];
      if (move.to == p) load.Add(s), ++size;
      if (move.from == p) load.Remove(s), --size;
    }
    if (size == 0) return 0;
    if (price_.FitsOnce(p, load)) return price_.GroupS(p, load);
    // A lane that runs as one group is not split: the second group is a
    // second pass over the lane's ranks, rarely faster, and splitting costs
    // O(size · groups) where the load prices it in O(1).
    if (price_.FitsOnce(p, loads_[p]))
      return std::numeric_limits<double>::infinity();
    // A lane of several groups is split again, O(size · groups): it costs
    // a trial per kSequencesPerTrial of its sequences besides.
    SequencesAfter(p, change, after_);
    trials_left_ -= static_cast<int>(after_.size() / kSequencesPerTrial);
    return price_.TimeS(p, after_);
  }
  // Lane p's sequences after `change`, longest first, into `seqs`.
  void SequencesAfter(size_t p, const LaneChange& change,
                      std::vector<int>& seqs) const {
    seqs = lanes_[p];
    for (size_t m = 0; m < change.count; ++m) {
      const Move& move = change.moves[m];
      if (move.from == p)
        seqs.erase(std::find(seqs.begin(), seqs.end(), move.seq));
      if (move.to == p) {
        const int64_t len = request_.sequences[move.seq].length_tokens;
        seqs.insert(
            std::find_if(seqs.begin(), seqs.end(),
                         [&](int other) {
                           return request_.sequences[other].length_tokens < len;
                         }),
            move.seq);
      }
    }
  }
  void Apply(const LaneChange& change) {
    std::array<size_t, 6> touched{};
    size_t n = 0;
    for (size_t m = 0; m < change.count; ++m) {
      touched[n++] = change.moves[m].from;
      touched[n++] = change.moves[m].to;
    }
    std::sort(touched.begin(), touched.begin() + n);
    n = std::unique(touched.begin(), touched.begin() + n) - touched.begin();
    for (size_t i = 0; i < n; ++i) {
      const size_t p = touched[i];
      SequencesAfter(p, change, after_);
      lanes_[p].swap(after_);
      by_time_.erase({time_s_[p], p});
      loads_[p] = {};
      for (int k : lanes_[p]) loads_[p].Add(request_.sequences[k]);
      time_s_[p] = LaneS(p);
      by_time_.insert({time_s_[p], p});
    }
  }
  int64_t MinDegreeOf(int k) {
    if (d_min_[k] == 0)
      d_min_[k] =
          MinDegree(request_.cost, GroupLoad::Of(request_.sequences[k]));
    return d_min_[k];
  }
  // The kPolishTargets fastest lanes other than `skip1` and `skip2` whose
  // ranks can hold `k`.
  PolishTargets Targets(int k, size_t skip1, size_t skip2) {
    PolishTargets out;
    for (const auto& [time_s, p] : by_time_) {
      if (out.count == kPolishTargets) break;
      if (p != skip1 && p != skip2 && price_.degree(p) >= MinDegreeOf(k))
        out.lanes[out.count++] = p;
    }
    return out;
  }
  // `change` leaving its lanes at `after` (lane, time in s). Rises count
  // against the worst of those lanes, at most the makespan after: counted
  // at least as often as against the makespan.
  void Consider(const LaneChange& change,
                std::initializer_list<std::pair<size_t, double>> after) {
    double worse_s = 0, rise_s = 0;
    for (const auto& [p, t] : after) worse_s = std::max(worse_s, t);
    for (const auto& [p, t] : after) {
      if (p != slow_ && RiseCounts(t, worse_s))
        rise_s += std::max(0.0, t - time_s_[p]);
    }
    const double gain_s = time_s_[slow_] - worse_s;
    if (worse_s < best_s_ && gain_s >= kPolishMinGainPerRise * rise_s) {
      best_s_ = worse_s;
      best_ = change;
    }
  }
  // `move` (its first move out of the slowest lane) with each sequence of
  // the destination that the slowest lane's ranks can hold moved back.
  void Swaps(const LaneChange& move) {
    const size_t other = move.moves[0].to;
    for (size_t j = 0; j < lanes_[other].size() && trials_left_ > 0; ++j) {
      const int u = lanes_[other][j];
      if (MinDegreeOf(u) > price_.degree(slow_)) continue;
      const LaneChange swap = move.With({u, other, slow_});
      const double here_s = PricedS(slow_, swap);
      if (here_s < best_s_) Settle(swap, here_s);
    }
  }
  // `change` leaves the slowest lane at `slow_s`; its destination (the
  // first move's) is priced. When that ends too slow, each of its own
  // sequences is moved on to a third lane: an ejection chain, as lanes tied
  // at the makespan block every single move and swap.
  void Settle(const LaneChange& change, double slow_s) {
    if (trials_left_ <= 0) return;
    const size_t other = change.moves[0].to;
    const double to_s = PricedS(other, change);
    if (to_s < best_s_) {
      Consider(change, {{slow_, slow_s}, {other, to_s}});
      return;
    }
    if (!chains_) return;
    for (size_t j = 0; j < lanes_[other].size() && trials_left_ > 0; ++j) {
      const int v = lanes_[other][j];
      if (change.count > 1 && change.moves[1].seq == v) continue;  // swapped
      const PolishTargets thirds = Targets(v, slow_, other);
      if (thirds.empty()) continue;
      // The destination without v, whichever lane v goes on to.
      const double kept_s =
          PricedS(other, change.With({v, other, thirds.front()}));
      if (kept_s >= best_s_) continue;
      for (size_t third : thirds) {
        if (trials_left_ <= 0) break;
        const LaneChange chain = change.With({v, other, third});
        Consider(
            chain,
            {{slow_, slow_s}, {other, kept_s}, {third, PricedS(third, chain)}});
      }
    }
  }

  const PlanRequest& request_;
  std::vector<std::vector<int>>& lanes_;
  const LanePricer price_;
  std::vector<GroupLoad> loads_;
  std::vector<double> time_s_;
  std::set<std::pair<double, size_t>> by_time_;  // (time, lane), fastest first
  std::vector<int64_t> d_min_;                   // 0: not computed yet
  std::vector<int> after_;  // SequencesAfter's, reused (planning time)
  int trials_left_;
  bool chains_ = false;
  size_t slow_ = 0;
  std::optional<LaneChange> best_;
  double best_s_ = 0;
};

}  // namespace

Polished PolishLanes(const PlanRequest& request,
                     std::vector<std::vector<int>>& lanes,
                     const std::vector<std::vector<int>>& rank_sets,
                     int max_trials) {
  LanePolisher polisher(request, lanes, rank_sets, max_trials);
  // The cheap neighbourhood first; chains only where it is exhausted.
  Polished out;
  while (polisher.Step(/*chains=*/false) || polisher.Step(/*chains=*/true))
    ++out.changes;
  out.makespan_s = polisher.MakespanS();
  out.slowest = polisher.SlowestLane();
  return out;
}

namespace {

// The lane degrees one rank away from `degrees` (sum <= num_ranks), each
// sorted, none equal to `degrees`: a rank moved from one lane to another, to
// a lane of its own, or from the idle ranks to a lane; a lane halved; two
// lanes merged, or two merged and the rank that frees given to a lane of
// degree `slow`. Before a fresh deal lanes of one degree are alike, so only
// the multiset of degrees matters. Those that change a lane of degree `slow`
// (the slowest lane's) come first.
std::vector<std::vector<int>> DegreeNeighbours(std::vector<int> degrees,
                                               int slow, int num_ranks) {
  std::sort(degrees.begin(), degrees.end());
  std::vector<int> sizes = degrees;  // one per degree class, the slow first
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::stable_partition(sizes.begin(), sizes.end(),
                        [slow](int d) { return d == slow; });
  std::set<std::vector<int>> seen = {degrees};
  std::vector<std::vector<int>> out;
  // `degrees` with one lane of each of `gone` removed and `added` added.
  const auto add = [&](std::initializer_list<int> gone,
                       std::initializer_list<int> added) {
    std::vector<int> next = degrees;
    for (int d : gone) next.erase(std::find(next.begin(), next.end(), d));
    next.insert(next.end(), added.begin(), added.end());
    std::sort(next.begin(), next.end());
    if (seen.insert(next).second) out.push_back(std::move(next));
  };
  // Whether `degrees` has a lane for each of `gone` (repeats counted).
  const auto holds = [&](std::initializer_list<int> gone) {
    return std::all_of(gone.begin(), gone.end(), [&](int d) {
      return std::count(gone.begin(), gone.end(), d) <=
             std::count(degrees.begin(), degrees.end(), d);
    });
  };
  if (num_ranks > std::accumulate(degrees.begin(), degrees.end(), 0)) {
    add({}, {1});
    for (int x : sizes) add({x}, {x + 1});
  }
  for (int x : sizes) {
    if (x >= 2) {
      add({x}, {x - 1, 1});
      add({x}, {x - x / 2, x / 2});
    }
    const bool two = std::count(degrees.begin(), degrees.end(), x) >= 2;
    for (int y : sizes) {
      if (y == x && !two) continue;
      add({x, y}, {x + y});
      if (x >= 2) add({x, y}, {x - 1, y + 1});
      if (y >= 2) add({x, y}, {x + 1, y - 1});
      // Two lanes merged and the rank that frees given to the slowest: each
      // step alone may leave the makespan where it is (issue 32: lanes of
      // 11, 2 and 2 ranks on 6-rank nodes, where 12 and 3 fill two nodes and
      // a third).
      if (holds({x, y, slow})) add({x, y, slow}, {x + y - 1, slow + 1});
    }
  }
  return out;
}

// The most sequences DealSearch deals (PolishOrDealBelow), and a batch small
// enough for ReshapeLanes to screen its neighbours by time (DealScreened)
// and polish more of them: on more, a depth-first search within its budget
// only moves the last few sequences dealt, and pricing lanes of hundreds of
// sequences took a third of the planning instructions on Ascend go-src (64
// ranks, gbs 1,024).
constexpr size_t kDealSearchMaxSequences = 64;

// Every sequence (in `order`, the heaviest first) onto the lane of `degrees`
// ranks (of at least its d_min) whose time as one group (`time`) it leaves
// lowest: LPT by time. Dealing by work over degree (DealOntoDegrees) takes
// a lane's work to shrink as 1/d, while the time of all-to-all and of rings
// across nodes do not. nullopt when some sequence fits no lane.
std::optional<std::vector<std::vector<int>>> DealByTime(
    const PlanRequest& request, const std::vector<int>& degrees,
    const std::vector<int64_t>& d_min, const std::vector<int>& order,
    const GroupTimeFn& time) {
  std::vector<AllocGroup> groups(degrees.size());
  std::vector<std::vector<int>> lanes(degrees.size());
  for (int k : order) {
    size_t best = degrees.size();
    double best_s = std::numeric_limits<double>::infinity();
    for (size_t p = 0; p < degrees.size(); ++p) {
      if (d_min[k] > degrees[p]) continue;
      AllocGroup grown = groups[p];
      grown.load.Add(request.sequences[k]);
      const double t = time(grown, degrees[p]);
      if (t < best_s) {
        best_s = t;
        best = p;
      }
    }
    if (best == degrees.size()) return std::nullopt;
    groups[best].load.Add(request.sequences[k]);
    lanes[best].push_back(k);
  }
  return lanes;
}

// Every sequence dealt afresh onto lanes of `degrees` ranks (DealOnto; on
// small batches DealByTime at `best_case`), with the makespan of the lanes
// as one group each at their best-case times (`best_case`: memory relaxed,
// placement ignored), a screen far cheaper than placing and pricing them.
// Dealt by work, which takes a lane's time to fall as 1/d, lanes of 3 and 1
// ranks merged into 4 of all-to-all screened behind two neighbours that
// polished slower, where they were 8.4 % faster (issue 32: 28 ranks,
// ref-bisect ahead). nullopt when some sequence fits no lane.
struct Screened {
  std::vector<int> degrees;
  std::vector<std::vector<int>> lanes;
  double makespan_s = 0;
};
std::optional<Screened> DealScreened(const PlanRequest& request,
                                     const std::vector<int>& degrees,
                                     const std::vector<int64_t>& d_min,
                                     const std::vector<double>& work,
                                     const std::vector<int>& order,
                                     const GroupTimeFn& best_case) {
  auto lanes = order.size() <= kDealSearchMaxSequences
                   ? DealByTime(request, degrees, d_min, order, best_case)
                   : DealOntoDegrees(degrees, d_min, work, order);
  if (!lanes) return std::nullopt;
  Screened out;
  out.degrees = degrees;
  for (size_t p = 0; p < lanes->size(); ++p) {
    AllocGroup lane;
    for (int k : (*lanes)[p]) lane.load.Add(request.sequences[k]);
    out.makespan_s = std::max(out.makespan_s, best_case(lane, degrees[p]));
  }
  out.lanes = std::move(*lanes);
  return out;
}

// How far below the makespan to beat DealBelow aims, tightest first.
constexpr double kDealBelowMargins[] = {1e-3, 3e-4, 1e-4};

// Every sequence (in `order`, the heaviest first) onto the lane (of
// `num_lanes`, priced by `price`) whose time it leaves closest below
// `target_s` (best fit at a target, as the dual approximation fills groups);
// nullopt when some sequence fits below it nowhere. Where lanes end within a
// fraction of a percent of each other this packs tighter than LPT by work.
// Every lane is one group, or with `several_groups` a lane whose load
// outgrows its ranks' memory runs as several, split first fit in the order
// dealt as ChunkLanes splits it, its time theirs summed. Held to one group,
// lanes that run several micro-batches were left to the polishing (issue
// 32: Ascend go-src, 512 sequences on 64 ranks, 0.29 % behind ref-share,
// whose deal on the same degrees fills every lane to the longest
// sequence's time).
std::optional<std::vector<std::vector<int>>> DealBelow(
    const PlanRequest& request, const LanePricer& price, size_t num_lanes,
    const std::vector<int64_t>& d_min, const std::vector<int>& order,
    double target_s, bool several_groups) {
  struct Lane {
    std::vector<GroupLoad> groups;
    std::vector<double> group_s;  // each group's time
    double time_s = 0;
  };
  std::vector<Lane> lanes(num_lanes);
  std::vector<std::vector<int>> dealt(num_lanes);
  // The group of lane p that sequence s joins first fit (groups.size(): a
  // new one), and the lane's time with it there.
  const auto join = [&](size_t p, const Sequence& s) {
    const Lane& lane = lanes[p];
    for (size_t g = 0; g < lane.groups.size(); ++g) {
      GroupLoad load = lane.groups[g];
      load.Add(s);
      if (!price.FitsOnce(p, load)) continue;
      return std::pair(g,
                       lane.time_s - lane.group_s[g] + price.GroupS(p, load));
    }
    if (!several_groups && !lane.groups.empty())
      return std::pair(lane.groups.size(),
                       std::numeric_limits<double>::infinity());
    GroupLoad alone;
    alone.Add(s);
    return std::pair(lane.groups.size(), lane.time_s + price.GroupS(p, alone));
  };
  for (int k : order) {
    const Sequence& s = request.sequences[k];
    size_t best = num_lanes, best_group = 0;
    double best_s = -1;
    for (size_t p = 0; p < num_lanes; ++p) {
      if (d_min[k] > price.degree(p)) continue;
      const auto [g, t] = join(p, s);
      if (t <= target_s && t > best_s) {
        best_s = t;
        best = p;
        best_group = g;
      }
    }
    if (best == num_lanes) return std::nullopt;
    Lane& lane = lanes[best];
    if (best_group == lane.groups.size()) {
      lane.groups.emplace_back();
      lane.group_s.push_back(0);
    }
    lane.groups[best_group].Add(s);
    lane.group_s[best_group] += best_s - lane.time_s;
    lane.time_s = best_s;
    dealt[best].push_back(k);
  }
  return dealt;
}

// DealBelow at the lowest target it meets found by bisection between
// kDeepestDealRange and kDealBelowMargins[0] below `beat_s` (to a ratio of
// 1.0002, at most 12 targets); nullopt when it meets none. The margins stop
// a fraction of a percent below: lanes that a best fit can balance further
// end lower (issue 32: wider random batches, lanes of 5, 4, 3, 3 and 1 ranks
// holding 33 sequences, 0.19 % behind ref-bisect, which bisects its target
// this way).
constexpr double kDeepestDealRange = 0.1;
// The same past kDealSearchMaxSequences, where each deal prices hundreds of
// sequences on every lane (lanes of several groups, DealtAsSeveralGroups):
// 7 targets instead of 12. The heuristics' deals that it was added for were
// 0.3 % below fcp's (Ascend go-src, 512 sequences).
constexpr double kDeepestDealRangeLarge = 0.02;
std::optional<std::vector<std::vector<int>>> DeepestDealBelow(
    const PlanRequest& request, const LanePricer& price, size_t num_lanes,
    const std::vector<int64_t>& d_min, const std::vector<int>& order,
    double beat_s, bool several_groups) {
  double lo_s = beat_s * (1 - (order.size() <= kDealSearchMaxSequences
                                   ? kDeepestDealRange
                                   : kDeepestDealRangeLarge));
  double hi_s = beat_s * (1 - kDealBelowMargins[0]);
  std::optional<std::vector<std::vector<int>>> deepest;
  for (int step = 0; step < 12 && hi_s / lo_s > 1.0002; ++step) {
    const double target_s = std::sqrt(lo_s * hi_s);
    if (auto deal = DealBelow(request, price, num_lanes, d_min, order, target_s,
                              several_groups)) {
      deepest = std::move(deal);
      hi_s = target_s;
    } else {
      lo_s = target_s;
    }
  }
  return deepest;
}

// The deal of every sequence onto `num_lanes` lanes (priced by `price` as
// PolishLanes prices them, a lane of several groups split first fit in the
// order dealt) whose slowest lane is fastest, below `beat_s`: depth first,
// the heaviest sequence first (`order`), each onto the lanes it leaves
// fastest first, a branch cut where a lane reaches the best makespan found
// (the first deal is greedy by time, the rest only improve on it). Exact on
// a few lanes and tens of sequences; elsewhere the best found in
// `max_pricings` lane times priced. The moves, swaps and chains of
// PolishLanes and the deal below the makespan leave deals that only a
// rotation of several sequences over three lanes reaches (issue 32:
// heuristics_test, 3 lanes of 2 ranks, 0.05 % behind ref-grow). nullopt
// when none is below `beat_s`.
class DealSearch {
 public:
  DealSearch(const PlanRequest& request, const LanePricer& price,
             size_t num_lanes, const std::vector<int64_t>& d_min,
             const std::vector<int>& order, double beat_s, int64_t max_pricings)
      : request_(request),
        price_(price),
        d_min_(d_min),
        order_(order),
        best_s_(beat_s),
        pricings_left_(max_pricings),
        loads_(num_lanes),
        lanes_(num_lanes),
        options_(order.size()) {}

  std::optional<std::vector<std::vector<int>>> Run() {
    Deal(0, 0.0);
    return best_;
  }

 private:
  // Deals order_[i..] with the lanes at makespan `makespan_s` so far.
  void Deal(size_t i, double makespan_s) {
    if (i == order_.size()) {
      best_s_ = makespan_s;
      best_ = lanes_;
      return;
    }
    const int k = order_[i];
    std::vector<std::pair<double, size_t>>& options = options_[i];
    options.clear();
    for (size_t p = 0; p < lanes_.size(); ++p) {
      if (d_min_[k] > price_.degree(p) || IsTwinOfEarlierEmpty(p)) continue;
      // A lane of several groups is priced from its sequences (TimeS).
      pricings_left_ -=
          1 + static_cast<int64_t>(lanes_[p].size() / kSequencesPerTrial);
      if (pricings_left_ < 0) return;
      GroupLoad load = loads_[p];
      load.Add(request_.sequences[k]);
      lanes_[p].push_back(k);
      const double t = price_.LaneS(p, lanes_[p], load);
      lanes_[p].pop_back();
      if (t < best_s_) options.emplace_back(t, p);
    }
    std::sort(options.begin(), options.end());
    for (const auto& [t, p] : options) {
      if (t >= best_s_) return;
      const GroupLoad before = loads_[p];
      loads_[p].Add(request_.sequences[k]);
      lanes_[p].push_back(k);
      Deal(i + 1, std::max(makespan_s, t));
      lanes_[p].pop_back();
      loads_[p] = before;
    }
  }
  // An empty lane priced like an earlier empty one: the same deal.
  bool IsTwinOfEarlierEmpty(size_t p) const {
    if (!lanes_[p].empty()) return false;
    for (size_t q = 0; q < p; ++q)
      if (lanes_[q].empty() && price_.PricedAlike(p, q)) return true;
    return false;
  }

  const PlanRequest& request_;
  const LanePricer& price_;
  const std::vector<int64_t>& d_min_;
  const std::vector<int>& order_;
  double best_s_;
  int64_t pricings_left_;
  std::vector<GroupLoad> loads_;
  std::vector<std::vector<int>> lanes_;
  // Each depth's lanes to try, (time, lane), kept between calls (planning
  // time: one allocation per node searched).
  std::vector<std::vector<std::pair<double, size_t>>> options_;
  std::optional<std::vector<std::vector<int>>> best_;
};

// Each lane's time on its rank set (s), as PolishLanes prices it; `lanes`
// longest first.
std::vector<double> LaneTimesS(const PlanRequest& request,
                               const LanePricer& price,
                               const std::vector<std::vector<int>>& lanes) {
  const std::vector<GroupLoad> loads = LoadsOf(request, lanes);
  std::vector<double> out;
  for (size_t p = 0; p < lanes.size(); ++p)
    out.push_back(price.LaneS(p, lanes[p], loads[p]));
  return out;
}

// Whether lanes on the same rank sets (priced by `price`), at `after` (s per
// lane) where they were at `before`, save on the makespan at least
// kPolishMinGainPerRise of what they add to the lanes narrower than the
// slowest that end near the makespan (RiseCounts): PolishLanes' rule for one
// change, for a whole deal (issue 32: Ascend go-src, 64 ranks, gbs 16, dealt
// below the makespan, moved work from a 63-rank lane onto a single rank for
// 0.02 % in the estimate and ran 0.5 % slower simulated). Work moved off the
// slowest lane onto lanes at least as wide is moved the way the estimates err
// (kPolishMinGainPerRise): counting it refused a deal on 18 lanes of 128 ranks
// that filled the wide lanes from single ranks, 0.1 % faster in the estimate
// (Ascend go-src, 512 sequences).
bool GainsEnough(const LanePricer& price, const std::vector<double>& before,
                 const std::vector<double>& after) {
  const size_t slow = static_cast<size_t>(
      std::max_element(before.begin(), before.end()) - before.begin());
  const double makespan_s = *std::max_element(after.begin(), after.end());
  double rise_s = 0;
  for (size_t p = 0; p < before.size(); ++p)
    if (p != slow && price.degree(p) < price.degree(slow) &&
        RiseCounts(after[p], makespan_s))
      rise_s += std::max(0.0, after[p] - before[p]);
  const double gain_s = before[slow] - makespan_s;
  return gain_s >= kPolishMinGainPerRise * rise_s;
}

// `deal` on `tried`'s rank sets polished (PolishLanes, `trials`), and kept
// in `tried` and `result` when its makespan is lower than `result`'s and,
// given `plan_times` (the lanes are a plan's: their times), it gains enough
// over them (GainsEnough).
void KeepDealIfFaster(const PlanRequest& request, const LanePricer& price,
                      std::vector<std::vector<int>> deal, int trials,
                      const std::vector<double>* plan_times, Reshaped& tried,
                      Polished& result) {
  const Polished polished = PolishLanes(request, deal, tried.rank_sets, trials);
  if (polished.makespan_s >= result.makespan_s) return;
  if (plan_times &&
      !GainsEnough(price, *plan_times, LaneTimesS(request, price, deal))) {
    return;
  }
  result = polished;
  tried.lanes = std::move(deal);
  tried.makespan_s = result.makespan_s;
}

// How PolishOrDealBelow polishes and deals.
struct DealSettings {
  int trials = 0;               // PolishLanes' per deal
  bool plan_lanes = false;      // the lanes are a plan's, not a trial deal's
  int64_t search_pricings = 0;  // DealSearch's budget; 0: no search
  // The plan's lanes are dealt as several groups (DealtAsSeveralGroups):
  // DealBelow may split lanes too, and DeepestDealBelow runs on any batch.
  bool several_groups = false;
};

// `tried`'s lanes on its rank sets polished (PolishLanes, `trials`), and
// dealt again below `beat_s` (DealBelow, at the tightest margin that fits)
// and, with `search_pricings` > 0 on at most kDealSearchMaxSequences (or
// where the plan's lanes run as several groups), at the lowest target met
// (DeepestDealBelow) and, on at most kDealSearchMaxSequences, by DealSearch
// below the makespan reached (at most `search_pricings`): each deal kept as
// KeepDealIfFaster keeps it, with `plan_lanes` judged against the polished
// lanes' times. Returns the kept lanes' PolishLanes result.
Polished PolishOrDealBelow(const PlanRequest& request, Reshaped& tried,
                           const std::vector<int64_t>& d_min,
                           const std::vector<int>& order, double beat_s,
                           const DealSettings& settings) {
  const int trials = settings.trials;
  Polished result = PolishLanes(request, tried.lanes, tried.rank_sets, trials);
  tried.makespan_s = result.makespan_s;
  const LanePricer price(request, tried.rank_sets);
  std::optional<std::vector<double>> plan_times;
  if (settings.plan_lanes) plan_times = LaneTimesS(request, price, tried.lanes);
  const std::vector<double>* judge = plan_times ? &*plan_times : nullptr;
  for (double margin : kDealBelowMargins) {
    auto tight = DealBelow(request, price, tried.rank_sets.size(), d_min, order,
                           beat_s * (1 - margin), settings.several_groups);
    if (!tight) continue;
    KeepDealIfFaster(request, price, std::move(*tight), trials, judge, tried,
                     result);
    break;
  }
  const int64_t search_pricings = settings.search_pricings;
  const bool small = order.size() <= kDealSearchMaxSequences;
  if (search_pricings == 0 || !(small || settings.several_groups))
    return result;
  if (auto deepest =
          DeepestDealBelow(request, price, tried.rank_sets.size(), d_min, order,
                           beat_s, settings.several_groups)) {
    KeepDealIfFaster(request, price, std::move(*deepest), trials, judge, tried,
                     result);
  }
  if (!small) return result;
  if (auto searched =
          DealSearch(request, price, tried.rank_sets.size(), d_min, order,
                     result.makespan_s * (1 - 1e-9), search_pricings)
              .Run()) {
    KeepDealIfFaster(request, price, std::move(*searched), trials, judge, tried,
                     result);
  }
  return result;
}

// Each rank's busy time in `micro_batches` (ms; estimates filled).
std::vector<double> BusyMs(int num_ranks,
                           const std::vector<MicroBatchPlan>& micro_batches) {
  std::vector<double> busy(num_ranks, 0.0);
  for (const MicroBatchPlan& mb : micro_batches)
    for (const GroupPlan& g : mb.groups)
      for (int r : g.ranks) busy[r] += g.est_ms;
  return busy;
}

}  // namespace

bool GainsEnoughAcross(int num_ranks, const std::vector<MicroBatchPlan>& before,
                       const std::vector<MicroBatchPlan>& after) {
  const std::vector<double> busy_before = BusyMs(num_ranks, before);
  const std::vector<double> busy_after = BusyMs(num_ranks, after);
  std::vector<std::vector<int>> rank_sets_before, rank_sets_after;
  LanesOf(before, &rank_sets_before);
  LanesOf(after, &rank_sets_after);
  size_t slowest_degree = 0;
  double slowest_ms = -1;
  for (const auto& ranks : rank_sets_before) {
    if (busy_before[ranks[0]] > slowest_ms) {
      slowest_ms = busy_before[ranks[0]];
      slowest_degree = ranks.size();
    }
  }
  const double makespan_ms =
      *std::max_element(busy_after.begin(), busy_after.end());
  double rise_ms = 0;
  for (const auto& ranks : rank_sets_after) {
    if (ranks.size() >= slowest_degree ||
        !RiseCounts(busy_after[ranks[0]], makespan_ms))
      continue;
    double was_ms = 0;
    for (int r : ranks) was_ms = std::max(was_ms, busy_before[r]);
    rise_ms += std::max(0.0, busy_after[ranks[0]] - was_ms);
  }
  const double gain_ms = slowest_ms - makespan_ms;
  return gain_ms >= kPolishMinGainPerRise * rise_ms;
}

bool DealtAsSeveralGroups(const PlanRequest& request,
                          const std::vector<std::vector<int>>& lanes,
                          const std::vector<std::vector<int>>& rank_sets) {
  if (request.sequences.size() > kSeveralGroupsMaxSequences) return false;
  const std::vector<GroupLoad> loads = LoadsOf(request, lanes);
  for (size_t p = 0; p < lanes.size(); ++p) {
    if (GroupMemBytes(request.cost, loads[p],
                      static_cast<int>(rank_sets[p].size())) >
        request.cost.mem_capacity) {
      return true;
    }
  }
  return false;
}

std::optional<std::vector<std::vector<int>>> SearchDeal(
    const PlanRequest& request, const std::vector<std::vector<int>>& rank_sets,
    const std::vector<int>& order, double beat_s, int64_t max_pricings) {
  const LanePricer price(request, rank_sets);
  const std::vector<int64_t> d_min = MinDegrees(request);
  return DealSearch(request, price, rank_sets.size(), d_min, order, beat_s,
                    max_pricings)
      .Run();
}

std::optional<Reshaped> ReshapeLanes(
    const PlanRequest& request, std::vector<std::vector<int>> lanes,
    const std::vector<std::vector<int>>& rank_sets, double makespan_s,
    const std::vector<double>& work, const std::vector<int>& order,
    const ReshapeOptions& options) {
  std::vector<int> degrees = DegreesOf(rank_sets);
  int64_t deals_left = std::max<int64_t>(
      1, options.max_dealt / static_cast<int64_t>(order.size()));
  // One lane has no other deal on its ranks, and with a single deal of other
  // degrees left it has nothing to try (10^6 sequences on 32 ranks).
  if (rank_sets.size() == 1 && deals_left < 2) return std::nullopt;
  const std::vector<int64_t> d_min = MinDegrees(request);
  DealSettings full{
      .trials = options.trials_per_try,
      .plan_lanes = true,
      .search_pricings = options.search_pricings,
      .several_groups = DealtAsSeveralGroups(request, lanes, rank_sets)};
  std::optional<Reshaped> best;
  double best_s = makespan_s * (1 - 1e-9);
  int slow = degrees[0];  // the slowest lane's degree
  if (rank_sets.size() > 1) {
    // The given degrees first, dealt below the makespan.
    Reshaped same{.lanes = std::move(lanes), .rank_sets = rank_sets};
    const Polished given =
        PolishOrDealBelow(request, same, d_min, order, best_s, full);
    slow = degrees[given.slowest];
    if (given.makespan_s < best_s) {
      best_s = given.makespan_s;
      best = std::move(same);
    }
  }
  const GroupTimeFn best_case =
      BestCaseRingOrAllToAll(request.cost, request.cluster, ShapeOf(request));
  for (int round = 1; round <= options.max_rounds; ++round) {
    std::vector<Screened> dealt;
    for (const std::vector<int>& next :
         DegreeNeighbours(degrees, slow, request.cluster.num_ranks)) {
      if (deals_left-- <= 0) break;
      if (auto screened =
              DealScreened(request, next, d_min, work, order, best_case)) {
        dealt.push_back(std::move(*screened));
      }
    }
    const size_t polished =
        std::min(dealt.size(), order.size() <= kDealSearchMaxSequences
                                   ? options.small_batch_polished_per_round
                                   : options.polished_per_round);
    std::partial_sort(dealt.begin(), dealt.begin() + polished, dealt.end(),
                      [](const Screened& a, const Screened& b) {
                        return a.makespan_s < b.makespan_s;
                      });
    std::optional<Reshaped> found;
    for (size_t i = 0; i < polished; ++i) {
      Reshaped tried;
      tried.rank_sets = PlaceLanes(request, LoadsOf(request, dealt[i].lanes),
                                   dealt[i].degrees);
      tried.lanes = std::move(dealt[i].lanes);
      // Lanes of one group: split, a trial led a round astray (issue 32).
      const Polished result =
          PolishOrDealBelow(request, tried, d_min, order, best_s,
                            {.trials = options.trials_per_try,
                             .search_pricings = options.trial_search_pricings});
      if (result.makespan_s < best_s) {
        best_s = result.makespan_s;
        slow = static_cast<int>(tried.rank_sets[result.slowest].size());
        found = std::move(tried);
      }
    }
    if (!found) break;
    degrees = DegreesOf(found->rank_sets);
    found->degree_changes = round;
    best = std::move(found);
  }
  // The reshaped lanes searched at the full budget.
  if (best && best->degree_changes > 0) {
    full.plan_lanes = false;
    PolishOrDealBelow(request, *best, d_min, order, best_s, full);
  }
  return best;
}

}  // namespace fcp::planner
