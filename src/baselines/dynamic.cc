#include "baselines/dynamic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
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
// Long sequences (d_min > 1) are dealt, largest d_min first, first-fit into
// micro-batches (Σ d_min <= N) and each gets exactly d_min ranks (its own ring
// group, contiguous, largest first). The remaining ranks of a micro-batch are
// single-rank groups. Short sequences (d_min == 1), longest first, then go to
// the group (any micro-batch, long groups included) whose micro-batch
// makespan grows least, ties to the smallest resulting group time, memory
// permitting; if none has room, a new micro-batch of single ranks is opened.
Plan ByteScaleStrategy::Solve(const PlanRequest& request,
                              const PlanOptions& /*options*/) const {
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  std::vector<int64_t> dmin(k_total);
  std::vector<int> longs, shorts;
  for (int k = 0; k < k_total; ++k) {
    dmin[k] = MinDegree(request.cost, GroupLoad::Of(request.sequences[k]));
    if (dmin[k] > n) {
      return InfeasiblePlan(name(), request, k,
                            "sequences[" + std::to_string(k) + "] needs " +
                                std::to_string(dmin[k]) + " ranks > N");
    }
    (dmin[k] > 1 ? longs : shorts).push_back(k);
  }
  std::stable_sort(longs.begin(), longs.end(),
                   [&](int a, int b) { return dmin[a] > dmin[b]; });
  struct Group {
    std::vector<int> ranks;
    std::vector<int> members;
    GroupLoad load;
    double time_s = 0;
  };
  struct Mb {
    std::vector<Group> groups;
    int used = 0;
    double makespan_s = 0;
  };
  std::vector<Mb> mbs;
  std::vector<std::vector<int>> long_of_mb;
  for (int k : longs) {
    size_t m = 0;
    while (m < mbs.size() && mbs[m].used + dmin[k] > n) ++m;
    if (m == mbs.size()) mbs.emplace_back();
    Group g;
    g.ranks = RankRange(mbs[m].used, static_cast<int>(dmin[k]));
    mbs[m].used += static_cast<int>(dmin[k]);
    g.members.push_back(k);
    g.load.Add(request.sequences[k]);
    mbs[m].groups.push_back(std::move(g));
  }
  auto add_singles = [&](Mb& mb) {
    for (int r = mb.used; r < n; ++r) {
      Group g;
      g.ranks = {r};
      mb.groups.push_back(std::move(g));
    }
    mb.used = n;
  };
  if (mbs.empty()) mbs.emplace_back();
  for (Mb& mb : mbs) {
    add_singles(mb);
    for (Group& g : mb.groups) {
      g.time_s = g.members.empty() ? 0
                                   : GroupTimeOnRanksS(request.cost, request.cluster,
                                                       g.load, g.ranks);
      mb.makespan_s = std::max(mb.makespan_s, g.time_s);
    }
  }
  std::vector<double> single_time(k_total, 0);
  for (int k : shorts) {
    single_time[k] = GroupTimeS(request.cost, GroupLoad::Of(request.sequences[k]), 1,
                                request.cost.bw_intra_node);
  }
  std::stable_sort(shorts.begin(), shorts.end(),
                   [&](int a, int b) { return single_time[a] > single_time[b]; });
  for (int k : shorts) {
    const Sequence& s = request.sequences[k];
    size_t best_m = 0, best_g = 0;
    double best_inc = std::numeric_limits<double>::infinity(), best_t = 0;
    for (size_t m = 0; m < mbs.size(); ++m) {
      for (size_t gi = 0; gi < mbs[m].groups.size(); ++gi) {
        Group& g = mbs[m].groups[gi];
        GroupLoad load = g.load;
        load.Add(s);
        const int d = static_cast<int>(g.ranks.size());
        if (GroupMemBytes(request.cost, load, d) > request.cost.mem_capacity) continue;
        const double t = GroupTimeOnRanksS(request.cost, request.cluster, load, g.ranks);
        const double inc = std::max(0.0, t - mbs[m].makespan_s);
        if (inc < best_inc || (inc == best_inc && t < best_t)) {
          best_inc = inc, best_t = t, best_m = m, best_g = gi;
        }
      }
    }
    if (!std::isfinite(best_inc)) {
      mbs.emplace_back();
      add_singles(mbs.back());
      best_m = mbs.size() - 1;
      best_g = 0;
      GroupLoad load = GroupLoad::Of(s);
      best_t = GroupTimeOnRanksS(request.cost, request.cluster, load,
                                 mbs[best_m].groups[0].ranks);
    }
    Group& g = mbs[best_m].groups[best_g];
    g.members.push_back(k);
    g.load.Add(s);
    g.time_s = best_t;
    mbs[best_m].makespan_s = std::max(mbs[best_m].makespan_s, best_t);
  }
  Plan plan;
  plan.num_ranks = n;
  for (Mb& mb : mbs) {
    MicroBatchPlan out;
    for (Group& g : mb.groups) {
      if (g.members.empty()) continue;
      out.groups.push_back({g.ranks, g.members, CommKind::kRing, 0, 0});
    }
    if (!out.groups.empty()) plan.micro_batches.push_back(std::move(out));
  }
  plan.notes["micro_batches"] = std::to_string(plan.micro_batches.size());
  return plan;
}

}  // namespace fcp::baselines
