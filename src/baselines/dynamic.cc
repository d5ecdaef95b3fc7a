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

// ---------------------------------------------------------------- megatron-dcp
//
// Per micro-batch, the N ranks are carved into aligned power-of-two blocks
// [j*c, (j+1)*c). Sequences are taken longest-work first (work = s^2 / cp).
// A sequence of degree c joins the least-loaded (by work) group of size c
// with memory room; a free aligned block of size c counts as a group of load
// 0. If neither exists it may join the least-loaded larger group with room;
// otherwise it waits for the next micro-batch. When a micro-batch is closed,
// idle ranks are filled: the group with the most work whose aligned buddy
// block is idle doubles its degree, repeatedly.
Plan MegatronDcpStrategy::Solve(const PlanRequest& request,
                                const PlanOptions& /*options*/) const {
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  int64_t max_pow2 = 1;
  while (max_pow2 * 2 <= n) max_pow2 *= 2;
  std::vector<int64_t> cp(k_total);
  std::vector<double> work(k_total);
  for (int k = 0; k < k_total; ++k) {
    const int64_t len = request.sequences[k].length_tokens;
    cp[k] = DcpDegree(request.cost, len);
    if (cp[k] > max_pow2) {
      return InfeasiblePlan(name(), request, k,
                            "sequences[" + std::to_string(k) + "] needs CP " +
                                std::to_string(cp[k]) +
                                " (power of two) but the largest power of two <= N is " +
                                std::to_string(max_pow2));
    }
    work[k] = static_cast<double>(len) * static_cast<double>(len) / static_cast<double>(cp[k]);
  }
  std::vector<int> order(k_total);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return work[a] > work[b]; });

  struct Group {
    int first, size;
    double work = 0, tokens = 0;
    std::vector<int> members;
  };
  Plan plan;
  plan.num_ranks = n;
  std::vector<int> pending = order;
  while (!pending.empty()) {
    std::vector<Group> groups;
    std::vector<char> busy(n, 0);
    std::vector<int> deferred;
    auto free_block = [&](int c) -> int {
      for (int f = 0; f + c <= n; f += c) {
        bool ok = true;
        for (int r = f; r < f + c && ok; ++r) ok = !busy[r];
        if (ok) return f;
      }
      return -1;
    };
    for (int k : pending) {
      const double len = static_cast<double>(request.sequences[k].length_tokens);
      const int c = static_cast<int>(cp[k]);
      int pick = -1;
      const int f = free_block(c);
      if (f >= 0) {
        groups.push_back({f, c, 0, 0, {}});
        for (int r = f; r < f + c; ++r) busy[r] = 1;
        pick = static_cast<int>(groups.size()) - 1;
      } else {
        for (int pass = 0; pass < 2 && pick < 0; ++pass) {
          for (size_t g = 0; g < groups.size(); ++g) {
            const bool size_ok = pass == 0 ? groups[g].size == c : groups[g].size > c;
            if (!size_ok || !FitsOnLoad(request.cost, groups[g].tokens + len, groups[g].size))
              continue;
            if (pick < 0 || groups[g].work < groups[pick].work) pick = static_cast<int>(g);
          }
        }
      }
      if (pick < 0) {
        deferred.push_back(k);
        continue;
      }
      Group& g = groups[pick];
      g.members.push_back(k);
      g.tokens += len;
      g.work += len * len / g.size;
    }
    FCP_CHECK(deferred.size() < pending.size());  // the first always opens a block
    // Fill idle ranks by doubling the busiest group whose buddy block is idle.
    for (bool changed = true; changed;) {
      changed = false;
      std::vector<int> idx(groups.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(),
                       [&](int a, int b) { return groups[a].work > groups[b].work; });
      for (int gi : idx) {
        Group& g = groups[gi];
        const int base = g.first - g.first % (2 * g.size);
        if (base + 2 * g.size > n) continue;
        const int buddy = base == g.first ? g.first + g.size : base;
        bool idle = true;
        for (int r = buddy; r < buddy + g.size && idle; ++r) idle = !busy[r];
        if (!idle) continue;
        for (int r = buddy; r < buddy + g.size; ++r) busy[r] = 1;
        g.first = base;
        g.work /= 2;
        g.size *= 2;
        changed = true;
        break;
      }
    }
    MicroBatchPlan mb;
    for (Group& g : groups) {
      if (g.members.empty()) continue;
      mb.groups.push_back({RankRange(g.first, g.size), g.members, CommKind::kRing, 0, 0});
    }
    plan.micro_batches.push_back(std::move(mb));
    pending = std::move(deferred);
  }
  plan.notes["micro_batches"] = std::to_string(plan.micro_batches.size());
  return plan;
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
                                Link::kIntraNode);
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
