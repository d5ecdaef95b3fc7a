// Reference heuristics (baselines/heuristics.h). Not the fcp planner.
#include "baselines/heuristics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "baselines/common.h"
#include "fcp/cost_model.h"
#include "planner/first_fit.h"

namespace fcp::baselines {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A CP group that persists over the global batch.
struct Lane {
  int degree = 1;
  GroupLoad load;
  std::vector<int> seqs;
};
using Lanes = std::vector<Lane>;

// ---- shared lane machinery ----

bool AllToAllAllowed(const PlanRequest& r, int d) {
  return d > 1 && r.model && r.model->kv_heads > 0 &&
         AllToAllDegreeRuns(*r.model, d);
}

// Best-case time of a lane holding `load` (s): ring or, where allowed,
// all-to-all; chunking into micro-batches is ignored.
double LaneTimeS(const PlanRequest& r, const GroupLoad& load, int d) {
  double t = GroupTimeBestS(r.cost, r.cluster, load, d);
  if (AllToAllAllowed(r, d)) {
    t = std::min(
        t, AllToAllGroupTimeS(r.cost, *r.model, load, d,
                              AllToAllBandwidthBound(r.cost, r.cluster, d)));
  }
  return t;
}

double WorkS(const PlanRequest& r, int k) {
  const Sequence& s = r.sequences[k];
  const double len = static_cast<double>(s.length_tokens);
  return r.cost.alpha1 * (1 + s.eta) * len * len + r.cost.alpha2 * len +
         r.cost.alpha2_vision * static_cast<double>(s.vision_tokens);
}

std::vector<int> ByWorkDescending(const PlanRequest& r) {
  std::vector<int> order(r.sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return WorkS(r, a) > WorkS(r, b); });
  return order;
}

int DMin(const PlanRequest& r, int k) {
  return static_cast<int>(
      std::min<int64_t>(MinDegree(r.cost, GroupLoad::Of(r.sequences[k])),
                        r.cluster.num_ranks + 1));
}

void AddTo(const PlanRequest& r, Lane& lane, int k) {
  lane.load.Add(r.sequences[k]);
  lane.seqs.push_back(k);
}

// `order`'s sequences, each onto the lane with the least estimated time (LPT).
void LptOnto(const PlanRequest& r, const std::vector<int>& order,
             Lanes& lanes) {
  using Entry = std::pair<double, size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (size_t i = 0; i < lanes.size(); ++i)
    heap.push({LaneTimeS(r, lanes[i].load, lanes[i].degree), i});
  for (int k : order) {
    const size_t i = heap.top().second;
    heap.pop();
    AddTo(r, lanes[i], k);
    heap.push({LaneTimeS(r, lanes[i].load, lanes[i].degree), i});
  }
}

double LanesMakespanS(const PlanRequest& r, const Lanes& lanes) {
  double worst = 0;
  for (const Lane& l : lanes)
    worst = std::max(worst, LaneTimeS(r, l.load, l.degree));
  return worst;
}

// Places the lanes on contiguous ranks (widest first), splits each into
// memory-feasible chunks (first fit, longest first) and runs chunk m of every
// lane in micro-batch m. nullopt when the lanes need more than N ranks.
std::optional<Plan> LanesToPlan(const PlanRequest& r, Lanes lanes) {
  std::stable_sort(
      lanes.begin(), lanes.end(),
      [](const Lane& a, const Lane& b) { return a.degree > b.degree; });
  Plan plan;
  int first = 0;
  for (const Lane& lane : lanes) {
    if (lane.seqs.empty()) continue;
    if (first + lane.degree > r.cluster.num_ranks) return std::nullopt;
    std::vector<int> seqs = lane.seqs;
    std::stable_sort(seqs.begin(), seqs.end(), [&](int a, int b) {
      return r.sequences[a].length_tokens > r.sequences[b].length_tokens;
    });
    std::vector<std::vector<int>> chunks;
    planner::FirstFitChunks first_fit(seqs.size());  // O(log K) per sequence
    for (int k : seqs) {
      const double len = static_cast<double>(r.sequences[k].length_tokens);
      const size_t c = first_fit.Find([&](double tokens) {
        return FitsOnLoad(r.cost, tokens + len, lane.degree);
      });
      if (c == chunks.size()) {
        if (!FitsOnLoad(r.cost, len, lane.degree)) return std::nullopt;
        chunks.emplace_back();
      }
      chunks[c].push_back(k);
      first_fit.Add(c, len);
    }
    if (plan.micro_batches.size() < chunks.size())
      plan.micro_batches.resize(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      GroupPlan g;
      g.ranks = RankRange(first, lane.degree);
      g.sequences = chunks[c];
      if (AllToAllAllowed(r, lane.degree)) {
        GroupLoad load;
        for (int k : g.sequences) load.Add(r.sequences[k]);
        const double ring = GroupTimeOnRanksS(r.cost, r.cluster, load, g.ranks);
        const double a2a = AllToAllGroupTimeS(
            r.cost, *r.model, load, lane.degree,
            AllToAllBandwidthOnRanks(r.cost, r.cluster, g.ranks));
        if (a2a < ring) g.comm = CommKind::kAllToAll;
      }
      plan.micro_batches[c].groups.push_back(std::move(g));
    }
    first += lane.degree;
  }
  plan.est_ms = EstimateMicroBatches(r, plan.micro_batches);
  return plan;
}

double ScoreMs(const PlanRequest& r, const Plan& plan) {
  return r.grad_sync
             ? StepMs(r.cluster.num_ranks, plan.micro_batches, *r.grad_sync)
             : plan.est_ms;
}

// Plans every setting in `knobs` (hindsight tuning on this batch) and keeps the
// best by ScoreMs; one lane of all N ranks is the fallback.
Plan Tune(const PlanRequest& r, std::string_view strategy,
          const std::vector<double>& knobs,
          const std::function<std::optional<Lanes>(double)>& build) {
  const int infeasible = FirstNotFitting(r, r.cluster.num_ranks);
  if (infeasible >= 0) {
    return InfeasiblePlan(strategy, r, infeasible,
                          "does not fit on all N ranks");
  }
  Lane all{.degree = r.cluster.num_ranks, .load = {}, .seqs = {}};
  for (size_t k = 0; k < r.sequences.size(); ++k)
    AddTo(r, all, static_cast<int>(k));
  Plan best = *LanesToPlan(r, {all});
  double best_ms = ScoreMs(r, best);
  std::string setting = "fallback (one lane of N ranks)";
  for (double knob : knobs) {
    std::optional<Lanes> lanes = build(knob);
    if (!lanes) continue;
    std::optional<Plan> plan = LanesToPlan(r, std::move(*lanes));
    if (plan && ScoreMs(r, *plan) < best_ms) {
      best_ms = ScoreMs(r, *plan);
      best = std::move(*plan);
      setting = FormatDouble(knob);
    }
  }
  best.notes["setting"] = setting;
  best.notes["reference_heuristic"] = "yes (not the fcp planner)";
  return best;
}

// ---- ref-share ----

std::optional<Lanes> ShareLanes(const PlanRequest& r, double k) {
  const int n = r.cluster.num_ranks;
  double total = 0;
  for (size_t i = 0; i < r.sequences.size(); ++i)
    total += WorkS(r, static_cast<int>(i));
  Lanes lanes;
  std::vector<int> shorts;
  int used = 0;
  for (int s : ByWorkDescending(r)) {
    const int dmin = DMin(r, s);
    const double share = total > 0 ? k * n * WorkS(r, s) / total : 0;
    const int d = std::max<int>(dmin, static_cast<int>(std::lround(share)));
    if (d < 2) {
      shorts.push_back(s);
      continue;
    }
    const int granted = std::min(d, n - used);
    if (granted < dmin) return std::nullopt;
    if (granted < 2) {
      shorts.push_back(s);
      continue;
    }
    lanes.push_back({.degree = granted, .load = {}, .seqs = {}});
    AddTo(r, lanes.back(), s);
    used += granted;
  }
  for (int i = used; i < n; ++i)
    lanes.push_back({.degree = 1, .load = {}, .seqs = {}});
  LptOnto(r, shorts, lanes);
  return lanes;
}

// ---- ref-bisect ----

// Lanes meeting `tau` (s) with degrees 1 or multiples of `g`, or nullopt.
std::optional<Lanes> FillTo(const PlanRequest& r, const std::vector<int>& order,
                            double tau, int g) {
  const int n = r.cluster.num_ranks;
  Lanes lanes;
  std::multimap<double, size_t>
      singles;  // single-rank lanes by time: T(G, 1) is additive
  int used = 0;
  for (int s : order) {
    const GroupLoad one = GroupLoad::Of(r.sequences[s]);
    const int dmin = DMin(r, s);
    double best_slack = kInf;
    size_t best = lanes.size();
    for (size_t i = 0; i < lanes.size(); ++i) {  // wide lanes: few
      if (lanes[i].degree < std::max(2, dmin)) continue;
      GroupLoad load = lanes[i].load;
      load.Add(r.sequences[s]);
      const double slack = tau - LaneTimeS(r, load, lanes[i].degree);
      if (slack >= 0 && slack < best_slack) best_slack = slack, best = i;
    }
    if (dmin == 1) {  // the fullest single rank that still meets tau
      const double extra = LaneTimeS(r, one, 1) - r.cost.beta1;
      auto it = singles.upper_bound(tau - extra);
      if (it != singles.begin()) {
        --it;
        const double slack = tau - it->first - extra;
        if (slack < best_slack) best_slack = slack, best = it->second;
      }
    }
    if (best == lanes.size()) {  // open the smallest lane meeting tau
      int d = dmin <= 1 ? 1 : ((dmin + g - 1) / g) * g;
      while (d <= n - used && LaneTimeS(r, one, d) > tau)
        d = d == 1 ? std::max(2, g) : d + g;
      if (d > n - used) return std::nullopt;
      lanes.push_back({.degree = d, .load = {}, .seqs = {}});
      used += d;
    } else if (lanes[best].degree == 1) {
      for (auto it = singles.begin(); it != singles.end(); ++it)
        if (it->second == best) {
          singles.erase(it);
          break;
        }
    }
    AddTo(r, lanes[best], s);
    if (lanes[best].degree == 1)
      singles.insert({LaneTimeS(r, lanes[best].load, 1), best});
  }
  return lanes;
}

std::optional<Lanes> BisectLanes(const PlanRequest& r, int g) {
  const std::vector<int> order = ByWorkDescending(r);
  double lo = 0, hi = 0;
  for (int s : order) hi += LaneTimeS(r, GroupLoad::Of(r.sequences[s]), 1);
  std::optional<Lanes> best;
  for (int it = 0; it < 40 && hi > 0; ++it) {
    const double tau = lo > 0 ? std::sqrt(lo * hi) : hi / 2;
    if (auto lanes = FillTo(r, order, tau, g)) {
      best = std::move(lanes);
      hi = tau;
    } else {
      lo = tau;
    }
    if (lo > 0 && hi / lo < 1.0005) break;
  }
  return best;
}

// ---- ref-grow ----

std::optional<Lanes> GrowLanes(const PlanRequest& r, int step) {
  const int n = r.cluster.num_ranks;
  const std::vector<int> order = ByWorkDescending(r);
  std::vector<int> degree(r.sequences.size());
  for (size_t s = 0; s < degree.size(); ++s)
    degree[s] = DMin(r, static_cast<int>(s));
  std::optional<Lanes> best;
  double best_s = kInf;
  for (int round = 0; round <= 2 * n; ++round) {
    Lanes lanes;
    std::vector<int> shorts;
    int used = 0;
    for (int s : order) {
      if (degree[s] < 2) {
        shorts.push_back(s);
        continue;
      }
      lanes.push_back({.degree = degree[s], .load = {}, .seqs = {}});
      AddTo(r, lanes.back(), s);
      used += degree[s];
    }
    if (used > n || (used == n && lanes.empty())) break;
    // One single-rank lane per short sequence at most: LPT fills empty lanes
    // lowest index first, so the lanes beyond stay empty, and an empty lane
    // is neither in the plan nor the bottleneck. Creating all N - used of
    // them in each of up to 2N rounds was O(N^2) (issue 30).
    const size_t singles =
        std::min(static_cast<size_t>(n - used), shorts.size());
    for (size_t i = 0; i < singles; ++i)
      lanes.push_back({.degree = 1, .load = {}, .seqs = {}});
    LptOnto(r, shorts, lanes);
    const double makespan = LanesMakespanS(r, lanes);
    if (makespan < best_s) best_s = makespan, best = lanes;
    // Grow the bottleneck: its own lane, or its heaviest sequence a new one.
    size_t worst = 0;
    for (size_t i = 0; i < lanes.size(); ++i)
      if (LaneTimeS(r, lanes[i].load, lanes[i].degree) >
          LaneTimeS(r, lanes[worst].load, lanes[worst].degree))
        worst = i;
    if (lanes[worst].seqs.empty()) break;
    const int heaviest = lanes[worst].seqs.front();  // LPT adds heaviest first
    degree[heaviest] = std::max(degree[heaviest], 1) + step;
  }
  return best;
}

}  // namespace

Plan RefShareStrategy::Solve(const PlanRequest& request,
                             const PlanOptions&) const {
  return Tune(request, name(), {0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0},
              [&](double k) { return ShareLanes(request, k); });
}

Plan RefBisectStrategy::Solve(const PlanRequest& request,
                              const PlanOptions&) const {
  return Tune(request, name(), {1, 2, 4, 8}, [&](double g) {
    return BisectLanes(request, static_cast<int>(g));
  });
}

Plan RefGrowStrategy::Solve(const PlanRequest& request,
                            const PlanOptions&) const {
  return Tune(request, name(), {1, 2, 4}, [&](double step) {
    return GrowLanes(request, static_cast<int>(step));
  });
}

}  // namespace fcp::baselines
