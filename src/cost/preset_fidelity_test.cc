// The presets' derived cost model against the calibrated simulator (the
// independent oracle: a step-by-step ring with per-step overlap, per-chunk
// kernel efficiencies, launches and latencies). Planning decides on T(G, d)
// estimates, so a preset whose T(G, d) drifts from the hardware makes the
// planner choose wrongly (issue 11: long cross-node rings were estimated
// 20-25 % below the simulator).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/presets.h"
#include "fcp/simulator.h"

namespace fcp {
namespace {

struct Error {
  double mean = 0;  // of |estimate / simulated - 1|
  double max = 0;
  double signed_mean =
      0;  // of estimate / simulated - 1: > 0 when the estimate is high
};

// Relative error of T(G, d) on contiguous ranks [0, d) over single causal
// sequences and packed groups of 4, every chunk s/d >= 512 tokens.
Error PresetError(const ModelPreset& model, const ClusterPreset& cluster) {
  const CostModel cm = DeriveCostModel(model, cluster);
  const sim::HardwareModel hw = sim::MakeHardwareModel(model, cluster, 64);
  const Cluster planner_cluster{64, cluster.ranks_per_node};
  double sum = 0, worst = 0;
  int points = 0;
  for (int64_t len : {1024, 4096, 8192, 16384, 32768, 65536, 131072}) {
    for (int packed : {1, 4}) {
      std::vector<Sequence> seqs(packed, Sequence{len / packed, 0.0});
      GroupLoad load;
      for (const Sequence& s : seqs) load.Add(s);
      for (int d : {1, 2, 4, 8, 16, 32, 64}) {
        if (len / d < 512) continue;
        std::vector<int> ranks(d);
        for (int i = 0; i < d; ++i) ranks[i] = i;
        const double est = GroupTimeOnRanksS(cm, planner_cluster, load, ranks);
        const double real = sim::SimulateGroupTimeS(hw, seqs, ranks);
        const double err = std::abs(est / real - 1);
        sum += err;
        worst = std::max(worst, err);
        ++points;
      }
    }
  }
  return {sum / points, worst};
}

TEST(PresetFidelityTest, DerivedModelTracksTheSimulatorForEveryPreset) {
  for (const ClusterPreset& cluster : ClusterPresets()) {
    for (const ModelPreset& model : ModelPresets()) {
      const Error e = PresetError(model, cluster);
      // The table docs/planner/cost-model.md quotes (planner estimate vs
      // simulated).
      std::printf("# %-15s %-16s mean %.2f %% max %.2f %%\n",
                  model.shape.name.c_str(), cluster.name.c_str(), 100 * e.mean,
                  100 * e.max);
      SCOPED_TRACE(model.shape.name + " on " + cluster.name);
      // Measured: mean 0.8-1.6 %, max 2.8-7.6 %. With each ring step's launches
      // hidden behind attention and all of attention hiding the transfers (the
      // v2 formula before gamma_serial and ring_tail_steps): max up to 10.9 %.
      // Before the derivation mirrored the simulator: mean 14 %, max 45 % for
      // qwen3-8b on h100-8x8.
      EXPECT_LE(e.mean, 0.02);
      EXPECT_LE(e.max, 0.09);
    }
  }
}

// The all-to-all (Ulysses) estimate against the simulator's all-to-all, over
// degrees 2..64 on contiguous ranks starting on a node boundary and halfway
// into a node (partial nodes at both ends), single causal sequences and
// packed groups of 4.
Error AllToAllError(const ModelPreset& model, const ClusterPreset& cluster) {
  const CostModel cm = DeriveCostModel(model, cluster);
  const sim::HardwareModel hw = sim::MakeHardwareModel(model, cluster, 128);
  const Cluster planner_cluster{128, cluster.ranks_per_node};
  double sum = 0, signed_sum = 0, worst = 0;
  int points = 0;
  for (int64_t len : {4096, 16384, 65536, 131072}) {
    for (int packed : {1, 4}) {
      std::vector<Sequence> seqs(packed, Sequence{len / packed, 0.0});
      GroupLoad load;
      for (const Sequence& s : seqs) load.Add(s);
      for (int d : {2, 4, 8, 12, 16, 24, 32, 48, 64}) {
        if (len / d < 512) continue;  // as above: chunks of >= 512 tokens
        for (int first : {0, cluster.ranks_per_node / 2}) {
          std::vector<int> ranks(d);
          for (int i = 0; i < d; ++i) ranks[i] = first + i;
          const double est = AllToAllGroupTimeS(
              cm, model.shape, load, d,
              AllToAllBandwidthOnRanks(cm, planner_cluster, ranks));
          const double real =
              sim::SimulateGroupTimeS(hw, seqs, ranks, CommKind::kAllToAll);
          const double err = std::abs(est / real - 1);
          sum += err;
          signed_sum += est / real - 1;
          worst = std::max(worst, err);
          ++points;
        }
      }
    }
  }
  return {sum / points, worst, signed_sum / points};
}

// alpha2_vision against the simulator's vision encoder on one rank's vision
// tokens, trained and frozen: the derivation leaves out only the GEMMs'
// half-efficiency rows (a constant) and the encoder's kernel launches.
TEST(PresetFidelityTest, VisionEncoderTracksTheSimulator) {
  int checked = 0;
  for (const ClusterPreset& cluster : ClusterPresets()) {
    for (const ModelPreset& model : ModelPresets()) {
      for (bool frozen : {false, true}) {
        const CostModel cm = DeriveCostModel(model, cluster, frozen);
        if (!model.multimodal) {
          EXPECT_EQ(cm.alpha2_vision, 0) << model.shape.name;
          continue;
        }
        sim::HardwareModel hw = sim::MakeHardwareModel(model, cluster, 8);
        hw.vision_frozen = frozen;
        for (int64_t v : {4096, 65536}) {
          const std::vector<Sequence> clip = {{v, 0.0, v}};
          const double real =
              sim::SimulateGroup(hw, clip, std::vector<int>{0}, CommKind::kRing)
                  .vision_s;
          SCOPED_TRACE(model.shape.name + " on " + cluster.name +
                       (frozen ? ", frozen" : ""));
          EXPECT_NEAR(cm.alpha2_vision * static_cast<double>(v), real,
                      0.02 * real);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 8);
}

TEST(PresetFidelityTest, AllToAllEstimateTracksTheSimulator) {
  for (const ClusterPreset& cluster : ClusterPresets()) {
    for (const ModelPreset& model : ModelPresets()) {
      if (model.shape.name == "llama3-70b" || model.shape.name == "qwen3-32b")
        continue;
      const Error e = AllToAllError(model, cluster);
      std::printf(
          "# all-to-all %-15s %-16s mean %.2f %% max %.2f %% signed mean %+.2f "
          "%%\n",
          model.shape.name.c_str(), cluster.name.c_str(), 100 * e.mean,
          100 * e.max, 100 * e.signed_mean);
      SCOPED_TRACE(model.shape.name + " on " + cluster.name);
      // Measured: mean 0.8-4.2 %, max 6.4-19.9 % (the largest: 1-3B models'
      // short per-rank chunks across nodes, where per-layer all-to-all
      // latencies the formula has no term for dominate). With the inter-node
      // link alone for any cross-node group and without K/V replication:
      // mean 3.5 %, max 27.4 % over the same points.
      EXPECT_LE(e.mean, 0.05);
      EXPECT_LE(e.max, 0.25);
    }
  }
}

// The go-src case of docs/planner/vs-static.md: one 103,004-token sequence (the
// longest of that batch) alone, qwen3-8b on h100-8x8, on contiguous ranks from
// rank 0 at the degrees the planners choose for it. Beyond one node a ring
// moves every K/V block d - 1 hops, so each rank sends the whole sequence's K/V
// whatever d is and the ring is bandwidth-bound; a Ulysses all-to-all sends 1/d
// of it. The planner must see both: its ring estimate tracks the simulated ring
// (within 4 %: +1.4 % at d = 16, +2.8 % at 32, +3.4 % at 56, where the
// transfer-bound ring's A/d and launches add to a slightly high alpha3), and
// the all-to-all is the faster simulated kind once the ring's transfer no
// longer hides behind attention.
TEST(PresetFidelityTest, LongSequenceAcrossNodesRingAgainstAllToAll) {
  const ModelPreset* model = FindModelPreset("qwen3-8b");
  const ClusterPreset* cluster = FindClusterPreset("h100-8x8");
  ASSERT_NE(model, nullptr);
  ASSERT_NE(cluster, nullptr);
  const CostModel cm = DeriveCostModel(*model, *cluster);
  const sim::HardwareModel hw =
      sim::MakeHardwareModel(*model, *cluster, cluster->num_ranks);
  const Cluster planner_cluster{cluster->num_ranks, cluster->ranks_per_node};
  const std::vector<Sequence> seqs{Sequence{103004, 0.0}};
  GroupLoad load;
  load.Add(seqs[0]);
  std::printf(
      "# degree  ring estimate  ring simulated (transfer / exposed)  "
      "all-to-all estimate  all-to-all simulated\n");
  for (int d : {8, 16, 32, 56}) {
    std::vector<int> ranks(d);
    for (int i = 0; i < d; ++i) ranks[i] = i;
    const double ring_est = GroupTimeOnRanksS(cm, planner_cluster, load, ranks);
    const sim::GroupSimResult ring =
        sim::SimulateGroup(hw, seqs, ranks, CommKind::kRing);
    const double a2a_est = AllToAllGroupTimeS(
        cm, model->shape, load, d,
        AllToAllBandwidthOnRanks(cm, planner_cluster, ranks));
    const sim::GroupSimResult a2a =
        sim::SimulateGroup(hw, seqs, ranks, CommKind::kAllToAll);
    std::printf(
        "# %6d  %11.3f s  %10.3f s (%.2f / %.2f s)  %17.3f s  %18.3f s\n", d,
        ring_est, ring.time_s, ring.comm_s, ring.exposed_comm_s, a2a_est,
        a2a.time_s);
    SCOPED_TRACE("d = " + std::to_string(d));
    EXPECT_FALSE(ring.oom);
    EXPECT_NEAR(ring_est / ring.time_s, 1.0, 0.04);
    // At d = 16 (two nodes) the ring's transfer still hides behind attention;
    // from d = 32 on it is exposed and the all-to-all wins.
    if (d >= 32) {
      EXPECT_LT(a2a.time_s, ring.time_s);
    }
  }
}

}  // namespace
}  // namespace fcp
