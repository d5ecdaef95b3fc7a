// Cost model vs hand computation of the docs/design.md §2 formulas.
#include "fcp/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "fcp/presets.h"

namespace fcp {
namespace {

CostModel HandModel() {
  CostModel cm;
  cm.alpha1 = 2e-9;
  cm.alpha2 = 3e-6;
  cm.beta1 = 0.01;
  cm.alpha3 = 1000;
  cm.beta2 = 0.002;
  cm.bw_intra_node = 100e9;
  cm.bw_inter_node = 10e9;
  cm.mem_per_token = 1e5;
  cm.mem_static = 20e9;
  cm.mem_capacity = 60e9;
  return cm;
}

void ExpectRel(double got, double want) {
  EXPECT_NEAR(got, want, 1e-9 * std::abs(want))
      << "got " << got << " want " << want;
}

TEST(CostModelTest, SingleRankHasNoCommunication) {
  const CostModel cm = HandModel();
  GroupLoad g;
  g.Add({1000, 0.0});
  g.Add({3000, 1.0});
  // A = 2e-9 * (1e6 + 2 * 9e6) = 0.038; Lin = 3e-6 * 4000 = 0.012; + beta1.
  ExpectRel(GroupTimeS(cm, g, 1, Link::kIntraNode), 0.038 + 0.012 + 0.01);
}

TEST(CostModelTest, CommunicationHiddenBehindAttention) {
  const CostModel cm = HandModel();
  const GroupLoad g = GroupLoad::Of({100000, 0.0});
  // d = 4: A = 2e-9 * 1e10 / 4 = 5; Lin = 0.3 / 4 = 0.075; Tcp = 5.085.
  // Tcm = 1000 * 1e5 * 3/4 / 100e9 + 0.002 = 0.00075 + 0.002 = 0.00275 < A.
  ExpectRel(GroupTimeS(cm, g, 4, Link::kIntraNode), 5.085);
  // v2: the three ring steps' launches are not hidden; their latency is.
  CostModel v2 = cm;
  v2.gamma_intra = 1e-4;
  v2.gamma_serial = 2e-4;
  v2.ring_tail_steps = 1;  // A * 3/4 = 3.75 still hides Tcm
  ExpectRel(GroupTimeS(v2, g, 4, Link::kIntraNode), 5.085 + 3 * 2e-4);
}

TEST(CostModelTest, CommunicationBoundGroupPaysTheExcess) {
  CostModel cm = HandModel();
  cm.alpha3 = 1e6;
  const GroupLoad g = GroupLoad::Of({2000, 0.0});
  // d = 2, inter 10e9: A = 2e-9 * 4e6 / 2 = 0.004; Lin = 3e-6 * 1000 = 0.003.
  // Tcm = 1e6 * 2000 * 0.5 / 10e9 + 0.002 = 0.1 + 0.002 = 0.102.
  // T = Tcp + Tcm - min(A, Tcm) = 0.017 + 0.102 - 0.004 = 0.115.
  ExpectRel(GroupTimeS(cm, g, 2, Link::kInterNode), 0.115);
}

TEST(CostModelTest, BandwidthFollowsActualRanks) {
  CostModel cm = HandModel();
  cm.alpha3 = 1e6;
  const Cluster cluster{8, 4};
  const GroupLoad g = GroupLoad::Of({2000, 0.0});
  const std::vector<int> intra = {0, 1};
  const std::vector<int> inter = {3, 4};
  ExpectRel(GroupTimeOnRanksS(cm, cluster, g, intra),
            GroupTimeS(cm, g, 2, Link::kIntraNode));
  ExpectRel(GroupTimeOnRanksS(cm, cluster, g, inter),
            GroupTimeS(cm, g, 2, Link::kInterNode));
  EXPECT_TRUE(RangeOnOneNode(cluster, 4, 4));
  EXPECT_FALSE(RangeOnOneNode(cluster, 3, 2));
  // Best case: intra only when the degree fits in a node.
  ExpectRel(GroupTimeBestS(cm, cluster, g, 4),
            GroupTimeS(cm, g, 4, Link::kIntraNode));
  ExpectRel(GroupTimeBestS(cm, cluster, g, 5),
            GroupTimeS(cm, g, 5, Link::kInterNode));
}

TEST(CostModelTest, MemoryAndMinDegree) {
  const CostModel cm = HandModel();
  const GroupLoad g = GroupLoad::Of({1'000'000, 0.0});
  // 1e5 * 1e6 = 1e11 bytes of activations over 40e9 headroom: d_min = ceil(2.5)
  // = 3.
  EXPECT_EQ(MinDegree(cm, g), 3);
  ExpectRel(GroupMemBytes(cm, g, 3), 20e9 + 1e11 / 3);
  EXPECT_LE(GroupMemBytes(cm, g, 3), cm.mem_capacity);
  EXPECT_GT(GroupMemBytes(cm, g, 2), cm.mem_capacity);
  // Exactly at capacity: 400k tokens * 1e5 = 40e9 = headroom -> d_min 1.
  EXPECT_EQ(MinDegree(cm, GroupLoad::Of({400'000, 0.0})), 1);
  EXPECT_EQ(MinDegree(cm, GroupLoad::Of({400'001, 0.0})), 2);
}

TEST(CostModelTest, V2TermsMatchHandComputation) {
  CostModel cm = HandModel();
  cm.alpha3 = 1e6;
  cm.attn_overhead_tokens = 500;
  cm.gamma_intra = 1e-4;
  cm.gamma_inter = 3e-4;
  cm.gamma_serial = 2e-4;
  cm.ring_tail_steps = 1;
  GroupLoad g;
  g.Add({2000, 0.0});
  g.Add({1000, 1.0});
  // A = 2e-9 * ((4e6 + 2e6) / 4 + 500 * (2000 + 2 * 1000)) = 2e-9 * 3.5e6 =
  // 0.007. Lin = 3e-6 * 3000 / 4 = 0.00225; Tcp = 0.007 + 0.00225 + 0.01 + 3 *
  // 2e-4 = 0.01985. Tcm intra = 1e6 * 3000 * 3/4 / 100e9 + 0.002 + 3 * 1e-4 =
  // 0.0225 + 0.0023 = 0.0248. Hideable attention: A * (4 - 1) / 4 = 0.00525 <
  // Tcm. T = Tcp + Tcm - min(0.00525, Tcm) = 0.01985 + 0.0248 - 0.00525 =
  // 0.0394.
  ExpectRel(GroupTimeS(cm, g, 4, Link::kIntraNode), 0.0394);
  // Inter: Tcm = 1e6 * 3000 * 3/4 / 10e9 + 0.002 + 3 * 3e-4 = 0.225 + 0.0029 =
  // 0.2279.
  ExpectRel(GroupTimeS(cm, g, 4, Link::kInterNode), 0.01985 + 0.2279 - 0.00525);
  // Half a tail step: A * 3.5 / 4 = 0.006125 hides.
  cm.ring_tail_steps = 0.5;
  ExpectRel(GroupTimeS(cm, g, 4, Link::kIntraNode),
            0.01985 + 0.0248 - 0.006125);
  cm.ring_tail_steps = 1;
  // The last hop, after the last attention step, is never hidden: 2e5 · 3000 /
  // 4 / 100e9 = 0.0015 more, even where A would hide all of Tcm.
  CostModel home = cm;
  home.alpha3_home = 2e5;
  ExpectRel(GroupTimeS(home, g, 4, Link::kIntraNode),
            0.01985 + 0.0248 - 0.00525 + 0.0015);
  home.alpha3 = 0;
  home.beta2 = home.gamma_intra = 0;  // Tcm = 0: only the last hop is left
  ExpectRel(GroupTimeS(home, g, 4, Link::kIntraNode), 0.01985 + 0.0015);
  EXPECT_EQ(GroupTimeS(home, g, 1, Link::kIntraNode),
            GroupTimeS(cm, g, 1, Link::kIntraNode));
  // d = 1: no communication, and the overhead does not shrink.
  ExpectRel(GroupTimeS(cm, g, 1, Link::kInterNode),
            2e-9 * (6e6 + 500 * 4000) + 3e-6 * 3000 + 0.01);
  // Zeroed v2 terms are the paper's model.
  const CostModel paper = PaperTerms(cm);
  CostModel plain = HandModel();
  plain.alpha3 = 1e6;
  ExpectRel(GroupTimeS(paper, g, 4, Link::kInterNode),
            GroupTimeS(plain, g, 4, Link::kInterNode));
}

TEST(CostModelTest, VisionTokensPayTheEncoderOnTopOfLinearWork) {
  CostModel cm = HandModel();
  cm.alpha2_vision = 1e-6;
  GroupLoad g;
  g.Add({2000, 0.0, 1500});  // a clip: 1,500 vision tokens, 500 text
  g.Add({1000, 0.0});        // text
  EXPECT_EQ(g.sum_vision, 1500);
  // Lin = 3e-6 · 3000 / 2 + 1e-6 · 1500 / 2 = 0.0045 + 0.00075.
  CostModel text_only = cm;
  text_only.alpha2_vision = 0;
  EXPECT_NEAR(GroupTimePartsS(cm, g, 2, Link::kIntraNode).compute_s -
                  GroupTimePartsS(text_only, g, 2, Link::kIntraNode).compute_s,
              0.00075, 1e-15);
  EXPECT_NEAR(WorkS(cm, g, 2) - WorkS(text_only, g, 2), 0.00075, 1e-15);
  ModelShape shape;
  shape.q_heads = 32;
  shape.kv_heads = 8;
  EXPECT_NEAR(
      AllToAllGroupTimePartsS(cm, shape, g, 2, 1e11).compute_s -
          AllToAllGroupTimePartsS(text_only, shape, g, 2, 1e11).compute_s,
      0.00075, 1e-15);
  g.Remove({2000, 0.0, 1500});
  EXPECT_EQ(g.sum_vision, 0);
  // The paper's model has no vision term.
  EXPECT_EQ(PaperTerms(cm).alpha2_vision, 0);
}

TEST(CostModelTest, MinDegreeIsBoundedWhenHeadroomIsAFewUlps) {
  // Issue 18: mem_static a few ulps below mem_capacity made the rounding
  // correction step one degree at a time (14 s for 10 tokens, hours for 10k).
  CostModel cm = HandModel();
  cm.mem_capacity = 64e9;
  cm.mem_static = 63999999999.99994;
  for (int64_t len : {int64_t{10}, int64_t{10000}, int64_t{1} << 30}) {
    const GroupLoad g = GroupLoad::Of({len, 0.0});
    const int64_t d = MinDegree(cm, g);
    // The definition, checked independently: d fits, d - 1 does not.
    const double tokens = static_cast<double>(len);
    EXPECT_LE(
        cm.mem_static + cm.mem_per_token * tokens / static_cast<double>(d),
        cm.mem_capacity)
        << len;
    if (d > 1) {
      EXPECT_GT(cm.mem_static +
                    cm.mem_per_token * tokens / static_cast<double>(d - 1),
                cm.mem_capacity)
          << len;
    }
  }
  // Ordinary inputs: the closed form.
  const CostModel hand = HandModel();
  for (int64_t len = 1; len < 2'000'000; len = len * 3 + 7) {
    const int64_t want = std::max<int64_t>(
        1,
        static_cast<int64_t>(std::ceil(1e5 * static_cast<double>(len) / 40e9)));
    const int64_t got = MinDegree(hand, GroupLoad::Of({len, 0.0}));
    EXPECT_LE(std::llabs(got - want), 1)
        << len;  // rounding of the division only
  }
}

TEST(CostModelTest, ValidationNamesTheField) {
  CostModel cm = HandModel();
  EXPECT_FALSE(ValidateCostModel(cm).has_value());
  cm.alpha2 = -1;
  EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.alpha2:", 0), 0u);
  cm = HandModel();
  cm.bw_inter_node = 0;
  EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.bw_inter_node:", 0), 0u);
  cm = HandModel();
  cm.mem_static = cm.mem_capacity;
  EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.mem_capacity:", 0), 0u);
  cm = HandModel();
  cm.beta1 = std::nan("");
  EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.beta1:", 0), 0u);
  for (double CostModel::*field :
       {&CostModel::attn_overhead_tokens, &CostModel::gamma_intra,
        &CostModel::gamma_inter, &CostModel::gamma_serial,
        &CostModel::ring_tail_steps}) {
    cm = HandModel();
    cm.*field = -1;
    ASSERT_TRUE(ValidateCostModel(cm).has_value());
  }
  cm = HandModel();
  cm.gamma_inter = -1;
  EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.gamma_inter:", 0), 0u);
  cm = HandModel();
  cm.ring_tail_steps =
      1.01;  // a ring has one transfer fewer than steps, not two
  EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.ring_tail_steps:", 0), 0u);
  cm.ring_tail_steps = 1;
  EXPECT_FALSE(ValidateCostModel(cm).has_value());
}

TEST(PresetsTest, EveryPresetDerivesAValidModel) {
  EXPECT_EQ(ModelPresets().size(), 15u);
  for (const auto& cluster : ClusterPresets()) {
    for (const auto& model : ModelPresets()) {
      const CostModel cm = DeriveCostModel(model, cluster);
      // Replicated bf16 weights + gradients (4 B/param) of a 32B or 70B model
      // exceed one device: without tensor/pipeline parallelism or FSDP (out of
      // scope) they are rejected, naming the memory field.
      if (4.0 * static_cast<double>(model.params()) > cluster.mem_bytes) {
        ASSERT_TRUE(ValidateCostModel(cm).has_value()) << model.shape.name;
        EXPECT_EQ(ValidateCostModel(cm)->rfind("cost_model.mem_capacity:", 0),
                  0u);
        continue;
      }
      EXPECT_FALSE(ValidateCostModel(cm).has_value())
          << model.shape.name << " on " << cluster.name;
      // A 32k sequence must fit on at most a handful of ranks for every preset.
      EXPECT_LE(MinDegree(cm, GroupLoad::Of({32768, 0.0})), 4)
          << model.shape.name;
    }
  }
}

TEST(PresetsTest, DerivationMatchesHandComputationForQwen3_8b) {
  const ModelPreset* m = FindModelPreset("qwen3-8b");
  const ClusterPreset* c = FindClusterPreset("ascend910c-4x16");
  ASSERT_TRUE(m && c);
  const CostModel cm = DeriveCostModel(*m, *c);
  // Mirrors the simulator's hardware terms (presets.cc), hand-computed for
  // L = 36, dq = 4096, dkv = 1024 on Ascend (376 TFLOPS, FlashAttention-3-class
  // curves fwd 0.676 / 209 tokens, bwd 0.598 / 427 tokens; launch 8 µs;
  // latency 8 µs in a node, 20 µs across).
  // Attention weights: forward passes 2 / 0.676 = 2.95858, backward
  // 2.5 / 0.598 = 4.18060, together 7.13918.
  ExpectRel(cm.alpha1, 2.0 * 36 * 4096 * (2.0 / 0.676 + 2.5 / 0.598) / 376e12);
  // h = (2.95858·209 + 4.18060·427) / 7.13918 = 336.65 tokens (short chunks)
  //   + 0.6 · 0.594 · (4096/512)^-0.794 · 4096 = 0.6 · 466.7 tokens (causal
  //   diagonal, weighted).
  EXPECT_NEAR(cm.attn_overhead_tokens, 336.65 + 0.6 * 466.7, 0.5);
  // Per ring step and layer: 3 latencies (one per pass) + 7 kernel launches.
  ExpectRel(cm.gamma_intra, 36 * 3 * 8e-6);
  ExpectRel(cm.gamma_inter, 36 * 3 * 20e-6);
  ExpectRel(cm.gamma_serial, 36 * 7 * 8e-6);
  EXPECT_EQ(cm.ring_tail_steps, 1);
  // Home hop: one inter-node latency and 8 launches per layer.
  ExpectRel(cm.beta2, 36 * (20e-6 + 8 * 8e-6));
  // KV bytes: 5 chunk units per hop (fwd 1 + recompute 1 + bwd 3) plus the
  // home hop's 2 spread over 8 hops = 5.25 · L · 2 · (8 · 128) · 2 bytes.
  ExpectRel(cm.alpha3, 5.25 * 36 * 2 * 1024 * 2);
  EXPECT_EQ(cm.bw_intra_node, 196e9);
  EXPECT_EQ(cm.bw_inter_node, 50e9);
  EXPECT_EQ(cm.mem_capacity, 64e9);
  EXPECT_NEAR(static_cast<double>(m->params()), 8.2e9,
              0.3e9);  // Qwen3-8B: 8.2B
}

// Issue 30: the O(1) bound equals the scan over every on-node count it
// replaced (the slowest-rank bound of docs/design.md §2), on random clusters.
TEST(CostModelTest, AllToAllBandwidthBoundMatchesTheScan) {
  std::srand(30);
  auto uniform = [](double lo, double hi) {
    return lo + (hi - lo) * std::rand() / RAND_MAX;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    CostModel cm = HandModel();
    cm.bw_intra_node = std::pow(10.0, uniform(8, 12));
    cm.bw_inter_node = std::pow(10.0, uniform(8, 12));
    const Cluster cluster{4096, 1 + std::rand() % 300};
    const int degree = 2 + std::rand() % 600;
    double fastest = std::numeric_limits<double>::infinity();
    const int64_t most = std::min<int64_t>(degree, cluster.ranks_per_node);
    for (int64_t c = 1; c <= most; ++c) {
      fastest = std::min(fastest, std::max((c - 1.0) / cm.bw_intra_node,
                                           (degree - static_cast<double>(c)) /
                                               cm.bw_inter_node));
    }
    EXPECT_DOUBLE_EQ(AllToAllBandwidthBound(cm, cluster, degree),
                     (degree - 1) / fastest)
        << "degree " << degree << " R " << cluster.ranks_per_node;
  }
}

}  // namespace
}  // namespace fcp
