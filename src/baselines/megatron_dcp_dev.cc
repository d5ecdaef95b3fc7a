// `megatron-dcp-dev`: Megatron-LM dev's packing-aware Dynamic-CP scheduler
// (megatron/core/datasets/data_schedule.py, DefaultDynamicCPScheduler;
// data_schedule_utils.py, next_hdp_group_packing_aware), ported rule by rule;
// docs/baselines.md cites each rule. Unlike 0.19.2's BalancedCPScheduler
// (megatron-dcp), a CP group packs several sequences into one THD micro-batch.
#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "baselines/common.h"
#include "baselines/megatron_dcp.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {
namespace {

// _DYNAMIC_CP_WORKLOAD_CAP_DELTA: a rank's s²/cp workload may exceed
// tallest x max_seqlen by 5 %.
constexpr double kWorkloadCapDelta = 0.05;

struct DevGroup {
  int first = 0;  // ranks [first, first + size): groups tile [0, used) in
                  // creation order
  int size = 0;
  double packed_per_rank = 0;  // Σ s / size (packing_sequence_len)
  double load = 0;             // Σ s² / size: every member rank's exec_times
  std::vector<int> members;    // sequence indices, in placement order
};

double Workload(int64_t len, int cp) {
  return static_cast<double>(len) * static_cast<double>(len) / cp;
}

// dcp_gpus_needed: max(min_cp, 2^ceil(log2(s / T))), at least 1.
int64_t GpusNeeded(int64_t len, int64_t max_seqlen) {
  return NextPowerOfTwo((len - 1) / max_seqlen +
                        1);  // ceil, no overflow for any T >= 1
}

// The sequences not yet scheduled: positions into the longest-first order,
// with a skip pointer past the scheduled ones (path halving), so that each
// micro-batch starts at the first unscheduled one without rebuilding the list.
class Pending {
 public:
  explicit Pending(std::vector<int> order)
      : order_(std::move(order)), next_(order_.size() + 1) {
    std::iota(next_.begin(), next_.end(), size_t{0});
  }
  size_t size() const { return order_.size(); }
  int at(size_t pos) const { return order_[pos]; }
  // The first unscheduled position >= pos (size() when none).
  size_t From(size_t pos) {
    while (next_[pos] != pos) {
      next_[pos] = next_[next_[pos]];
      pos = next_[pos];
    }
    return pos;
  }
  bool empty() { return From(0) == size(); }
  void Remove(size_t pos) { next_[pos] = pos + 1; }

 private:
  std::vector<int> order_;
  std::vector<size_t> next_;
};

// The first position p in [from, end) with ok(p), given that ok is false up
// to some position and true from there on (end when never): galloping, then
// bisection, O(log distance) calls.
template <class Ok>
size_t FirstOk(size_t from, size_t end, Ok&& ok) {
  if (from >= end || ok(from)) return from;
  size_t bad = from, good = end;
  for (size_t step = 1;; step *= 2) {
    const size_t probe = bad + step;
    if (probe >= end) break;
    if (ok(probe)) {
      good = probe;
      break;
    }
    bad = probe;
  }
  while (good - bad > 1) {
    const size_t mid = bad + (good - bad) / 2;
    (ok(mid) ? good : bad) = mid;
  }
  return good;
}

// One micro-batch (next_hdp_group_packing_aware). `pending`: the unscheduled
// sequences, longest first. Returns the groups (tiling all N ranks) and
// removes the sequences it placed from `pending`.
//
// Megatron tries every pending sequence in order; one that fits nowhere is
// left for the next micro-batch. Whether a sequence fits depends only on its
// length, a shorter one fits wherever a longer one does, and placing one
// only makes every option harder (loads, packed lengths and the busiest rank
// grow; free ranks shrink), so the sequences that fit nowhere form runs
// between placements that are skipped by a galloping search over the
// lengths (which descend): the same placements, O(log K) checks per
// placement instead of one per pending sequence per micro-batch (issue 30:
// O(K · micro-batches)).
// Long because: next_hdp_group_packing_aware and fill_empty_gpus_once ported
// rule by rule; their steps share the micro-batch's groups and free ranks.
std::vector<DevGroup> NextMicroBatch(const PlanRequest& request,
                                     int64_t max_seqlen, Pending& pending) {
  const int n = request.cluster.num_ranks;
  const auto len = [&](size_t pos) {
    return request.sequences[pending.at(pos)].length_tokens;
  };
  const size_t front = pending.From(0);
  const double cap = static_cast<double>(len(front)) *
                     static_cast<double>(max_seqlen) *
                     (1.0 + kWorkloadCapDelta);
  std::vector<DevGroup> groups;
  // A rank's workload (exec_times) is its group's load; free ranks have 0.
  // So the projected maximum of a placement is max(busiest, new load).
  double busiest = 0;
  int used = 0;  // ranks [0, used) belong to groups, the rest are free
  std::vector<size_t> placed;
  const auto place = [&](DevGroup& g, size_t pos) {
    const int64_t l = len(pos);
    g.members.push_back(pending.at(pos));
    g.packed_per_rank += static_cast<double>(l) / g.size;
    g.load += Workload(l, g.size);
    busiest = std::max(busiest, g.load);
    placed.push_back(pos);
  };
  {
    const int cp = static_cast<int>(GpusNeeded(len(front), max_seqlen));
    FCP_CHECK(cp <= n);  // the caller checked every sequence's size
    groups.push_back({0, cp, 0.0, 0.0, {}});
    used = cp;
    place(groups.back(), front);
  }
  // The best option for a sequence of length l: smallest projected max rank
  // workload within the cap; sizes from the minimum up by doubling, existing
  // groups before a new one. {-1, 0}: none.
  const auto best_option = [&](int64_t l) {
    double best = std::numeric_limits<double>::infinity();
    int best_group = -1, best_new_size = 0;
    for (int64_t cp = GpusNeeded(l, max_seqlen); cp <= n; cp *= 2) {
      const double cost = Workload(l, static_cast<int>(cp));
      const double per_rank = static_cast<double>(l) / static_cast<double>(cp);
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        const DevGroup& g = groups[gi];
        if (g.size != cp ||
            g.packed_per_rank + per_rank > static_cast<double>(max_seqlen))
          continue;
        const double projected = std::max(busiest, g.load + cost);
        if (projected <= cap && projected < best) {
          best = projected, best_group = static_cast<int>(gi),
          best_new_size = 0;
        }
      }
      // A new group on the lowest free ranks (all free ranks have workload 0,
      // and Python's stable sort keeps them in rank order).
      if (n - used >= cp) {
        const double projected = std::max(busiest, cost);
        if (projected <= cap && projected < best) {
          best = projected, best_group = -1,
          best_new_size = static_cast<int>(cp);
        }
      }
    }
    return std::pair{best_group, best_new_size};
  };
  const auto fits = [&](size_t pos) {
    const auto [group, new_size] = best_option(len(pos));
    return group >= 0 || new_size > 0;
  };
  for (size_t pos = pending.From(front + 1); pos < pending.size();) {
    pos = pending.From(FirstOk(pos, pending.size(), fits));
    if (pos >= pending.size()) break;
    const auto [best_group, best_new_size] = best_option(len(pos));
    if (best_group >= 0) {
      place(groups[best_group], pos);
    } else {
      groups.push_back({used, best_new_size, 0.0, 0.0, {}});
      used += best_new_size;
      place(groups.back(), pos);
    }
    pos = pending.From(pos + 1);
  }
  // Fill idle ranks (fill_empty_gpus_once): the first group of the smallest
  // size doubles (at most to N), the groups after it shift right; when no
  // group can, fill_with_full_dpxcp_group packs all N ranks afresh.
  while (used < n) {
    int smallest = n;
    for (const DevGroup& g : groups) smallest = std::min(smallest, g.size);
    const int grow = std::min(2 * smallest, n) - smallest;
    int expanded = -1;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const DevGroup& g = groups[gi];
      // Megatron skips a group whose end + grow reaches N; a shift past N
      // (possible only when N is not a power of two) would fail there: skip it.
      if (g.size != smallest || g.first + g.size - 1 + grow >= n ||
          used + grow > n)
        continue;
      expanded = static_cast<int>(gi);
      break;
    }
    if (expanded < 0 || grow == 0) {
      // Every pending sequence in order that still fits the one full group
      // (the same runs argument: packing only fills it).
      DevGroup full{0, n, 0.0, 0.0, {}};
      placed.clear();
      const auto fits_full = [&](size_t pos) {
        return full.packed_per_rank + static_cast<double>(len(pos)) / n <=
               static_cast<double>(max_seqlen);
      };
      for (size_t pos = pending.From(0); pos < pending.size();) {
        pos = pending.From(FirstOk(pos, pending.size(), fits_full));
        if (pos >= pending.size()) break;
        full.members.push_back(pending.at(pos));
        full.packed_per_rank += static_cast<double>(len(pos)) / n;
        placed.push_back(pos);
        pos = pending.From(pos + 1);
      }
      FCP_CHECK(
          !full.members.empty());  // the longest fits on N ranks (checked)
      groups.assign(1, std::move(full));
      used = n;
      break;
    }
    groups[expanded].size += grow;
    for (size_t gi = expanded + 1; gi < groups.size(); ++gi)
      groups[gi].first += grow;
    used += grow;
  }
  for (size_t pos : placed) pending.Remove(pos);
  return groups;
}

}  // namespace

std::vector<std::vector<DcpCpGroup>> ScheduleDynamicCpDev(
    const PlanRequest& request, int64_t max_seqlen_per_rank,
    int* infeasible_sequence) {
  FCP_CHECK(max_seqlen_per_rank >= 1);
  *infeasible_sequence = -1;
  const int n = request.cluster.num_ranks;
  const std::vector<int> longest_first = LongestFirst(request);
  for (int k : longest_first) {
    const int64_t len = request.sequences[k].length_tokens;
    // dcp_gpus_needed must fit in N, and fill_with_full_dpxcp_group must be
    // able to hold the longest sequence alone (s / N <= T).
    if (GpusNeeded(len, max_seqlen_per_rank) > n ||
        static_cast<double>(len) / n >
            static_cast<double>(max_seqlen_per_rank)) {
      *infeasible_sequence = k;
      return {};
    }
  }
  std::vector<std::vector<DcpCpGroup>> steps;
  Pending pending(longest_first);
  while (!pending.empty()) {
    std::vector<DcpCpGroup> step;
    for (DevGroup& g : NextMicroBatch(request, max_seqlen_per_rank, pending)) {
      step.push_back({g.first, g.size, std::move(g.members)});
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

// One plan micro-batch per scheduler micro-batch, each CP group one THD
// forward/backward of all its sequences (memory summed). The setting is tuned
// per batch over DcpMaxSeqlenCandidates by the plan estimate (est_ms), a
// candidate skipped when some sequence cannot be placed or a packed group
// exceeds memory; PlanOptions::max_seqlen_per_rank > 0 fixes it.
Plan MegatronDcpDevStrategy::Solve(const PlanRequest& request,
                                   const PlanOptions& options) const {
  const bool fixed = options.max_seqlen_per_rank > 0;
  const std::vector<int64_t> candidates =
      fixed ? std::vector<int64_t>{options.max_seqlen_per_rank}
            : DcpMaxSeqlenCandidates(request);
  Plan best;
  double best_ms = 0;
  int64_t best_t = 0;
  std::string tried;
  int last_bad = -1;
  for (int64_t t : candidates) {
    int bad = -1;
    const auto steps = ScheduleDynamicCpDev(request, t, &bad);
    if (bad >= 0) {
      last_bad = bad;
      continue;
    }
    Plan plan;
    plan.num_ranks = request.cluster.num_ranks;
    bool fits = true;
    for (const auto& step : steps) {
      MicroBatchPlan mb;
      for (const DcpCpGroup& g : step) {
        fits = fits && FitsOn(request, g.sequences, g.size);
        mb.groups.push_back({RankRange(g.first_rank, g.size), g.sequences,
                             CommKind::kRing, 0, 0});
      }
      plan.micro_batches.push_back(std::move(mb));
    }
    if (!fits) {
      last_bad = std::max(last_bad, 0);
      continue;
    }
    const double ms = EstimateMs(request, plan);
    if (!tried.empty()) tried += ",";
    tried += std::to_string(t) + ":" + FormatDouble(ms, 5) + "ms";
    if (best_t == 0 || ms < best_ms) {
      best = std::move(plan);
      best_ms = ms;
      best_t = t;
    }
  }
  if (best_t == 0) {
    const int k = std::max(0, last_bad);
    return InfeasiblePlan(
        name(), request, k,
        "sequences[" + std::to_string(k) +
            "] cannot be placed by the packing-aware Dynamic-CP scheduler "
            "within memory (needs a power-of-two CP group larger than N = " +
            std::to_string(request.cluster.num_ranks) + " or a larger " +
            "max_seqlen_per_dp_cp_rank)");
  }
  best.notes["max_seqlen_per_dp_cp_rank"] = std::to_string(best_t);
  best.notes["max_seqlen_source"] =
      fixed ? std::string("fixed (--max-seqlen)")
            : "tuned (smallest est_ms among " +
                  std::to_string(candidates.size()) + " candidates)";
  best.notes["max_seqlen_candidates"] = tried;
  best.notes["micro_batches"] = std::to_string(best.micro_batches.size());
  return best;
}

}  // namespace fcp::baselines
