#include "baselines/dynamic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>

#include "baselines/common.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {

int64_t DcpDegree(const CostModel& cm, int64_t length_tokens) {
  const double headroom = cm.mem_capacity - cm.mem_static;
  if (cm.mem_per_token <= 0) return 1;
  const double per_rank = std::floor(headroom / cm.mem_per_token);
  if (per_rank < 1) return int64_t{1} << 62;
  const double need = std::ceil(static_cast<double>(length_tokens) / per_rank);
  int64_t d = NextPowerOfTwo(static_cast<int64_t>(std::min(need, 4.6e18)));
  // floor() above may make T one token too small, never too large; the memory
  // model (not T) is what the validator checks, so also ensure d holds it.
  while (MinDegree(cm, GroupLoad::Of(Sequence{length_tokens, 0.0})) > d) d *= 2;
  return d;
}

// ---------------------------------------------------------------- bytescale
//
// Data-aware sharding (ByteScale §4, our reading): every sequence runs on the
// fewest ranks that hold it, d_min; sequences with d_min = 1 are packed,
// longest first, next-fit into one-rank chunks up to a rank's memory.
// Balance scheduler (§5, our reading): ranks synchronise only at the
// end of the global batch, so each rank may run a different number of
// micro-batches; the items (long sequences and short-sequence chunks) are
// taken longest estimated time first and each goes to the aligned block of
// d ranks that becomes free first (list scheduling on accumulated time). An
// item's micro-batch index is one past the last one used on its ranks, so a
// rank's items run back to back; the simulator starts a group as soon as its
// ranks are free, which realises the list schedule. Its makespan is the
// plan's est_ms (ListScheduleMs over the micro-batches in order replays the
// same per-rank chains).
// O(K log K + Σ_items (d + B·log N)) where B is the number of distinct d.
namespace {

// Max over ranks with point updates (values only grow).
class MaxTree {
 public:
  explicit MaxTree(int n) : size_(1) {
    while (size_ < n) size_ *= 2;
    tree_.assign(2 * size_, 0.0);
  }
  void Set(int i, double v) {
    for (i += size_, tree_[i] = v, i /= 2; i >= 1; i /= 2)
      tree_[i] = std::max(tree_[2 * i], tree_[2 * i + 1]);
  }
  double Max(int lo, int hi) const {  // [lo, hi)
    double m = 0;
    for (lo += size_, hi += size_; lo < hi; lo /= 2, hi /= 2) {
      if (lo & 1) m = std::max(m, tree_[lo++]);
      if (hi & 1) m = std::max(m, tree_[--hi]);
    }
    return m;
  }

 private:
  int size_;
  std::vector<double> tree_;
};

// One schedule at per-rank token capacity `capacity_tokens` (ByteScale's rank
// capacity C, arXiv 2502.21231 §5.3 Alg. 1: a sequence of s tokens gets
// max(d_min, ceil(s / C)) ranks, §5.1, without §5.2's selective offloading;
// short sequences are packed best-fit up to C tokens), then list-scheduled
// (§6.1: ranks run different numbers of micro-batches; §6.3 Alg. 2's DP
// balance as longest-first list scheduling; docs/baselines.md states the
// differences). Sets *makespan_s.
// Long because: a step-by-step port of ByteScale's scheduler (§6.1-6.3), whose
// packing, list scheduling and memory checks share one state.
Plan ScheduleByteScale(const PlanRequest& request, double capacity_tokens,
                       double* makespan_out) {
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  struct Item {
    int degree;
    std::vector<int> members;
    double time_s;
  };
  std::vector<Item> items;
  std::vector<int> shorts;
  for (int k = 0; k < k_total; ++k) {
    const double len = static_cast<double>(request.sequences[k].length_tokens);
    const int64_t d = std::min<int64_t>(
        n, std::max<int64_t>(
               MinDegree(request.cost, GroupLoad::Of(request.sequences[k])),
               static_cast<int64_t>(std::ceil(len / capacity_tokens))));
    if (d > 1)
      items.push_back({static_cast<int>(d), {k}, 0});
    else
      shorts.push_back(k);
  }
  std::stable_sort(shorts.begin(), shorts.end(), [&](int a, int b) {
    return request.sequences[a].length_tokens >
           request.sequences[b].length_tokens;
  });
  // ByteScale Alg. 1 line 8: the short sequences are packed "by best-fit
  // strategy to fill capacity C": longest first, each into the open one-rank
  // chunk with the least room left that still holds it (ties: the chunk
  // opened first), else into a new chunk; a chunk also stays within one
  // rank's memory. O(K log K) with the chunks keyed by (room left, index).
  std::set<std::pair<double, size_t>> room;  // (C - tokens, index in items)
  std::vector<double> chunk_tokens(items.size() + shorts.size(), 0.0);
  for (int k : shorts) {
    const double len = static_cast<double>(request.sequences[k].length_tokens);
    auto it = room.lower_bound({len, 0});
    if (it != room.end() &&
        !FitsOnLoad(request.cost, chunk_tokens[it->second] + len, 1)) {
      it = room.end();  // the best fit by tokens overflows memory: a new chunk
    }
    size_t chunk;
    if (it == room.end()) {
      chunk = items.size();
      items.push_back({1, {}, 0});
    } else {
      chunk = it->second;
      room.erase(it);
    }
    items[chunk].members.push_back(k);
    chunk_tokens[chunk] += len;
    room.insert({capacity_tokens - chunk_tokens[chunk], chunk});
  }
  for (Item& it : items) {
    GroupLoad load;
    for (int k : it.members) load.Add(request.sequences[k]);
    it.time_s = GroupTimeBestS(request.cost, request.cluster, load, it.degree);
  }
  std::stable_sort(
      items.begin(), items.end(),
      [](const Item& a, const Item& b) { return a.time_s > b.time_s; });

  MaxTree finish(n);
  std::vector<double> finish_of(n, 0.0);
  std::vector<int> last_mb(n, -1);
  // Per degree, aligned blocks [j*d, (j+1)*d) keyed by when they are all free;
  // keys are lower bounds refreshed lazily (finish times only grow).
  using Entry = std::pair<double, int>;  // (free at, block)
  std::map<int,
           std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>>
      blocks;
  Plan plan;
  plan.num_ranks = n;
  double makespan_s = 0;
  for (Item& it : items) {
    const int d = it.degree;
    auto [pos, fresh] = blocks.try_emplace(d);
    auto& heap = pos->second;
    if (fresh) {
      for (int j = 0; (j + 1) * d <= n; ++j)
        heap.push({finish.Max(j * d, (j + 1) * d), j});
    }
    int block = -1;
    double free_at = 0;
    while (true) {
      const auto [key, j] = heap.top();
      heap.pop();
      const double actual = finish.Max(j * d, (j + 1) * d);
      if (actual > key) {
        heap.push({actual, j});
        continue;
      }
      block = j;
      free_at = actual;
      break;
    }
    const std::vector<int> ranks = RankRange(block * d, d);
    GroupLoad load;
    for (int k : it.members) load.Add(request.sequences[k]);
    const double end =
        free_at + GroupTimeOnRanksS(request.cost, request.cluster, load, ranks);
    int mb = 0;
    for (int r : ranks) mb = std::max(mb, last_mb[r] + 1);
    for (int r : ranks) {
      last_mb[r] = mb;
      finish.Set(r, end);
    }
    heap.push({end, block});
    makespan_s = std::max(makespan_s, end);
    if (static_cast<int>(plan.micro_batches.size()) <= mb)
      plan.micro_batches.resize(mb + 1);
    plan.micro_batches[mb].groups.push_back(
        {ranks, std::move(it.members), CommKind::kRing, 0, 0});
  }
  plan.notes["micro_batches"] = std::to_string(plan.micro_batches.size());
  plan.notes["items"] = std::to_string(items.size());
  *makespan_out = makespan_s;
  return plan;
}

}  // namespace

// C is ByteScale's setting. Its candidates: the memory limit T_mem (at most
// the longest sequence) and floor(T_mem / 2^j) for 2^j <= 2N, not below the
// shortest sequence nor 1. At most log2(N) + 2 values, largest first.
std::vector<int64_t> ByteScaleCapacityCandidates(const PlanRequest& request) {
  int64_t shortest = std::numeric_limits<int64_t>::max(), longest = 0;
  for (const Sequence& s : request.sequences) {
    shortest = std::min(shortest, s.length_tokens);
    longest = std::max(longest, s.length_tokens);
  }
  const CostModel& cm = request.cost;
  double t_mem = cm.mem_per_token > 0
                     ? (cm.mem_capacity - cm.mem_static) / cm.mem_per_token
                     : static_cast<double>(longest);
  t_mem = std::max(1.0, std::min(t_mem, static_cast<double>(longest)));
  std::vector<int64_t> out;
  for (int64_t p = 1; p <= 2 * static_cast<int64_t>(request.cluster.num_ranks);
       p *= 2) {
    const double c = std::floor(t_mem / static_cast<double>(p));
    if (p > 1 && (c < static_cast<double>(shortest) || c < 1)) break;
    out.push_back(static_cast<int64_t>(std::max(1.0, c)));
  }
  return out;
}

// PlanOptions::capacity_tokens > 0 fixes C (`fcp simulate` tunes it on the
// warm-up batches by simulated time, as a user sets it once); 0 tunes it per
// batch like the static degrees: the candidates largest first, stopping after
// two successive worse makespans; the smallest list-schedule makespan is kept.
Plan ByteScaleStrategy::Solve(const PlanRequest& request,
                              const PlanOptions& options) const {
  const int n = request.cluster.num_ranks;
  for (size_t k = 0; k < request.sequences.size(); ++k) {
    const int64_t d =
        MinDegree(request.cost, GroupLoad::Of(request.sequences[k]));
    if (d > n) {
      return InfeasiblePlan(name(), request, static_cast<int>(k),
                            "sequences[" + std::to_string(k) + "] needs " +
                                std::to_string(d) + " ranks > N");
    }
  }
  const bool fixed = options.capacity_tokens > 0;
  const std::vector<int64_t> candidates =
      fixed ? std::vector<int64_t>{options.capacity_tokens}
            : ByteScaleCapacityCandidates(request);
  Plan best;
  double best_s = std::numeric_limits<double>::infinity();
  int64_t best_c = 0;
  std::string tried;
  int worse = 0;
  double prev_s = std::numeric_limits<double>::infinity();
  for (int64_t c : candidates) {
    double makespan_s = 0;
    Plan plan = ScheduleByteScale(request, static_cast<double>(c), &makespan_s);
    tried += (tried.empty() ? "" : ",") + std::to_string(c) + ":" +
             FormatDouble(1000.0 * makespan_s, 5) + "ms";
    if (makespan_s < best_s)
      best_s = makespan_s, best = std::move(plan), best_c = c;
    worse = makespan_s > prev_s ? worse + 1 : 0;
    prev_s = makespan_s;
    if (worse >= 2) break;
  }
  best.notes["capacity_tokens"] = std::to_string(best_c);
  best.notes["capacity_source"] =
      fixed ? "fixed (--capacity)" : "tuned (smallest est_ms)";
  best.notes["capacity_candidates"] = tried;
  return best;
}

}  // namespace fcp::baselines
