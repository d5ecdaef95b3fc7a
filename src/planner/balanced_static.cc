#include "planner/balanced_static.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>

#include "fcp/cost_model.h"
#include "planner/microbatch.h"

namespace fcp::planner {
namespace {

// Sequences by work, descending (ties: longer first, then index): the LPT order.
struct WorkOrder {
  std::vector<int> order;
  std::vector<double> work;
  int64_t max_min_degree = 1;  // max_k d_min({s_k}): the smallest usable cp
};

WorkOrder MakeWorkOrder(const PlanRequest& request) {
  const auto& seqs = request.sequences;
  WorkOrder w;
  w.order.resize(seqs.size());
  w.work.resize(seqs.size());
  std::iota(w.order.begin(), w.order.end(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) w.work[i] = SequenceWorkS(request.cost, seqs[i]);
  // d_min grows with length: the longest sequence decides.
  int64_t longest = 0;
  for (const auto& s : seqs) longest = std::max(longest, s.length_tokens);
  w.max_min_degree = MinDegree(request.cost, GroupLoad::Of({longest, 0.0}));
  std::stable_sort(w.order.begin(), w.order.end(), [&](int a, int b) {
    if (w.work[a] != w.work[b]) return w.work[a] > w.work[b];
    return seqs[a].length_tokens > seqs[b].length_tokens;
  });
  return w;
}

using Entry = std::pair<double, int>;  // (work, index), min-heap
using MinHeap = std::priority_queue<Entry, std::vector<Entry>, std::greater<>>;

// LPT of `share` (in work order) into `count` micro-batches whose tokens each
// fit `cap_tokens`; empty when that count does not fit.
std::vector<std::vector<int>> PackShare(const PlanRequest& request, const WorkOrder& w,
                                        const std::vector<int>& share, int count,
                                        double cap_tokens) {
  std::vector<double> tokens(request.sequences.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<double>(request.sequences[i].length_tokens);
  return LptPack(share, w.work, tokens, cap_tokens, count);
}

// The fewest micro-batches (>= `at_least`) into which LPT packs `share`.
std::vector<std::vector<int>> PackFewest(const PlanRequest& request, const WorkOrder& w,
                                         const std::vector<int>& share, int at_least,
                                         double cap_tokens) {
  const int k = static_cast<int>(share.size());
  int count = std::clamp(at_least, 1, std::max(1, k));
  for (int attempt = 0;; ++attempt) {
    auto mbs = PackShare(request, w, share, count, cap_tokens);
    if (!mbs.empty() || count >= k) return mbs;
    count = attempt < 4 ? count + 1 : std::min(k, count + std::max(1, count / 8));
  }
}

std::optional<std::vector<MicroBatchPlan>> Build(const PlanRequest& request, const WorkOrder& w,
                                                 int cp, CommKind comm) {
  const int n = request.cluster.num_ranks;
  if (cp < 1 || n % cp != 0) return std::nullopt;
  const CostModel& cm = request.cost;
  if (w.max_min_degree > cp) return std::nullopt;
  // Tokens a group of cp ranks holds within memory (mem_per_token may be 0).
  const double cap_tokens = cm.mem_per_token > 0
                                ? cp * (cm.mem_capacity - cm.mem_static) / cm.mem_per_token
                                : std::numeric_limits<double>::infinity();
  const int dp = n / cp;
  std::vector<std::vector<int>> shares(dp);
  std::vector<double> share_tokens(dp, 0.0);
  {
    MinHeap heap;
    for (int j = 0; j < dp; ++j) heap.push({0.0, j});
    for (int i : w.order) {
      const auto [load, j] = heap.top();
      heap.pop();
      shares[j].push_back(i);
      share_tokens[j] += static_cast<double>(request.sequences[i].length_tokens);
      heap.push({load + w.work[i], j});
    }
  }
  // One micro-batch count for every replica: the largest any replica needs.
  int count = 1;
  for (int j = 0; j < dp; ++j) {
    if (shares[j].empty()) continue;
    const int need = std::isfinite(cap_tokens)
                         ? static_cast<int>(std::ceil(share_tokens[j] / cap_tokens - 1e-12))
                         : 1;
    count = std::max(count,
                     static_cast<int>(PackFewest(request, w, shares[j], need, cap_tokens).size()));
  }
  std::vector<MicroBatchPlan> mbs(count);
  for (int j = 0; j < dp; ++j) {
    if (shares[j].empty()) continue;
    auto packed = PackShare(request, w, shares[j], std::min<int>(count, shares[j].size()),
                            cap_tokens);
    if (packed.empty()) packed = PackFewest(request, w, shares[j], count, cap_tokens);
    std::vector<double> work(packed.size(), 0.0);
    for (size_t m = 0; m < packed.size(); ++m) {
      for (int i : packed[m]) work[m] += w.work[i];
    }
    std::vector<int> by_work(packed.size());
    std::iota(by_work.begin(), by_work.end(), 0);
    std::stable_sort(by_work.begin(), by_work.end(),
                     [&](int a, int b) { return work[a] > work[b]; });
    if (packed.size() > mbs.size()) mbs.resize(packed.size());
    for (size_t m = 0; m < packed.size(); ++m) {
      auto& members = packed[by_work[m]];
      if (members.empty()) continue;
      std::sort(members.begin(), members.end());
      GroupPlan g;
      g.ranks.resize(cp);
      std::iota(g.ranks.begin(), g.ranks.end(), j * cp);
      g.sequences = std::move(members);
      g.comm = comm;
      mbs[m].groups.push_back(std::move(g));
    }
  }
  std::erase_if(mbs, [](const MicroBatchPlan& mb) { return mb.groups.empty(); });
  return mbs;
}

}  // namespace

std::optional<std::vector<MicroBatchPlan>> BalancedStaticMicroBatches(const PlanRequest& request,
                                                                      int cp, CommKind comm) {
  return Build(request, MakeWorkOrder(request), cp, comm);
}

double RingPlanEstimateMs(const PlanRequest& request, const std::vector<MicroBatchPlan>& mbs) {
  double total_s = 0;
  for (const MicroBatchPlan& mb : mbs) {
    double worst = 0;
    for (const GroupPlan& g : mb.groups) {
      GroupLoad load;
      for (int i : g.sequences) load.Add(request.sequences[i]);
      worst = std::max(worst, GroupTimeOnRanksS(request.cost, request.cluster, load, g.ranks));
    }
    total_s += worst;
  }
  return 1000.0 * total_s;
}

std::optional<BalancedStatic> BestBalancedStatic(const PlanRequest& request, double below_ms) {
  const WorkOrder w = MakeWorkOrder(request);
  const int n = request.cluster.num_ranks;
  // A bound per degree: every plan on degree cp holds the heaviest sequence
  // in some group of cp ranks, at best on the faster link (T grows with a
  // group's contents). Degrees are tried by the larger of the two bounds, and a degree whose
  // bound cannot beat the best plan so far is skipped (pure speed: the result
  // is the same as trying every divisor).
  const CostModel& cm = request.cost;
  const GroupLoad heaviest = GroupLoad::Of(request.sequences[w.order.front()]);
  GroupLoad all;
  for (const Sequence& s : request.sequences) all.Add(s);
  std::vector<std::pair<double, int>> degrees;
  for (int cp = 1; cp <= n; ++cp) {
    if (n % cp != 0 || cp < w.max_min_degree) continue;
    // Also T >= Tcp, which adds up over a replica's sequences: the busiest
    // replica carries at least the average compute of n / cp replicas.
    const double average_s =
        (all.sum_attn / cp * cm.alpha1 + cm.alpha1 * cm.attn_overhead_tokens * all.sum_attn_tokens +
         cm.alpha2 * all.sum_tokens / cp) /
            (n / cp) +
        cm.beta1;
    const double bound_ms =
        1000.0 * std::max(average_s,
                          std::min(GroupTimeS(cm, heaviest, cp, Link::kIntraNode),
                                   GroupTimeS(cm, heaviest, cp, Link::kInterNode)));
    degrees.emplace_back(bound_ms, cp);
  }
  std::sort(degrees.begin(), degrees.end());
  std::optional<BalancedStatic> best;
  for (const auto& [bound_ms, cp] : degrees) {
    if (bound_ms >= below_ms || (best && bound_ms >= best->est_ms)) break;
    auto mbs = Build(request, w, cp, CommKind::kRing);
    if (!mbs) continue;
    const double ms = RingPlanEstimateMs(request, *mbs);
    if (!best || ms < best->est_ms) best = BalancedStatic{cp, ms, std::move(*mbs)};
  }
  return best;
}

}  // namespace fcp::planner
