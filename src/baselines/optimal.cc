#include "baselines/optimal.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "baselines/common.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {

// Long because: the exhaustive DP's subset tables are filled and read back
// into the plan in one pass over the same state.
Plan OptimalStrategy::Solve(const PlanRequest& request,
                            const PlanOptions& /*options*/) const {
  const int k_total = static_cast<int>(request.sequences.size());
  const int n = request.cluster.num_ranks;
  if (k_total > kOptimalMaxSequences) {
    throw InputError("sequences", "optimal supports at most " +
                                      std::to_string(kOptimalMaxSequences) +
                                      " sequences (got " +
                                      std::to_string(k_total) +
                                      "); its exhaustive search is O(3^K N^2)");
  }
  if (n > kOptimalMaxRanks) {
    throw InputError("cluster.num_ranks", "optimal supports at most " +
                                              std::to_string(kOptimalMaxRanks) +
                                              " ranks (got " +
                                              std::to_string(n) + ")");
  }
  const int bad = FirstNotFitting(request, n);
  if (bad >= 0) {
    return InfeasiblePlan(name(), request, bad,
                          "sequences[" + std::to_string(bad) +
                              "] does not fit in memory even on all N ranks");
  }
  const uint32_t full = (uint32_t{1} << k_total) - 1;
  const size_t num_sets = size_t{1} << k_total;
  // Per subset: load and d_min; per (subset, d, intra?) the time.
  std::vector<GroupLoad> load(num_sets);
  std::vector<int> dmin(num_sets, n + 1);
  for (uint32_t s = 1; s <= full; ++s) {
    const int low = __builtin_ctz(s);
    load[s] = load[s & (s - 1)];
    load[s].Add(request.sequences[low]);
    const int64_t d = MinDegree(request.cost, load[s]);
    dmin[s] = static_cast<int>(std::min<int64_t>(d, n + 1));
  }
  const size_t stride = static_cast<size_t>(n + 1) * 2;
  std::vector<double> time(num_sets * stride, 0);
  for (uint32_t s = 1; s <= full; ++s) {
    for (int d = dmin[s]; d <= n; ++d) {
      time[s * stride + d * 2 + 0] =
          GroupTimeS(request.cost, load[s], d, Link::kInterNode);
      time[s * stride + d * 2 + 1] =
          GroupTimeS(request.cost, load[s], d, Link::kIntraNode);
    }
  }
  const double inf = std::numeric_limits<double>::infinity();
  // f[p][S], choice[p][S] = (G, d) with G == 0 meaning "rank p idles".
  std::vector<double> f(static_cast<size_t>(n + 1) * num_sets, inf);
  std::vector<uint32_t> choice_set(f.size(), 0);
  std::vector<uint8_t> choice_d(f.size(), 0);
  auto at = [&](int p, uint32_t s) {
    return static_cast<size_t>(p) * num_sets + s;
  };
  f[at(n, 0)] = 0;
  for (int p = n - 1; p >= 0; --p) {
    f[at(p, 0)] = 0;
    for (uint32_t s = 1; s <= full; ++s) {
      double best = f[at(p + 1, s)];
      uint32_t best_g = 0;
      int best_d = 0;
      for (uint32_t g = s; g; g = (g - 1) & s) {
        const int lo = dmin[g];
        const uint32_t rest = s & ~g;
        for (int d = lo; p + d <= n; ++d) {
          const double tail = f[at(p + d, rest)];
          if (tail >= best) continue;
          const bool intra = RangeOnOneNode(request.cluster, p, d);
          const double t = time[g * stride + d * 2 + (intra ? 1 : 0)];
          const double v = std::max(t, tail);
          if (v < best) best = v, best_g = g, best_d = d;
        }
      }
      f[at(p, s)] = best;
      choice_set[at(p, s)] = best_g;
      choice_d[at(p, s)] = static_cast<uint8_t>(best_d);
    }
  }
  if (!(f[at(0, full)] < inf)) {
    throw InputError(
        "sequences",
        "optimal plans a single micro-batch and no single micro-batch "
        "of N ranks holds all sequences in memory");
  }
  Plan plan;
  plan.num_ranks = n;
  MicroBatchPlan mb;
  int p = 0;
  uint32_t s = full;
  while (s) {
    FCP_CHECK(p < n);
    const uint32_t g = choice_set[at(p, s)];
    if (g == 0) {
      ++p;
      continue;
    }
    const int d = choice_d[at(p, s)];
    GroupPlan gp;
    gp.ranks = RankRange(p, d);
    for (int k = 0; k < k_total; ++k) {
      if (g & (uint32_t{1} << k)) gp.sequences.push_back(k);
    }
    mb.groups.push_back(std::move(gp));
    s &= ~g;
    p += d;
  }
  plan.micro_batches.push_back(std::move(mb));
  plan.notes["search"] =
      "exhaustive DP over (rank, unplaced set): proven optimal";
  plan.notes["optimal_makespan_ms"] = FormatDouble(1000.0 * f[at(0, full)], 12);
  return plan;
}

}  // namespace fcp::baselines
