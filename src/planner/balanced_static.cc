#include "planner/balanced_static.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "fcp/cost_model.h"
#include "planner/heap.h"
#include "planner/microbatch.h"

namespace fcp::planner {
namespace {

using Entry = std::pair<double, int>;  // (work, index)

}  // namespace

BalancedStaticBuilder::BalancedStaticBuilder(const PlanRequest& request,
                                             const WorkOrder* work_order)
    : request_(request) {
  const auto& seqs = request.sequences;
  if (work_order) {
    order_ = work_order->order;
    work_ = work_order->work;
  } else {
    WorkOrder w = MakeWorkOrder(seqs, request.cost);
    order_ = std::move(w.order);
    work_ = std::move(w.work);
  }
  tokens_.resize(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    tokens_[i] = static_cast<double>(seqs[i].length_tokens);
  // d_min grows with length: the longest sequence decides.
  int64_t longest = 0;
  for (const auto& s : seqs) longest = std::max(longest, s.length_tokens);
  max_min_degree_ = MinDegree(request.cost, GroupLoad::Of({longest, 0.0}));
}

// The fewest micro-batches (>= `at_least`) into which LPT packs `share`.
std::vector<std::vector<int>> BalancedStaticBuilder::PackFewest(
    const std::vector<int>& share, int at_least, double cap_tokens) const {
  const int k = static_cast<int>(share.size());
  int count = std::clamp(at_least, 1, std::max(1, k));
  for (int attempt = 0;; ++attempt) {
    auto mbs = LptPack(share, work_, tokens_, cap_tokens, count);
    if (!mbs.empty() || count >= k) return mbs;
    count =
        attempt < 4 ? count + 1 : std::min(k, count + std::max(1, count / 8));
  }
}

// Long because: deal, pack and interleave share per-replica buffers.
std::optional<std::vector<MicroBatchPlan>> BalancedStaticBuilder::MicroBatches(
    int cp, CommKind comm) const {
  const PlanRequest& request = request_;
  const int n = request.cluster.num_ranks;
  if (cp < 1 || n % cp != 0) return std::nullopt;
  const CostModel& cm = request.cost;
  if (max_min_degree_ > cp) return std::nullopt;
  // Tokens a group of cp ranks holds within memory (mem_per_token may be 0).
  const double cap_tokens =
      cm.mem_per_token > 0
          ? cp * (cm.mem_capacity - cm.mem_static) / cm.mem_per_token
          : std::numeric_limits<double>::infinity();
  const int dp = n / cp;
  std::vector<std::vector<int>> shares(dp);
  std::vector<double> share_tokens(dp, 0.0);
  {
    // Min-heap of (load, replica), the lightest on top; (load, replica) pairs
    // are distinct, so this picks the replica a priority queue would.
    std::vector<Entry> heap(dp);
    for (int j = 0; j < dp; ++j)
      heap[j] = {0.0, j};  // ascending: already a min-heap
    for (int i : order_) {
      const int j = heap[0].second;
      shares[j].push_back(i);
      share_tokens[j] += tokens_[i];
      ReplaceHeapTop(heap, Entry{heap[0].first + work_[i], j}, PairGreater());
    }
  }
  // One micro-batch count for every replica: the largest any replica needs.
  // The packing that decided a replica's count is kept: packing the same
  // share into the same count again gives the same bins.
  int count = 1;
  std::vector<std::vector<std::vector<int>>> fewest(dp);
  for (int j = 0; j < dp; ++j) {
    if (shares[j].empty()) continue;
    const int need =
        std::isfinite(cap_tokens)
            ? static_cast<int>(std::ceil(share_tokens[j] / cap_tokens - 1e-12))
            : 1;
    fewest[j] = PackFewest(shares[j], need, cap_tokens);
    count = std::max(count, static_cast<int>(fewest[j].size()));
  }
  std::vector<MicroBatchPlan> mbs(count);
  for (int j = 0; j < dp; ++j) {
    if (shares[j].empty()) continue;
    const int want = std::min<int>(count, shares[j].size());
    std::vector<std::vector<int>> packed =
        static_cast<int>(fewest[j].size()) == want
            ? std::move(fewest[j])
            : LptPack(shares[j], work_, tokens_, cap_tokens, want);
    if (packed.empty()) packed = PackFewest(shares[j], count, cap_tokens);
    std::vector<double> work(packed.size(), 0.0);
    for (size_t m = 0; m < packed.size(); ++m) {
      for (int i : packed[m]) work[m] += work_[i];
    }
    std::vector<int> by_work(packed.size());
    std::iota(by_work.begin(), by_work.end(), 0);
    std::stable_sort(by_work.begin(), by_work.end(),
                     [&](int a, int b) { return work[a] > work[b]; });
    if (packed.size() > mbs.size()) mbs.resize(packed.size());
    for (size_t m = 0; m < packed.size(); ++m) {
      auto& members = packed[by_work[m]];
      if (members.empty()) continue;
      GroupPlan g;
      g.ranks.resize(cp);
      std::iota(g.ranks.begin(), g.ranks.end(), j * cp);
      g.sequences = std::move(members);
      g.comm = comm;
      mbs[m].groups.push_back(std::move(g));
    }
  }
  // Each group's sequences ascending: every sequence is in exactly one group,
  // so one pass over the indices replaces a sort per group.
  std::vector<std::pair<int, int>> slot(request.sequences.size(), {-1, -1});
  for (size_t m = 0; m < mbs.size(); ++m) {
    for (size_t q = 0; q < mbs[m].groups.size(); ++q) {
      std::vector<int>& members = mbs[m].groups[q].sequences;
      for (int i : members)
        slot[i] = {static_cast<int>(m), static_cast<int>(q)};
      members.clear();
    }
  }
  for (size_t i = 0; i < slot.size(); ++i) {
    const auto [m, q] = slot[i];
    if (m >= 0) mbs[m].groups[q].sequences.push_back(static_cast<int>(i));
  }
  std::erase_if(mbs,
                [](const MicroBatchPlan& mb) { return mb.groups.empty(); });
  return mbs;
}

std::optional<std::vector<MicroBatchPlan>> BalancedStaticMicroBatches(
    const PlanRequest& request, int cp, CommKind comm) {
  return BalancedStaticBuilder(request).MicroBatches(cp, comm);
}

std::optional<BalancedStatic> BestBalancedStatic(const PlanRequest& request,
                                                 double below_ms) {
  return BalancedStaticBuilder(request).Best(below_ms);
}

std::optional<BalancedStatic> BalancedStaticBuilder::Best(
    double below_ms) const {
  const PlanRequest& request = request_;
  const int n = request.cluster.num_ranks;
  // A bound per degree: every plan on degree cp holds the heaviest sequence
  // in some group of cp ranks, at best on the faster link (T grows with a
  // group's contents). Degrees are tried by the larger of the two bounds, and a
  // degree whose bound cannot beat the best plan so far is skipped (pure speed:
  // the result is the same as trying every divisor).
  const CostModel& cm = request.cost;
  const GroupLoad heaviest = GroupLoad::Of(request.sequences[order_.front()]);
  GroupLoad all;
  for (const Sequence& s : request.sequences) all.Add(s);
  std::vector<std::pair<double, int>> degrees;
  for (int cp = 1; cp <= n; ++cp) {
    if (n % cp != 0 || cp < max_min_degree_) continue;
    // Also T >= Tcp, which adds up over a replica's sequences: the busiest
    // replica carries at least the average compute of n / cp replicas, and
    // the plan's makespan is at least the busiest replica's busy time.
    const double average_s = WorkS(cm, all, cp) / (n / cp) + cm.beta1;
    const double bound_ms =
        1000.0 *
        std::max(average_s,
                 std::min(GroupTimeS(cm, heaviest, cp, Link::kIntraNode),
                          GroupTimeS(cm, heaviest, cp, Link::kInterNode)));
    degrees.emplace_back(bound_ms, cp);
  }
  std::sort(degrees.begin(), degrees.end());
  std::optional<BalancedStatic> best;
  for (const auto& [bound_ms, cp] : degrees) {
    if (bound_ms >= below_ms || (best && bound_ms >= best->est_ms)) break;
    auto mbs = MicroBatches(cp, CommKind::kRing);
    if (!mbs) continue;
    const double ms = EstimateMicroBatches(request, *mbs);
    if (!best || ms < best->est_ms)
      best = BalancedStatic{cp, ms, std::move(*mbs)};
  }
  return best;
}

}  // namespace fcp::planner
