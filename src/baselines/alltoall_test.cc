#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp {
namespace {

CostModel Model() {
  CostModel cm;
  cm.alpha1 = 2e-9;
  cm.alpha2 = 3e-6;
  cm.beta1 = 1e-3;
  cm.alpha3 = 4e5;
  cm.beta2 = 5e-4;
  cm.bw_intra_node = 1e11;
  cm.bw_inter_node = 2e10;
  cm.mem_per_token = 1e5;
  cm.mem_static = 1e9;
  cm.mem_capacity = 5e9;
  return cm;
}

TEST(AllToAll, DegreeOneEqualsRingModel) {
  const CostModel cm = Model();
  GroupLoad load = GroupLoad::Of({30000, 0.5});
  ModelShape shape;
  shape.q_heads = 32;
  shape.kv_heads = 8;
  EXPECT_DOUBLE_EQ(AllToAllGroupTimeS(cm, shape, load, 1, cm.bw_intra_node),
                   GroupTimeS(cm, load, 1, Link::kIntraNode));
}

TEST(AllToAll, MatchesDerivedFormula) {
  const CostModel cm = Model();
  GroupLoad load;
  load.Add({30000, 0.0});
  load.Add({10000, 1.0});
  ModelShape shape;
  shape.q_heads = 24;
  shape.kv_heads = 8;
  const double d = 4, s = 40000;
  const double attn = cm.alpha1 * (30000.0 * 30000 + 2 * 10000.0 * 10000) / d;
  const double rho = 0.75 * (24.0 + 8) / 8;
  const double expect =
      attn + cm.alpha2 * s / d + cm.beta1 +
      rho * cm.alpha3 * (s / d) * (d - 1) / d / cm.bw_inter_node + cm.beta2;
  EXPECT_NEAR(AllToAllGroupTimeS(cm, shape, load, 4, cm.bw_inter_node), expect,
              1e-12 * expect);
}

// Communication only: Ulysses moves a factor d / rho less than the ring.
TEST(AllToAll, VolumeScalesAsOneOverDegreeRelativeToRing) {
  CostModel cm = Model();
  cm.alpha1 = cm.alpha2 = cm.beta1 = cm.beta2 = 0;
  const GroupLoad load = GroupLoad::Of({64000, 0.0});
  ModelShape shape;  // heads unknown: documented fallback rho = 3.75
  for (int d : {2, 4, 8, 16}) {
    const double ring = GroupTimeS(cm, load, d, Link::kIntraNode);
    const double a2a = AllToAllGroupTimeS(cm, shape, load, d, cm.bw_intra_node);
    EXPECT_NEAR(a2a / ring, 3.75 / d, 1e-12);
  }
}

// Bandwidth against a direct count: every placement of d ranks on a 3-node,
// 4-rank-per-node cluster (subsets of 12 ranks), the bottleneck rank taken
// explicitly as the one whose sends finish last.
TEST(AllToAll, BandwidthMatchesSlowestRankOverAllPlacements) {
  const CostModel cm = Model();
  Cluster cluster;
  cluster.num_ranks = 12;
  cluster.ranks_per_node = 4;
  for (int mask = 1; mask < (1 << 12); ++mask) {
    std::vector<int> ranks;
    for (int r = 0; r < 12; ++r) {
      if (mask >> r & 1) ranks.push_back(r);
    }
    const int d = static_cast<int>(ranks.size());
    if (d < 2) continue;
    const double bytes = 1e9;  // per rank, spread evenly over its d - 1 peers
    double slowest = 0;
    for (int me : ranks) {
      double t_in = 0, t_out = 0;
      for (int peer : ranks) {
        if (peer == me) continue;
        (peer / 4 == me / 4 ? t_in : t_out) +=
            bytes / (d - 1) /
            (peer / 4 == me / 4 ? cm.bw_intra_node : cm.bw_inter_node);
      }
      slowest = std::max(slowest, std::max(t_in, t_out));
    }
    EXPECT_NEAR(AllToAllBandwidthOnRanks(cm, cluster, ranks), bytes / slowest,
                1e-9 * bytes / slowest)
        << "mask " << mask;
    EXPECT_LE(AllToAllBandwidthOnRanks(cm, cluster, ranks),
              AllToAllBandwidthBound(cm, cluster, d) * (1 + 1e-12))
        << "mask " << mask;
    const bool contiguous = ranks.back() - ranks.front() + 1 == d;
    if (contiguous) {
      EXPECT_DOUBLE_EQ(AllToAllBandwidthOnRange(cm, cluster, ranks.front(), d),
                       AllToAllBandwidthOnRanks(cm, cluster, ranks))
          << "mask " << mask;
    }
  }
  // Two full nodes: 7 of 15 peers on-node, 8 off-node: 15/8 of the inter link.
  Cluster h100;
  h100.num_ranks = 16;
  h100.ranks_per_node = 8;
  EXPECT_NEAR(AllToAllBandwidthOnRange(cm, h100, 0, 16),
              cm.bw_inter_node * 15 / 8, 1e-6 * cm.bw_inter_node);
}

}  // namespace
}  // namespace fcp
