#include "planner/refine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "fcp/cost_model.h"
#include "planner/allocation.h"
#include "planner/best_timer.h"
#include "planner/microbatch.h"
#include "planner/realize.h"
#include "planner/sorted_pairs.h"

namespace fcp::planner {
namespace {

constexpr double kRelTol = 1e-12;
// Long groups a sequence tries to join in the dual approximation: a short one
// the tightest few; a long one more, since only wide groups have its room.
// Most short tries fail (at 8,192 sequences on 1,024 ranks 97 % of the group
// times priced, mostly on cross-node groups whose exposed ring traffic the
// linear-slack filter does not see): 4 tries instead of 8 save a tenth of the
// planning instructions there and leave fcp's estimates on the study's batches
// within 0.01 % (geomean); 2 tries lost 2 % on github at 1,024 ranks.
constexpr int kShortTries = 4;
constexpr int kLongTries = 16;
// Relative margin by which a lower bound must exceed the limit before a group
// is passed over unpriced: far above the few ulps by which the bound and the
// priced time can round apart, so the choice is the one pricing makes.
constexpr double kFloorMargin = 1e-9;
// Memory counts as sizing an item for the bins when its fraction comes this
// close to time's (relative): a near-tie may round the other way once memory
// is relaxed.
constexpr double kTieMargin = 1e-12;
// τ tried below one that is not met (DualApprox::Group): below the bound,
// and below the bisection's last failure with a second bisection from the
// highest met there, on at most kProbedMembers sequences. At 512 sequences on
// 64 ranks and 8,192 on 1,024 they took about a fifth more planning
// instructions, which the 1 ms and 20 ms budgets do not hold
// (docs/planner/speed.md). Each probe goes this far down from the unmet τ to
// the floor, nearest first: the τ met can lie just below one that is not
// (issue 32: lanes on 29 ranks met at 19.5 and 21.0 s, not at 20.6 s; probes
// a quarter, half and three quarters of the way down all missed, and fcp
// trailed ref-bisect by 11.6 %).
constexpr double kProbeFractions[] = {1.0 / 16, 1.0 / 4, 1.0 / 2};
constexpr size_t kProbedMembers = 256;

}  // namespace

// What every degree rule shares (refine.h: DualApprox).
struct DualContext {
  DualContext(const PlanRequest& r, const std::vector<int>& members,
              AllToAllPricing pricing)
      : prepared(r),
        request(&r),
        shape(ShapeOf(r)),
        order(members),
        best_time(r, pricing) {}
  const PlanRequest& prepared;  // the request the fields below were made for
  // The request whose memory figures the Group call being run checks
  // (DualApprox::Group's memory_of): `prepared` or the same batch with other
  // memory figures, which no field below depends on.
  const PlanRequest* request;
  const ModelShape* shape;       // ShapeOf(request)
  std::vector<int> order;        // members by work, descending
  std::vector<int64_t> d_min;    // per member position in `order`
  std::vector<double> t_one;     // T({s}, 1)
  std::vector<double> work;      // SequenceWorkS
  std::vector<GroupLoad> alone;  // GroupLoad::Of each member, by position
  double lower_s = 0;            // no grouping meets a lower makespan (s)
  // Per member position: T_best({s}, d) for d = d_min, d_min + 1, ..., filled
  // on demand (NaN: not priced yet) and shared by every TryTau of every
  // rule's bisection (each call scanned the degrees again).
  std::vector<std::vector<double>> time_at;
  // Per member position, for the rule being run: the running minimum of
  // those times over the degrees the rule allows (+inf for the others).
  std::vector<std::vector<double>> min_up_to;
  bool memory_decided = false;  // in the last Group call (refine.h)
  DualRule rule;                // of the Group call being run
  BestTimer best_time;
};

namespace {

// The smallest d in [d_min, max_degree] with T_best({s}, d) <= limit for the
// member at `pos` (the first hit of a scan upward from d_min), or
// max_degree + 1 when there is none.
int FirstDegreeWithin(DualContext& ctx, size_t pos, double limit,
                      int max_degree) {
  const int d_min = static_cast<int>(ctx.d_min[pos]);
  if (d_min > max_degree) return max_degree + 1;
  std::vector<double>& times = ctx.time_at[pos];
  std::vector<double>& mins = ctx.min_up_to[pos];
  // The running minimum is non-increasing, and it is <= limit exactly from the
  // first degree whose own time is <= limit on: a binary search finds it.
  if (!mins.empty() && mins.back() <= limit) {
    const auto it = std::partition_point(mins.begin(), mins.end(),
                                         [&](double m) { return m > limit; });
    const int d = d_min + static_cast<int>(it - mins.begin());
    return std::min(d, max_degree + 1);
  }
  const GroupLoad& load = ctx.alone[pos];
  for (int d = d_min + static_cast<int>(mins.size()); d <= max_degree; ++d) {
    const bool allowed =
        d == 1 || ((!ctx.rule.aligned_degrees ||
                    AlignedDegree(ctx.request->cluster, d)) &&
                   DegreeAllowed(ctx.shape, d, ctx.rule.multiple_of,
                                 ctx.rule.all_to_all_only));
    double t = std::numeric_limits<double>::infinity();
    if (allowed) {
      const size_t i = static_cast<size_t>(d - d_min);
      if (i >= times.size())
        times.resize(i + 1, std::numeric_limits<double>::quiet_NaN());
      if (std::isnan(times[i])) times[i] = ctx.best_time(load, d);
      t = times[i];
    }
    mins.push_back(mins.empty() ? t : std::min(mins.back(), t));
    if (t <= limit) return d;
  }
  return max_degree + 1;
}

// What TryTau found: the group of each member position, and the limit that
// told the long members from the short ones. The lists are built only for the
// grouping the bisection keeps (BuildGroups).
struct TauGrouping {
  double limit = 0;
  int num_groups = 0;  // 0: τ not met (or no members)
  std::vector<int> group_of;
  bool memory_decided = false;  // DualApprox::memory_decided, for this τ
};

// Whether `a` and `b` price alike everywhere: GroupLoad::Add reads these.
bool SamePricing(const Sequence& a, const Sequence& b) {
  return a.length_tokens == b.length_tokens && a.eta == b.eta &&
         a.vision_tokens == b.vision_tokens;
}

bool IsShort(const DualContext& ctx, size_t pos, double limit) {
  return ctx.d_min[pos] == 1 && ctx.t_one[pos] <= limit;
}

// Grouping meeting `tau` with at most N ranks, or num_groups 0 when infeasible.
// Long because: both passes share the slack index, bins and lookup hints.
TauGrouping TryTau(DualContext& ctx, double tau) {
  const CostModel& cm = ctx.request->cost;
  const Cluster& cluster = ctx.request->cluster;
  const auto& seqs = ctx.request->sequences;
  const int n = cluster.num_ranks;
  const double limit = tau * (1 + kRelTol);
  const double headroom = cm.mem_capacity - cm.mem_static;

  struct Long {
    int group;
    int degree;
    GroupLoad load;
    double time;  // best_time(load, degree)
  };
  std::vector<Long> longs;
  longs.reserve(n);  // every group holds a rank
  // (degree · (τ - T), index into longs): a sequence of s tokens can only fit
  // where Lin/d <= τ - T, i.e. at or after lower_bound(Lin) (Lin at d = 1).
  SortedPairs long_slack;
  long_slack.Reserve(n);
  int64_t ranks = 0;
  // The group of each member position; the groups' lists are built only for
  // the grouping the bisection keeps (growing hundreds of lists one index at
  // a time dominated the allocation).
  std::vector<int> group_of(ctx.order.size(), -1);
  int num_groups = 0;
  std::vector<size_t> shorts;
  shorts.reserve(ctx.order.size());
  bool memory_decided = false;
  auto not_met = [&] {
    TauGrouping none;
    none.memory_decided = memory_decided;
    return none;
  };
  // Headroom of a long group at its degree: walk the groups that can absorb at
  // least the linear part of the sequence, tightest first (best fit); a few
  // candidates suffice. `hint` is where the previous lookup ended.
  auto absorb = [&](size_t pos, size_t& hint, int max_tries) {
    const Sequence& s = seqs[ctx.order[pos]];
    const GroupLoad& alone = ctx.alone[pos];
    // Whether the group at long_slack[it] takes the sequence (it then does).
    const auto takes = [&](size_t it) {
      Long& l = longs[long_slack[it].index];
      // The group's degree must hold the sequence alone (its d_min can exceed
      // what the capacity check below sees when memory is relaxed for lanes).
      if (ctx.d_min[pos] > l.degree) return false;
      if (cm.mem_per_token *
              (l.load.sum_tokens + static_cast<double>(s.length_tokens)) >
          headroom * l.degree) {
        memory_decided = true;
        return false;
      }
      // Provably over the limit (the margin covers rounding): not priced.
      if (l.time + ctx.best_time.GrowthFloor(alone, l.degree) >
          limit * (1 + kFloorMargin)) {
        return false;
      }
      GroupLoad load = l.load;
      load.Add(s);
      const double t = ctx.best_time(load, l.degree);
      if (t > limit) return false;
      long_slack.Rekey(it, (limit - t) * l.degree);
      l.load = load;
      l.time = t;
      group_of[pos] = l.group;
      return true;
    };
    const double linear_s = LinearS(cm, alone, 1.0);
    // lower_bound finds nothing when even the largest slack is below linear_s.
    if (long_slack.empty() || long_slack.back().key < linear_s) return false;
    size_t it = hint = long_slack.LowerBound(linear_s, hint);
    for (int tries = 0; it < long_slack.size() && tries < max_tries;
         ++it, ++tries) {
      if (takes(it)) return true;
    }
    // The roomiest group (DualRule::roomiest_too), if not tried above.
    return ctx.rule.roomiest_too && it < long_slack.size() &&
           takes(long_slack.size() - 1);
  };
  for (size_t pos = 0; pos < ctx.order.size(); ++pos) {
    if (IsShort(ctx, pos, limit)) {
      shorts.push_back(pos);
      continue;
    }
    // A long sequence shares the slack of a wider group when it fits there
    // (e.g. two all-to-all sequences in one 32-rank group) instead of always
    // opening its own (issue 32: a lane heuristic packing them won).
    size_t from = 0;
    if (absorb(pos, from, kLongTries)) continue;
    const GroupLoad& load = ctx.alone[pos];
    const int d =
        FirstDegreeWithin(ctx, pos, limit, static_cast<int>(n - ranks));
    if (d > n - ranks) return not_met();
    ranks += d;
    const double time = ctx.time_at[pos][d - ctx.d_min[pos]];
    long_slack.Insert({(limit - time) * d, static_cast<int>(longs.size())});
    longs.push_back({num_groups, d, load, time});
    group_of[pos] = num_groups++;
  }
  // Single-rank bins: (free capacity fraction, index into `groups`), and the
  // time and memory each bin uses.
  SortedPairs bins;
  bins.Reserve(n - num_groups);
  std::vector<double> bin_mem(num_groups, 0.0), bin_time(num_groups, 0.0);
  bin_mem.reserve(n);
  bin_time.reserve(n);
  // The previous lookups' answers, where the next ones start.
  size_t long_hint = 0, bin_hint = 0;
  // The last short sequence no long group took, while none has taken one
  // since: an equal one (its neighbour in the work order) is refused by the
  // same groups, so its tries are skipped (at 8,192 github sequences a third
  // of the short ones' tries).
  const Sequence* refused = nullptr;
  for (size_t pos : shorts) {
    const int idx = ctx.order[pos];
    const Sequence& s = seqs[idx];
    const double need_mem =
        cm.mem_per_token * static_cast<double>(s.length_tokens);
    // 1) Headroom of a long group at its degree.
    if (!(refused && SamePricing(*refused, s))) {
      if (absorb(pos, long_hint, kShortTries)) {
        refused = nullptr;
        continue;
      }
      refused = &s;
    }
    // 2) An existing single-rank bin. Time and memory both add up on one rank;
    // a bin's free capacity is the smaller of its two free fractions and an
    // item's size the larger of its two, so a lower_bound hit always fits both
    // (best fit on the binding resource).
    const double dt = ctx.work[pos];
    const double size = std::max(dt / limit, need_mem / headroom);
    // Sized by its time, an item uses a smaller fraction of memory than of
    // time (beta1 included), and so does every bin of such items: memory
    // then ranks no bin either.
    memory_decided |= need_mem / headroom > dt / limit * (1 - kTieMargin);
    const size_t it = bin_hint = bins.LowerBound(size, bin_hint);
    if (it < bins.size()) {
      const int b = bins[it].index;
      bin_time[b] += dt;
      bin_mem[b] += need_mem;
      bins.Rekey(it, std::min((limit - bin_time[b]) / limit,
                              (headroom - bin_mem[b]) / headroom));
      group_of[pos] = b;
      continue;
    }
    // 3) A new single-rank bin.
    if (ranks + 1 > n) return not_met();
    ++ranks;
    group_of[pos] = num_groups++;
    bin_mem.push_back(need_mem);
    bin_time.push_back(ctx.t_one[pos]);
    bins.Insert({std::min((limit - bin_time.back()) / limit,
                          (headroom - need_mem) / headroom),
                 num_groups - 1});
  }
  return {limit, num_groups, std::move(group_of), memory_decided};
}

// The groups' member lists: each lists its members in the order they joined,
// the long sequences (by position), then the short ones (by position).
std::vector<std::vector<int>> BuildGroups(const DualContext& ctx,
                                          const TauGrouping& found) {
  std::vector<int> sizes(found.num_groups, 0);
  for (int g : found.group_of) ++sizes[g];
  std::vector<std::vector<int>> groups(found.num_groups);
  for (int g = 0; g < found.num_groups; ++g) groups[g].reserve(sizes[g]);
  for (size_t pos = 0; pos < ctx.order.size(); ++pos) {
    if (!IsShort(ctx, pos, found.limit))
      groups[found.group_of[pos]].push_back(ctx.order[pos]);
  }
  for (size_t pos = 0; pos < ctx.order.size(); ++pos) {
    if (IsShort(ctx, pos, found.limit))
      groups[found.group_of[pos]].push_back(ctx.order[pos]);
  }
  return groups;
}

}  // namespace

DualApprox::DualApprox(const PlanRequest& request,
                       const std::vector<int>& members,
                       const CostModel* d_min_model, AllToAllPricing pricing)
    : ctx_(std::make_unique<DualContext>(request, members, pricing)) {
  DualContext& ctx = *ctx_;
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  const auto& seqs = request.sequences;
  // (work, member), sorted together: a work vector over all K sequences per
  // call (once per micro-batch) made planning O(K · micro-batches) (issue 30).
  std::vector<std::pair<double, int>> by_work;
  by_work.reserve(members.size());
  double total_work = 0;
  for (int i : members) {
    by_work.emplace_back(SequenceWorkS(cm, seqs[i]), i);
    total_work += by_work.back().first;
  }
  // Ties by index: the order, and so the grouping, does not depend on how
  // `members` is ordered (LaneGroupings takes PlanSplit's grouping as its own).
  std::sort(by_work.begin(), by_work.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (size_t pos = 0; pos < by_work.size(); ++pos)
    ctx.order[pos] = by_work[pos].second;
  ctx.lower_s = total_work / cluster.num_ranks + cm.beta1;
  for (size_t pos = 0; pos < by_work.size(); ++pos) {
    const GroupLoad& load =
        ctx.alone.emplace_back(GroupLoad::Of(seqs[by_work[pos].second]));
    ctx.d_min.push_back(MinDegree(d_min_model ? *d_min_model : cm, load));
    ctx.t_one.push_back(GroupTimeS(cm, load, 1, Link::kIntraNode));
    ctx.work.push_back(by_work[pos].first);
  }
  ctx.time_at.resize(ctx.order.size());
  // Lower end: the longest sequence cannot beat its own best degree.
  if (!ctx.order.empty()) {
    const GroupLoad& load = ctx.alone.front();
    double best = std::numeric_limits<double>::infinity();
    for (int d = static_cast<int>(ctx.d_min.front()); d <= cluster.num_ranks;
         ++d) {
      best = std::min(best, ctx.best_time(load, d));
    }
    ctx.lower_s = std::max(ctx.lower_s, best);
  }
}

DualApprox::DualApprox(DualApprox&&) noexcept = default;
DualApprox& DualApprox::operator=(DualApprox&&) noexcept = default;
DualApprox::~DualApprox() = default;

std::optional<std::vector<std::vector<int>>> DualApprox::Group(
    double upper_s, const DualRule& rule, const PlanRequest* memory_of) {
  DualContext& ctx = *ctx_;
  ctx.request = memory_of ? memory_of : &ctx.prepared;
  const CostModel& cm = ctx.request->cost;
  ctx.rule = rule;
  ctx.min_up_to.assign(ctx.order.size(), {});
  ctx.memory_decided = !std::isfinite(upper_s);
  if (!std::isfinite(upper_s)) {
    // No feasible grouping known: start where time cannot bind (every sequence
    // run one after another), so only memory decides.
    upper_s = cm.beta1;
    for (size_t pos = 0; pos < ctx.order.size(); ++pos) {
      const GroupLoad& load = ctx.alone[pos];
      upper_s += ctx.best_time(
          load, static_cast<int>(std::min<int64_t>(
                    MinDegree(cm, load), ctx.request->cluster.num_ranks)));
    }
    upper_s *= 2;
  }
  auto try_tau = [&](double tau) {
    TauGrouping found = TryTau(ctx, tau);
    ctx.memory_decided |= found.memory_decided;
    return found;
  };
  const double floor_s = std::min(ctx.lower_s, upper_s);
  double hi = upper_s, lo = floor_s;
  TauGrouping best = try_tau(hi);
  // TryTau is not monotone in τ: a lower τ opens long groups wider, and their
  // slack may take short sequences that found no room at a higher one (issue
  // 32: missed at 21.07 s, met at 20.0 s). So where `hi` (the bound, or the
  // bisection's last failure) is not met, a few τ below it are
  // (kProbeFractions).
  // The highest met becomes `best` and `hi`.
  auto probe_below = [&](double top) {
    for (double fraction : kProbeFractions) {
      const double tau = top - (top - floor_s) * fraction;
      if (TauGrouping found = try_tau(tau); found.num_groups > 0) {
        best = std::move(found);
        hi = tau;
        return true;
      }
    }
    return false;
  };
  const bool probe = ctx.order.size() <= kProbedMembers;
  if (best.num_groups == 0 && !(probe && probe_below(hi))) return std::nullopt;
  const int bisections = probe ? 2 : 1;
  for (int round = 0; round < bisections; ++round) {
    for (int iter = 0; iter < 16 && hi - lo > 1e-3 * hi; ++iter) {
      const double mid = 0.5 * (lo + hi);
      TauGrouping found = try_tau(mid);
      if (found.num_groups == 0) {
        lo = mid;
      } else {
        hi = mid;
        best = std::move(found);
      }
    }
    if (round + 1 == bisections || lo <= floor_s || !probe_below(lo)) break;
    lo = floor_s;
  }
  return BuildGroups(ctx, best);
}

bool DualApprox::memory_decided() const { return ctx_->memory_decided; }

std::optional<std::vector<std::vector<int>>> DualApproxGrouping(
    const PlanRequest& request, const std::vector<int>& members, double upper_s,
    const CostModel* d_min_model, const DualRule& rule) {
  return DualApprox(request, members, d_min_model).Group(upper_s, rule);
}

// Long because: every kind of trial resumes one shared allocator state.
double LocalSearch(const PlanRequest& request,
                   std::vector<std::vector<int>>& groups, int max_trials) {
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  const auto& seqs = request.sequences;
  const GroupTimeFn time =
      BestCaseRingOrAllToAll(cm, cluster, ShapeOf(request));
  std::vector<AllocGroup> alloc_groups = MakeAllocGroups(seqs, groups, cm);
  Allocation current = AllocateFast(alloc_groups, cluster.num_ranks, time);
  if (!current.feasible) return std::numeric_limits<double>::infinity();
  int trials = 0;
  // A trial only matters when its makespan beats the current one, M: then
  // the allocator resumes from every unchanged group's canonical degree for M
  // (ResumedAllocator) with the same result.
  std::vector<int> removed;
  std::vector<AllocGroup> added;
  while (trials < max_trials) {
    // Bottleneck: the group at the makespan (first on ties).
    int b = 0;
    std::vector<double> group_time(groups.size());
    for (size_t p = 0; p < groups.size(); ++p) {
      group_time[p] = time(alloc_groups[p], current.degrees[p]);
      if (group_time[p] > group_time[b]) b = static_cast<int>(p);
    }
    if (groups.size() < 2 && groups[b].size() < 2) break;
    // Sequences to move: the longest few and the shortest one of the
    // bottleneck.
    std::vector<int> movers = groups[b];
    std::stable_sort(movers.begin(), movers.end(), [&](int x, int y) {
      return seqs[x].length_tokens > seqs[y].length_tokens;
    });
    if (movers.size() > 4) {
      const int shortest = movers.back();
      movers.resize(3);
      movers.push_back(shortest);
    }
    // Targets: a new group (-1) and the groups with the most slack.
    std::vector<int> targets(groups.size());
    std::iota(targets.begin(), targets.end(), 0);
    targets.erase(targets.begin() + b);
    std::stable_sort(targets.begin(), targets.end(), [&](int x, int y) {
      return group_time[x] < group_time[y];
    });
    if (targets.size() > 4) targets.resize(4);
    targets.insert(targets.begin(), -1);

    // T at the canonical degrees is group_time (computed above).
    ResumedAllocator resumed(alloc_groups, current.degrees, group_time,
                             cluster.num_ranks, time);
    // best_makespan < M, and an infeasible trial (Σ d_min > N) gets +inf.
    double best_makespan = current.makespan_s * (1 - 1e-9);
    int best_mover = -1, best_target = -2;
    bool best_is_merge = false;
    // Merges: the whole bottleneck group joins a target (one larger group
    // balances better when communication hides behind attention).
    for (int target : targets) {
      if (target < 0 || trials >= max_trials) continue;
      ++trials;
      added.assign(1, alloc_groups[target]);
      for (int i : groups[b]) added[0].load.Add(seqs[i]);
      added[0].min_degree = MinDegree(cm, added[0].load);
      removed = {b, target};
      const double makespan = resumed.Makespan(removed, added);
      if (makespan < best_makespan) {
        best_makespan = makespan;
        best_target = target;
        best_is_merge = true;
      }
    }
    // Moves: one sequence of the bottleneck to a target or to a new group.
    for (int mover : groups[b].size() < 2 ? std::vector<int>{} : movers) {
      for (int target : targets) {
        if (trials >= max_trials) break;
        ++trials;
        added.assign(1, alloc_groups[b]);
        added[0].load.Remove(seqs[mover]);
        added[0].min_degree = MinDegree(cm, added[0].load);
        removed.assign(1, b);
        if (target < 0) {
          added.push_back({GroupLoad::Of(seqs[mover]),
                           MinDegree(cm, GroupLoad::Of(seqs[mover]))});
        } else {
          added.push_back(alloc_groups[target]);
          added[1].load.Add(seqs[mover]);
          added[1].min_degree = MinDegree(cm, added[1].load);
          removed.push_back(target);
        }
        const double makespan = resumed.Makespan(removed, added);
        if (makespan < best_makespan) {
          best_makespan = makespan;
          best_mover = mover;
          best_target = target;
          best_is_merge = false;
        }
      }
    }
    if (best_is_merge) {
      auto& into = groups[best_target];
      into.insert(into.end(), groups[b].begin(), groups[b].end());
      groups.erase(groups.begin() + b);
    } else if (best_mover >= 0) {
      auto& from = groups[b];
      from.erase(std::find(from.begin(), from.end(), best_mover));
      if (best_target < 0) {
        groups.push_back({best_mover});
      } else {
        groups[best_target].push_back(best_mover);
      }
    } else {
      break;
    }
    alloc_groups = MakeAllocGroups(seqs, groups, cm);
    current = AllocateFast(alloc_groups, cluster.num_ranks, time);
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  return current.makespan_s;
}

}  // namespace fcp::planner
