#include "testing/brute_force.h"

#include <algorithm>
#include <cmath>

#include "fcp/check.h"

namespace fcp::testing {

double ReferenceGroupTimeS(const CostModel& cm, const Cluster& cluster,
                           const std::vector<Sequence>& sequences,
                           const std::vector<int>& members, int first,
                           int degree) {
  double sum_s = 0, sum_attn = 0, sum_overhead = 0, sum_vision = 0;
  for (int k : members) {
    const double s = static_cast<double>(sequences[k].length_tokens);
    const double mask = 1.0 + sequences[k].eta;
    sum_s += s;
    sum_vision += static_cast<double>(sequences[k].vision_tokens);
    sum_attn += mask * s * s;
    sum_overhead += mask * cm.attn_overhead_tokens * s;  // v2: h·s per sequence
  }
  const double d = degree;
  const double a = cm.alpha1 * (sum_attn / d + sum_overhead);
  const double lin = cm.alpha2 * sum_s / d + cm.alpha2_vision * sum_vision / d;
  double tcp = a + lin + cm.beta1;
  double tcm = 0, home = 0;
  if (degree > 1) {
    const bool one_node = first / cluster.ranks_per_node ==
                          (first + degree - 1) / cluster.ranks_per_node;
    const double v = one_node ? cm.bw_intra_node : cm.bw_inter_node;
    const double step_latency = one_node ? cm.gamma_intra : cm.gamma_inter;
    tcp += (d - 1) * cm.gamma_serial;  // launches: not hidden
    tcm =
        cm.alpha3 * sum_s * (d - 1) / d / v + cm.beta2 + (d - 1) * step_latency;
    home = cm.alpha3_home * sum_s / d / v;  // after the last step: not hidden
  }
  // The last ring_tail_steps of the d attention steps have no transfer to hide.
  return tcp + tcm + home - std::min(a * (d - cm.ring_tail_steps) / d, tcm);
}

namespace {

struct Search {
  explicit Search(const PlanRequest& r) : req(r), n(r.cluster.num_ranks) {}
  const PlanRequest& req;
  int n = 0;
  std::vector<std::vector<int>> blocks;  // current partition
  std::vector<int> order;                // block placement order
  std::vector<int> dmin;                 // per block
  std::vector<int> first, degree;        // per block (placement)
  std::vector<double> time;              // per block
  BruteForceResult best;

  bool Fits(const std::vector<int>& members, int d) const {
    double sum_s = 0;
    for (int k : members)
      sum_s += static_cast<double>(req.sequences[k].length_tokens);
    return req.cost.mem_static + req.cost.mem_per_token * sum_s / d <=
           req.cost.mem_capacity;
  }

  void Place(size_t idx, uint32_t used, double makespan) {
    if (makespan >= best.makespan_s) return;
    if (idx == order.size()) {
      best.makespan_s = makespan;
      best.groups.clear();
      for (size_t b = 0; b < blocks.size(); ++b) {
        best.groups.push_back({blocks[b], first[b], degree[b], time[b]});
      }
      return;
    }
    const int b = order[idx];
    for (int p = 0; p < n; ++p) {
      if (used & (1u << p)) continue;
      uint32_t mask = 0;
      for (int d = 1; p + d <= n; ++d) {
        if (used & (1u << (p + d - 1))) break;
        mask |= 1u << (p + d - 1);
        if (d < dmin[b]) continue;
        const double t = ReferenceGroupTimeS(req.cost, req.cluster,
                                             req.sequences, blocks[b], p, d);
        if (t >= best.makespan_s) continue;
        first[b] = p;
        degree[b] = d;
        time[b] = t;
        Place(idx + 1, used | mask, std::max(makespan, t));
      }
    }
  }

  void Partition(int k) {
    const int num_seq = static_cast<int>(req.sequences.size());
    if (k == num_seq) {
      const size_t m = blocks.size();
      dmin.assign(m, 0);
      int total = 0;
      for (size_t b = 0; b < m; ++b) {
        int d = 1;
        while (d <= n && !Fits(blocks[b], d)) ++d;
        if (d > n) return;
        dmin[b] = d;
        total += d;
      }
      if (total > n) return;
      order.resize(m);
      for (size_t b = 0; b < m; ++b) order[b] = static_cast<int>(b);
      // Most constrained first: better pruning, same search space.
      std::sort(order.begin(), order.end(),
                [&](int x, int y) { return dmin[x] > dmin[y]; });
      first.assign(m, 0);
      degree.assign(m, 0);
      time.assign(m, 0);
      Place(0, 0, 0.0);
      return;
    }
    for (size_t b = 0; b < blocks.size(); ++b) {
      blocks[b].push_back(k);
      Partition(k + 1);
      blocks[b].pop_back();
    }
    if (static_cast<int>(blocks.size()) < n) {
      blocks.push_back({k});
      Partition(k + 1);
      blocks.pop_back();
    }
  }
};

}  // namespace

BruteForceResult BruteForceOptimum(const PlanRequest& request) {
  FCP_CHECK(!request.sequences.empty());
  FCP_CHECK(static_cast<int>(request.sequences.size()) <=
            kBruteForceMaxSequences);
  FCP_CHECK(request.cluster.num_ranks >= 1 &&
            request.cluster.num_ranks <= kBruteForceMaxRanks);
  FCP_CHECK(request.cluster.ranks_per_node >= 1);
  Search search(request);
  search.Partition(0);
  return search.best;
}

double BruteForceMakespanS(const PlanRequest& request) {
  return BruteForceOptimum(request).makespan_s;
}

}  // namespace fcp::testing
