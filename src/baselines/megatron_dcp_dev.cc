// `megatron-dcp-dev`: Megatron-LM dev's packing-aware Dynamic-CP scheduler
// (megatron/core/datasets/data_schedule.py, DefaultDynamicCPScheduler;
// data_schedule_utils.py, next_hdp_group_packing_aware), ported rule by rule;
// docs/baselines.md cites each rule. Unlike 0.19.2's BalancedCPScheduler
// (megatron-dcp), a CP group packs several sequences into one THD micro-batch.
#include <algorithm>
#include <limits>
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

// One micro-batch (next_hdp_group_packing_aware). `pending`: sequence indices
// longest first. Returns the groups (tiling all N ranks) and leaves the
// sequences it did not place in `pending`, in order.
std::vector<DevGroup> NextMicroBatch(const PlanRequest& request,
                                     int64_t max_seqlen,
                                     std::vector<int>& pending) {
  const int n = request.cluster.num_ranks;
  const auto len = [&](int k) { return request.sequences[k].length_tokens; };
  const double cap = static_cast<double>(len(pending.front())) *
                     static_cast<double>(max_seqlen) *
                     (1.0 + kWorkloadCapDelta);
  std::vector<DevGroup> groups;
  // A rank's workload (exec_times) is its group's load; free ranks have 0.
  // So the projected maximum of a placement is max(busiest, new load).
  double busiest = 0;
  int used = 0;  // ranks [0, used) belong to groups, the rest are free
  const auto place = [&](DevGroup& g, int k) {
    g.members.push_back(k);
    g.packed_per_rank += static_cast<double>(len(k)) / g.size;
    g.load += Workload(len(k), g.size);
    busiest = std::max(busiest, g.load);
  };
  {
    const int k = pending.front();
    const int cp = static_cast<int>(GpusNeeded(len(k), max_seqlen));
    FCP_CHECK(cp <= n);  // the caller checked every sequence's size
    groups.push_back({0, cp, 0.0, 0.0, {}});
    used = cp;
    place(groups.back(), k);
  }
  std::vector<int> leftovers;
  for (size_t i = 1; i < pending.size(); ++i) {
    const int k = pending[i];
    // The best option: smallest projected max rank workload within the cap;
    // sizes from the minimum up by doubling, existing groups before a new one.
    double best = std::numeric_limits<double>::infinity();
    int best_group = -1, best_new_size = 0;
    for (int64_t cp = GpusNeeded(len(k), max_seqlen); cp <= n; cp *= 2) {
      const double cost = Workload(len(k), static_cast<int>(cp));
      const double per_rank =
          static_cast<double>(len(k)) / static_cast<double>(cp);
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
    if (best_group >= 0) {
      place(groups[best_group], k);
    } else if (best_new_size > 0) {
      groups.push_back({used, best_new_size, 0.0, 0.0, {}});
      used += best_new_size;
      place(groups.back(), k);
    } else {
      leftovers.push_back(k);
    }
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
      DevGroup full{0, n, 0.0, 0.0, {}};
      leftovers.clear();
      for (int k : pending) {
        const double per_rank = static_cast<double>(len(k)) / n;
        if (full.packed_per_rank + per_rank <=
            static_cast<double>(max_seqlen)) {
          full.members.push_back(k);
          full.packed_per_rank += per_rank;
        } else {
          leftovers.push_back(k);
        }
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
  pending = std::move(leftovers);
  return groups;
}

}  // namespace

std::vector<std::vector<DcpCpGroup>> ScheduleDynamicCpDev(
    const PlanRequest& request, int64_t max_seqlen_per_rank,
    int* infeasible_sequence) {
  FCP_CHECK(max_seqlen_per_rank >= 1);
  *infeasible_sequence = -1;
  const int n = request.cluster.num_ranks;
  std::vector<int> pending = LongestFirst(request);
  for (int k : pending) {
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
