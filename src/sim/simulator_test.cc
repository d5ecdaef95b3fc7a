#include "fcp/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "fcp/cost_model.h"
#include "fcp/presets.h"

namespace fcp::sim {
namespace {

HardwareModel Hw(const char* model = "qwen3-8b", int ranks = 64) {
  const ModelPreset* m = FindModelPreset(model);
  const ClusterPreset* c = FindClusterPreset("ascend910c-4x16");
  EXPECT_NE(m, nullptr);
  EXPECT_NE(c, nullptr);
  return MakeHardwareModel(*m, *c, ranks);
}

std::vector<int> Range(int first, int d) {
  std::vector<int> r(static_cast<size_t>(d));
  std::iota(r.begin(), r.end(), first);
  return r;
}

GroupPlan Group(std::vector<int> ranks, std::vector<int> seqs,
                CommKind comm = CommKind::kRing) {
  GroupPlan g;
  g.ranks = std::move(ranks);
  g.sequences = std::move(seqs);
  g.comm = comm;
  return g;
}

TEST(Flops, LayerParamsByHand) {
  // qwen3-8b: h 4096, dq 32·128 = 4096, dkv 8·128 = 1024, f 12288.
  const HardwareModel hw = Hw();
  const double want =
      4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3.0 * 4096 * 12288;
  EXPECT_DOUBLE_EQ(LayerParams(hw.shape), want);
  EXPECT_DOUBLE_EQ(want, 192937984.0);
  EXPECT_DOUBLE_EQ(BackboneParams(hw.shape), 36 * want + 2.0 * 4096 * 151936);
  EXPECT_DOUBLE_EQ(LayerGemmFlopsForward(hw.shape, 1000), 2.0 * 1000 * want);
}

TEST(Flops, AttentionByHand) {
  ModelShape s;
  s.q_heads = 2;
  s.head_dim = 3;  // dq = 6
  // Causal, 10 tokens: 55 visible pairs incl. diagonal; the model uses s²/2 =
  // 50 pairs, 4·dq = 24 FLOPs each (QKᵀ 2·dq + PV 2·dq).
  EXPECT_DOUBLE_EQ(LayerAttentionFlopsForward(s, 10, 0.0), 24.0 * 50);
  // Full attention: 100 pairs.
  EXPECT_DOUBLE_EQ(LayerAttentionFlopsForward(s, 10, 1.0), 24.0 * 100);
  EXPECT_DOUBLE_EQ(LayerAttentionFlopsForward(s, 10, 0.5), 24.0 * 75);
}

TEST(Flops, VisionParamsByHand) {
  const HardwareModel hw = Hw("qwen3-vl-8b");
  EXPECT_DOUBLE_EQ(VisionParams(hw.shape), 12.0 * 27 * 1152 * 1152);
}

TEST(Efficiency, CurvesMatchPublishedFlashAttention3Points) {
  // Oracle: FlashAttention-3's published BF16 head-dim-128 H100 figures
  // (arXiv 2407.08608 Fig. 5/6, TFLOPS/s over the 989 TFLOPS peak); the
  // preset's fit is within 5 % of each.
  const ModelPreset* m = FindModelPreset("llama3-8b");
  const HardwareModel hw =
      MakeHardwareModel(*m, *FindClusterPreset("h100-8x8"));
  auto near = [](double got, double tflops) {
    EXPECT_NEAR(got / (tflops / 989.0), 1.0, 0.05);
  };
  near(AttentionForwardEfficiency(hw, 512, 0.0), 292);
  near(AttentionForwardEfficiency(hw, 16384, 0.0), 616);
  near(AttentionForwardEfficiency(hw, 512, 1.0), 467);
  near(AttentionForwardEfficiency(hw, 16384, 1.0), 648);
  near(AttentionBackwardEfficiency(hw, 512, 1.0), 316);
  near(AttentionBackwardEfficiency(hw, 16384, 1.0), 561);
  // Unmasked / causal throughput: 1.6 at 512 tokens, 1.34 at 1k, 1.05 at 16k.
  EXPECT_NEAR(CausalSlowdown(hw, 512), 467.0 / 292, 0.03);
  EXPECT_NEAR(CausalSlowdown(hw, 1024), 565.0 / 423, 0.03);
  EXPECT_NEAR(CausalSlowdown(hw, 16384), 648.0 / 616, 0.03);
  EXPECT_LE(CausalSlowdown(hw, 1), 2.0);
  // Backward slower than forward at every length (published 0.68-0.87x).
  for (double n : {512.0, 2048.0, 16384.0})
    EXPECT_LT(AttentionBackwardEfficiency(hw, n, 0.0),
              AttentionForwardEfficiency(hw, n, 0.0));
  // Half-way mask factor: half the causal slow-down.
  const double s = CausalSlowdown(hw, 2048);
  EXPECT_NEAR(AttentionForwardEfficiency(hw, 2048, 0.5),
              AttentionForwardEfficiency(hw, 2048, 1.0) / (1 + (s - 1) / 2),
              1e-12);
  EXPECT_NEAR(GemmEfficiency(hw, 256), hw.gemm_eff_max / 2, 1e-12);
  EXPECT_LT(GemmEfficiency(hw, 100), GemmEfficiency(hw, 1000));
}

TEST(Recompute, ParseAndName) {
  for (Recompute r :
       {Recompute::kFull, Recompute::kSelective, Recompute::kNone})
    EXPECT_EQ(ParseRecompute(RecomputeName(r)), r);
  EXPECT_THROW(ParseRecompute("some"), InputError);
}

// Attention time of one sequence on one rank, by hand: `fwd_passes` forwards
// and one backward (2.5x the FLOPs), each at its own curve.
double AttentionByHand(const HardwareModel& hw, double len, double fwd_passes) {
  const double f =
      hw.shape.layers * LayerAttentionFlopsForward(hw.shape, len, 0);
  return fwd_passes * f /
             (hw.peak_flops * AttentionForwardEfficiency(hw, len, 0)) +
         2.5 * f / (hw.peak_flops * AttentionBackwardEfficiency(hw, len, 0));
}

TEST(SimulateGroup, SingleRankGemmTimeIsHandFormula) {
  const HardwareModel hw = Hw();
  const std::vector<Sequence> seqs = {{3000, 0.0}, {1000, 0.0}};
  const auto r = SimulateGroup(hw, seqs, Range(0, 1), CommKind::kRing);
  const double m = 4000;
  const double flops =
      36 * 4 * 2 * m * LayerParams(hw.shape) + 3 * 2 * m * 4096.0 * 151936;
  EXPECT_NEAR(r.gemm_s, flops / (hw.peak_flops * GemmEfficiency(hw, m)), 1e-12);
  double attn = 0;
  for (const auto& s : seqs) attn += AttentionByHand(hw, s.length_tokens, 2);
  EXPECT_NEAR(r.attention_s, attn, 1e-12);
  EXPECT_EQ(r.comm_s, 0.0);
  EXPECT_EQ(r.comm_bytes_per_rank, 0.0);
  EXPECT_NEAR(r.time_s, r.gemm_s + r.attention_s + r.elementwise_s + r.launch_s,
              1e-12);
  EXPECT_NEAR(r.forward_s + r.backward_s, r.time_s, 1e-12);
  EXPECT_GT(r.backward_s, r.forward_s);
}

TEST(SimulateGroup, RecomputePoliciesByHand) {
  HardwareModel hw = Hw();
  const std::vector<Sequence> seqs = {{4096, 0.0}};
  const double m = 4096, L = 36;
  const double h = 4096, dq = 4096, dkv = 1024, f = 12288;
  const double gemm_fwd = L * 2 * m * LayerParams(hw.shape) /
                          (hw.peak_flops * GemmEfficiency(hw, m));
  const double head =
      3 * 2 * m * h * 151936 / (hw.peak_flops * GemmEfficiency(hw, m));
  const double working_set =
      2.0 * (4 * h + 2 * dq + 2 * dkv + 4 * f);  // bytes / token / layer
  struct Case {
    Recompute policy;
    double linear_passes, attn_fwd_passes, act_bytes_per_token;
  };
  const Case cases[] = {{Recompute::kFull, 4, 2, 2 * L * h + working_set},
                        {Recompute::kSelective, 3, 2, L * working_set},
                        {Recompute::kNone, 3, 1, L * working_set}};
  double prev_time = 1e30;
  for (const Case& c : cases) {
    hw.recompute = c.policy;
    const auto r = SimulateGroup(hw, seqs, Range(0, 1), CommKind::kRing);
    EXPECT_NEAR(r.gemm_s, c.linear_passes * gemm_fwd + head, 1e-9 * r.gemm_s);
    EXPECT_NEAR(r.attention_s, AttentionByHand(hw, m, c.attn_fwd_passes),
                1e-12);
    const CostModel cm = CalibrateMemory(hw, CostModel{});
    // Per token: activations + the larger of the ring / all-to-all buffers,
    // +0.5 %.
    EXPECT_NEAR(cm.mem_per_token,
                (c.act_bytes_per_token + (dq + 2 * dkv) * 2) * 1.005, 1e-6);
    EXPECT_LT(r.time_s, prev_time);  // less recompute, less time
    prev_time = r.time_s;
  }
  // TorchTitan-style op-level checkpointing: a fraction of the linear forward.
  hw.recompute = Recompute::kNone;
  hw.linear_recompute_fraction = 3.0 / 7.0;
  EXPECT_NEAR(SimulateGroup(hw, seqs, Range(0, 1), CommKind::kRing).gemm_s,
              (3 + 3.0 / 7.0) * gemm_fwd + head, 1e-9);
}

TEST(SimulateGroup, ZigzagPadding) {
  const HardwareModel hw = Hw();
  const std::vector<Sequence> seqs = {{1001, 0.0}};
  // 2d = 8 chunks of ceil(1001/8) = 126 tokens: 252 per rank.
  EXPECT_EQ(SimulateGroup(hw, seqs, Range(0, 4), CommKind::kRing)
                .padded_tokens_per_rank,
            252);
  // Ulysses: d chunks of ceil(1001/4) = 251.
  EXPECT_EQ(SimulateGroup(hw, seqs, Range(0, 4), CommKind::kAllToAll)
                .padded_tokens_per_rank,
            251);
}

TEST(SimulateGroup, RingCommBytesAndCommBoundTimeByHand) {
  HardwareModel hw = Hw();
  // Make compute, launches and latency negligible so the ring is
  // transfer-bound.
  hw.peak_flops = 1e30;
  hw.hbm_bytes_per_s = 1e30;
  hw.launch_s = 0;
  hw.latency_intra_s = 0;
  hw.latency_inter_s = 0;
  const int d = 4;
  const std::vector<Sequence> seqs = {{8000, 0.0}};
  const auto r = SimulateGroup(hw, seqs, Range(0, d), CommKind::kRing);
  const double c = 2 * 1000;                  // 8000 / 8 chunks, 2 per rank
  const double kv_step = c * 2 * 1024 * 2.0;  // K and V, bf16
  // forward + recompute: (d-1) KV hops each; backward: (d-1) hops of KV + fp32
  // dKV (3× bytes) and one dKV hop home (2×).
  const double bytes = 36 * kv_step * (2 * (d - 1) + 3 * (d - 1) + 2);
  EXPECT_NEAR(r.comm_bytes_per_rank, bytes, 1e-6 * bytes);
  EXPECT_NEAR(r.time_s, bytes / hw.bw_intra_node, 1e-6 * r.time_s);
  EXPECT_NEAR(r.exposed_comm_s, r.comm_s, 1e-9);
}

TEST(SimulateGroup, UlyssesBytesAndHeadPaddingByHand) {
  const HardwareModel hw = Hw();  // 32 q heads, 8 kv heads, head_dim 128
  const std::vector<Sequence> seqs = {{12288, 0.0}};
  const auto one = SimulateGroup(hw, seqs, Range(0, 1), CommKind::kAllToAll);
  for (int d : {2, 3, 4}) {
    const auto r = SimulateGroup(hw, seqs, Range(0, d), CommKind::kAllToAll);
    const double hq = std::ceil(32.0 / d), hkv = std::ceil(8.0 / d);
    const double m = 12288.0 / d;
    // Per pass: Q,K,V in and O out; 3 passes (fwd, recompute, bwd).
    const double bytes = 36 * 3 * (d - 1) * m * (2 * hq + 2 * hkv) * 128 * 2.0;
    EXPECT_NEAR(r.comm_bytes_per_rank, bytes, 1e-6 * bytes) << d;
    // Each rank computes the whole sequence for ceil(32/d) heads.
    EXPECT_NEAR(r.attention_s, one.attention_s * hq / 32.0,
                1e-9 * one.attention_s)
        << d;
    // Nothing overlaps in Ulysses.
    EXPECT_NEAR(r.exposed_comm_s, r.comm_s, 1e-9 * r.comm_s);
  }
}

TEST(SimulateGroup, RingWithinNodeFasterThanAcrossNodes) {
  const HardwareModel hw = Hw();
  for (int64_t len : {2048, 16384, 65536}) {
    const std::vector<Sequence> seqs = {{len, 0.0}};
    const auto intra = SimulateGroup(hw, seqs, Range(0, 8), CommKind::kRing);
    const auto inter =
        SimulateGroup(hw, seqs, std::vector<int>{0, 1, 2, 3, 16, 17, 18, 19},
                      CommKind::kRing);
    EXPECT_LT(intra.time_s, inter.time_s) << len;
    EXPECT_LT(intra.comm_s, inter.comm_s) << len;
    EXPECT_DOUBLE_EQ(intra.comm_bytes_per_rank, inter.comm_bytes_per_rank);
  }
}

TEST(SimulateGroup, RingHidesTransferBehindLongSequenceCompute) {
  // Attention per step grows with chunk², KV transfer with chunk: long
  // sequences hide the ring, short ones do not.
  const HardwareModel hw = Hw();
  const auto long_seq = SimulateGroup(hw, std::vector<Sequence>{{131072, 0.0}},
                                      Range(0, 16), CommKind::kRing);
  const auto short_seq = SimulateGroup(hw, std::vector<Sequence>{{1024, 0.0}},
                                       Range(0, 16), CommKind::kRing);
  EXPECT_LT(long_seq.exposed_comm_s / long_seq.comm_s,
            short_seq.exposed_comm_s / short_seq.comm_s);
  EXPECT_LT(long_seq.exposed_comm_s,
            0.05 * long_seq.comm_s + 36 * 4 * 2 * 16 * hw.latency_intra_s);
}

TEST(SimulateGroup, MoreRanksHelpLongSequencesNotShortOnes) {
  const HardwareModel hw = Hw();
  const std::vector<Sequence> long_seq = {{65536, 0.0}};
  EXPECT_LT(SimulateGroupTimeS(hw, long_seq, Range(0, 8)),
            SimulateGroupTimeS(hw, long_seq, Range(0, 4)));
  // A 256-token sequence gains nothing from 16 ranks (launches, latency, tiny
  // GEMMs).
  const std::vector<Sequence> short_seq = {{256, 0.0}};
  EXPECT_GT(SimulateGroupTimeS(hw, short_seq, Range(0, 16)),
            SimulateGroupTimeS(hw, short_seq, Range(0, 2)));
}

TEST(SimulateGroup, FullAttentionCostsMoreThanCausalByHand) {
  const HardwareModel hw = Hw();
  const auto causal = SimulateGroup(hw, std::vector<Sequence>{{8192, 0.0}},
                                    Range(0, 2), CommKind::kRing);
  const auto full = SimulateGroup(hw, std::vector<Sequence>{{8192, 1.0}},
                                  Range(0, 2), CommKind::kRing);
  // d = 2: chunks of 4096 tokens, 2 steps of 1/4 of the pairs; the diagonal
  // step is causal (eta 0) or unmasked (eta 1), the other always unmasked.
  const double c = 4096, P = hw.peak_flops;
  auto by_hand = [&](double eta) {
    const double flops = LayerAttentionFlopsForward(hw.shape, 8192, eta) / 4;
    const double fwd = flops / (P * AttentionForwardEfficiency(hw, c, eta)) +
                       flops / (P * AttentionForwardEfficiency(hw, c, 1.0));
    const double bwd =
        2.5 * flops / (P * AttentionBackwardEfficiency(hw, c, eta)) +
        2.5 * flops / (P * AttentionBackwardEfficiency(hw, c, 1.0));
    return 36 * (2 * fwd + bwd);
  };
  EXPECT_NEAR(causal.attention_s, by_hand(0.0), 1e-12);
  EXPECT_NEAR(full.attention_s, by_hand(1.0), 1e-12);
  EXPECT_GT(full.attention_s, causal.attention_s);
  EXPECT_LT(full.attention_s,
            2.0 * causal.attention_s);  // unmasked blocks run faster
}

TEST(SimulateGroup, VisionEncoderFrozenIsCheaperAndTextModelsHaveNone) {
  HardwareModel hw = Hw("internvl3-8b");
  const std::vector<Sequence> seqs = {{8000, 0.0, 7680}};
  const auto unfrozen = SimulateGroup(hw, seqs, Range(0, 2), CommKind::kRing);
  hw.vision_frozen = true;
  const auto frozen = SimulateGroup(hw, seqs, Range(0, 2), CommKind::kRing);
  EXPECT_GT(unfrozen.vision_s, 0);
  EXPECT_LT(frozen.vision_s, unfrozen.vision_s);
  EXPECT_LT(frozen.mem_bytes_per_rank, unfrozen.mem_bytes_per_rank);
  // Vision tokens estimated from eta (one block of 256 tokens per frame).
  const double eta = 30 * 256.0 * 256.0 / (8000.0 * 8000.0);
  const auto from_eta = SimulateGroup(hw, std::vector<Sequence>{{8000, eta}},
                                      Range(0, 2), CommKind::kRing);
  const auto explicit_vt =
      SimulateGroup(hw, std::vector<Sequence>{{8000, eta, 30 * 256}},
                    Range(0, 2), CommKind::kRing);
  EXPECT_NEAR(from_eta.vision_s, explicit_vt.vision_s,
              1e-9 * explicit_vt.vision_s);
  EXPECT_EQ(SimulateGroup(Hw(), seqs, Range(0, 2), CommKind::kRing).vision_s,
            0.0);
}

TEST(SimulateGroup, BadInput) {
  const HardwareModel hw = Hw("qwen3-8b", 8);
  const std::vector<Sequence> seqs = {{100, 0.0}};
  EXPECT_THROW(SimulateGroup(hw, seqs, std::vector<int>{}, CommKind::kRing),
               InputError);
  EXPECT_THROW(SimulateGroup(hw, seqs, std::vector<int>{8}, CommKind::kRing),
               InputError);
  EXPECT_THROW(
      SimulateGroup(hw, std::vector<Sequence>{}, Range(0, 1), CommKind::kRing),
      InputError);
}

TEST(SimulatePlan, OomIsReportedNotRun) {
  const HardwareModel hw = Hw("qwen3-8b", 8);
  const std::vector<Sequence> seqs = {{131072, 0.0}, {100, 0.0}};
  Plan plan;
  plan.num_ranks = 8;
  plan.micro_batches.push_back({{Group({0}, {0}), Group({1}, {1})}, 0});
  const SimResult r = SimulatePlan(hw, plan, seqs);
  EXPECT_TRUE(r.oom);
  EXPECT_NE(r.oom_message.find("micro_batches[0].groups[0]"),
            std::string::npos);
  EXPECT_EQ(r.iter_s, 0.0);
  // The same sequence on 8 ranks fits.
  Plan ok;
  ok.num_ranks = 8;
  ok.micro_batches.push_back({{Group(Range(0, 8), {0, 1})}, 0});
  const SimResult r2 = SimulatePlan(hw, ok, seqs);
  EXPECT_FALSE(r2.oom);
  EXPECT_GT(r2.iter_s, 0);
}

TEST(SimulatePlan, RanksProceedIndependentlyAndGroupsAreCached) {
  HardwareModel hw = Hw("qwen3-1.7b", 4);
  const std::vector<Sequence> seqs = {{4000, 0.0}, {1000, 0.0}, {2000, 0.0}};
  const double a =
      SimulateGroupTimeS(hw, std::vector<Sequence>{seqs[0]}, Range(0, 2));
  const double b =
      SimulateGroupTimeS(hw, std::vector<Sequence>{seqs[1]}, Range(2, 1));
  const double c =
      SimulateGroupTimeS(hw, std::vector<Sequence>{seqs[2]}, Range(1, 2));
  Plan plan;
  plan.num_ranks = 4;
  plan.micro_batches.push_back({{Group({0, 1}, {0}), Group({2}, {1})}, 0});
  plan.micro_batches.push_back({{Group({1, 2}, {2})}, 0});
  SimOptions o;
  o.include_grad_sync = false;
  const SimResult r = SimulatePlan(hw, plan, seqs, o);
  // Group c needs ranks 1 (free at create + a) and 2 (free at b < a).
  EXPECT_NEAR(r.compute_s, hw.group_create_s + a + hw.group_create_s + c,
              1e-12);
  EXPECT_EQ(r.new_groups, 2);
  EXPECT_DOUBLE_EQ(r.iter_s, r.compute_s);
  EXPECT_DOUBLE_EQ(r.tokens, 7000);
  // Re-using the same rank set creates no new communicator.
  Plan again = plan;
  again.micro_batches.push_back({{Group({0, 1}, {0})}, 0});
  EXPECT_EQ(SimulatePlan(hw, again, seqs, o).new_groups, 2);
  // The measured group times: each group's own time (no creation, no wait),
  // plan order; an empty group did not run.
  Plan with_idle = plan;
  with_idle.micro_batches[1].groups.push_back(Group({0}, {}));
  const std::vector<double> t =
      MeasuredGroupTimesS(with_idle, SimulatePlan(hw, with_idle, seqs, o));
  ASSERT_EQ(t.size(), 4u);
  EXPECT_NEAR(t[0], a, 1e-12);
  EXPECT_NEAR(t[1], b, 1e-12);
  EXPECT_NEAR(t[2], c, 1e-12);
  EXPECT_TRUE(std::isnan(t[3]));
  SimResult oom;
  oom.oom = true;
  for (double x : MeasuredGroupTimesS(plan, oom)) EXPECT_TRUE(std::isnan(x));
}

TEST(SimulatePlan, GradSyncAddedOncePerGlobalBatch) {
  const HardwareModel hw = Hw("qwen3-1.7b", 4);
  const std::vector<Sequence> seqs = {{1000, 0.0}};
  Plan one;
  one.num_ranks = 4;
  one.micro_batches.push_back({{Group({0}, {0})}, 0});
  Plan two = one;
  two.micro_batches.push_back({{Group({0}, {0})}, 0});
  const std::vector<Sequence> seqs2 = {{1000, 0.0}};
  const SimResult r1 = SimulatePlan(hw, one, seqs);
  const SimResult r2 = SimulatePlan(hw, two, seqs2);
  EXPECT_GT(r1.grad_sync_s, 0);
  EXPECT_DOUBLE_EQ(r1.grad_sync_s, r2.grad_sync_s);
  EXPECT_NEAR(r2.compute_s, 2 * r1.compute_s, 1e-12);
}

TEST(SimulatePlan, GradSyncOverlapByHand) {
  // qwen3-8b on 64 Ascend ranks (4 nodes): reduce-scatter and all-gather of
  // bf16 over the inter-node link, ring latency, buckets of max(40M, 1M·64)
  // params; Adam over P/64 params at HBM speed.
  HardwareModel hw = Hw("qwen3-8b", 64);
  const double P = BackboneParams(hw.shape);
  const double collective =
      2.0 * P * 63 / 64 / hw.bw_inter_node + 63 * hw.latency_inter_s;
  const double buckets = std::ceil(P / 64e6);
  const double optimizer = 26.0 * P / 64 / hw.hbm_bytes_per_s;
  // One long sequence on all 64 ranks: its backward hides everything but one
  // bucket of each collective.
  Plan plan;
  plan.num_ranks = 64;
  plan.micro_batches.push_back({{Group(Range(0, 64), {0})}, 0});
  const std::vector<Sequence> seqs = {{131072, 0.0}};
  SimOptions overlap;
  const SimResult r = SimulatePlan(hw, plan, seqs, overlap);
  EXPECT_NEAR(r.grad_sync_total_s, 2 * collective + optimizer, 1e-9);
  EXPECT_NEAR(r.grad_sync_s, 2 * collective / buckets + optimizer, 1e-9);
  SimOptions serial;
  serial.overlap_grad_reduce = false;
  const SimResult s = SimulatePlan(hw, plan, seqs, serial);
  EXPECT_NEAR(s.grad_sync_s, 2 * collective + optimizer, 1e-9);
  EXPECT_DOUBLE_EQ(s.compute_s, r.compute_s);
  // A short sequence: the backward window w is smaller than the
  // reduce-scatter, which is exposed by all but w.
  const std::vector<Sequence> short_seq = {{1024, 0.0}};
  const SimResult t = SimulatePlan(hw, plan, short_seq, overlap);
  const GroupSimResult g =
      SimulateGroup(hw, short_seq, Range(0, 64), CommKind::kRing);
  ASSERT_LT(g.backward_s, collective);
  const double exposed_rs =
      collective / buckets +
      std::max(0.0, collective - collective / buckets - g.backward_s);
  const double exposed_ag =
      collective / buckets +
      std::max(0.0, collective - collective / buckets - g.forward_s);
  EXPECT_NEAR(t.grad_sync_s, exposed_rs + exposed_ag + optimizer, 1e-9);
}

// The all-gather window rule's property: a sequence added on a rank that was
// idle lengthens the step by at most its own simulated time (each rank hides
// the collectives behind its own groups; an idle rank hides nothing). Random
// plans of short and long sequences on 8 ranks, where the gradient sync
// matters.
TEST(SimulatePlan, WorkOnAnIdleRankAddsAtMostItself) {
  const HardwareModel hw = Hw("qwen3-1.7b", 8);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int idle = static_cast<int>(rng() % 8);
    std::vector<Sequence> seqs;
    Plan plan;
    plan.num_ranks = 8;
    plan.micro_batches.resize(1 + rng() % 3);
    for (MicroBatchPlan& mb : plan.micro_batches) {
      std::vector<int> ranks;
      for (int r = 0; r < 8; ++r)
        if (r != idle && rng() % 4 != 0) ranks.push_back(r);
      if (ranks.empty()) ranks.push_back((idle + 1) % 8);
      while (!ranks.empty()) {
        const size_t d = 1 + rng() % ranks.size();
        seqs.push_back({static_cast<int64_t>(64 + rng() % 16000), 0.0});
        mb.groups.push_back(
            Group({ranks.begin(), ranks.begin() + static_cast<long>(d)},
                  {static_cast<int>(seqs.size()) - 1}));
        ranks.erase(ranks.begin(), ranks.begin() + static_cast<long>(d));
      }
    }
    const double before = SimulatePlan(hw, plan, seqs).iter_s;
    seqs.push_back({static_cast<int64_t>(1 + rng() % 4000), 0.0});
    const int idle_rank[] = {idle};
    const double work_s =
        SimulateGroup(hw, {&seqs.back(), 1}, idle_rank, CommKind::kRing).time_s;
    plan.micro_batches[rng() % plan.micro_batches.size()].groups.push_back(
        Group({idle}, {static_cast<int>(seqs.size()) - 1}));
    EXPECT_LE(SimulatePlan(hw, plan, seqs).iter_s,
              before + work_s + 1e-9 * before)
        << "trial " << trial;
  }
}

// Calls `visit` with every plan of `k` sequences on `n` ranks up to
// relabelling: sequences into micro-batches and groups (restricted growth
// strings), each group a degree in [1, n] on the next free ranks of its
// micro-batch, ring or (degree dividing the query heads) all-to-all.
void ForEachPlan(int k, int n, int q_heads,
                 const std::function<void(const Plan&)>& visit) {
  std::vector<int> mb(k), grp(k);
  std::function<void(int, int)> assign = [&](int i, int used) {
    if (i == k) {
      std::vector<std::vector<int>> groups;  // sequences per (mb, grp) pair
      std::vector<int> group_mb;
      for (int s = 0; s < k; ++s) {
        size_t g = 0;
        while (g < groups.size() &&
               !(group_mb[g] == mb[s] && grp[groups[g][0]] == grp[s]))
          ++g;
        if (g == groups.size())
          groups.emplace_back(), group_mb.push_back(mb[s]);
        groups[g].push_back(s);
      }
      std::vector<int> degree(groups.size(), 1), a2a(groups.size(), 0);
      std::function<void(size_t)> place = [&](size_t g) {
        if (g < groups.size()) {
          for (int d = 1; d <= n; ++d)
            for (int c = 0; c < (d > 1 && q_heads % d == 0 ? 2 : 1); ++c)
              degree[g] = d, a2a[g] = c, place(g + 1);
          return;
        }
        Plan plan;
        plan.num_ranks = n;
        const int mbs = 1 + *std::max_element(mb.begin(), mb.end());
        plan.micro_batches.resize(static_cast<size_t>(mbs));
        std::vector<int> next_rank(static_cast<size_t>(mbs), 0);
        for (size_t h = 0; h < groups.size(); ++h) {
          int& first = next_rank[static_cast<size_t>(group_mb[h])];
          if (first + degree[h] > n) return;
          plan.micro_batches[static_cast<size_t>(group_mb[h])].groups.push_back(
              Group(Range(first, degree[h]), groups[h],
                    a2a[h] ? CommKind::kAllToAll : CommKind::kRing));
          first += degree[h];
        }
        visit(plan);
      };
      place(0);
      return;
    }
    for (int m = 0; m <= used && m < k; ++m) {
      mb[i] = m;
      int used_g = -1;  // groups already opened in micro-batch m
      for (int s = 0; s < i; ++s)
        if (mb[s] == m) used_g = std::max(used_g, grp[s]);
      for (int g = 0; g <= used_g + 1; ++g) {
        grp[i] = g;
        assign(i + 1, std::max(used, m + 1));
      }
    }
  };
  assign(0, 0);
}

// Every token's work at the curves' ceilings over all ranks (s), by hand
// (full recompute: four linear passes, the LM head three, attention forward
// twice and backward once at 2.5x; qwen3 heads of 128).
double SpreadWorkByHand(const HardwareModel& hw,
                        const std::vector<Sequence>& seqs) {
  const ModelShape& sh = hw.shape;
  const double L = sh.layers, h = sh.hidden, f = sh.ffn;
  const double dq = sh.q_heads * 128.0, dkv = sh.kv_heads * 128.0;
  double work = 0;
  for (const Sequence& seq : seqs) {
    const double len = static_cast<double>(seq.length_tokens);
    work += (4 * L * 2 * len * LayerParams(sh) + 3 * 2 * len * h * sh.vocab) /
            (hw.peak_flops * hw.gemm_eff_max);
    work += 4 * L * len * 2 * (8 * h + 3 * f + 2 * dq + 2 * dkv) /
            hw.hbm_bytes_per_s;
    const double attn_flops = L * LayerAttentionFlopsForward(sh, len, seq.eta);
    work += 2 * attn_flops / (hw.peak_flops * hw.attn_fwd_eff_max) +
            2.5 * attn_flops / (hw.peak_flops * hw.attn_bwd_eff_max);
  }
  return work / hw.num_ranks;
}

// The gradient sync of 4 ranks on one node, by hand: one collective T, its
// last bucket b (buckets of 40M params) and the optimizer step (s).
struct SyncByHand {
  double T, b, optimizer;
};
SyncByHand SyncOnOneNodeOf4ByHand(const HardwareModel& hw) {
  const double P = BackboneParams(hw.shape);
  const double T = 2.0 * P * 3 / 4 / hw.bw_intra_node + 3 * hw.latency_intra_s;
  return {T, T / std::ceil(P / 40e6), 26.0 * P / 4 / hw.hbm_bytes_per_s};
}

// The bound against brute force: no plan of three sequences on four ranks
// (every grouping, micro-batching, degree and collective) simulates faster,
// for a sync-bound batch of short sequences and a compute-bound one of long
// ones; where the sync dominates the bound is strictly above the former one
// (work + one bucket each way).
TEST(PhysicalLowerBound, BelowEveryPlanOfTinyBatches) {
  const HardwareModel hw = Hw("qwen3-1.7b", 4);
  for (const std::vector<Sequence>& seqs :
       {std::vector<Sequence>{{128, 0.0}, {256, 0.0}, {100, 1.0}},
        std::vector<Sequence>{{32768, 0.0}, {16384, 0.0}, {8192, 0.0}}}) {
    const double bound = PhysicalLowerBoundS(hw, seqs);
    const double ring_bound = PhysicalLowerBoundS(hw, seqs, true, true);
    EXPECT_GE(ring_bound, bound);
    double best = std::numeric_limits<double>::infinity();
    int plans = 0;
    ForEachPlan(3, 4, hw.shape.q_heads, [&](const Plan& plan) {
      const SimResult r = SimulatePlan(hw, plan, seqs);
      if (r.oom) return;
      ++plans;
      best = std::min(best, r.iter_s);
      EXPECT_LE(bound, r.iter_s * (1 + 1e-12));
      bool rings = true;
      for (const MicroBatchPlan& mb : plan.micro_batches)
        for (const GroupPlan& g : mb.groups)
          rings &= g.comm == CommKind::kRing || g.ranks.size() == 1;
      if (rings) EXPECT_LE(ring_bound, r.iter_s * (1 + 1e-12));
    });
    EXPECT_GT(plans, 100);
    EXPECT_LE(bound, best);
    const auto [T, b, optimizer] = SyncOnOneNodeOf4ByHand(hw);
    // At least the spread work W's term, and where the sync dominates (the
    // short batch) far above the former bound (W + one bucket each way).
    // (The long sequences' term: TheBestPlanOfOneSequenceMeetsIt.)
    const double work = SpreadWorkByHand(hw, seqs);
    EXPECT_GE(bound,
              (2 * b + std::max(work, 2 * (T - b)) + optimizer) * (1 - 1e-12));
    if (seqs[0].length_tokens < 4096)
      EXPECT_GT(bound, 1.5 * (work + 2 * b + optimizer));
  }
}

// The all-gather's term against brute force: three equal sequences whose
// spread work W lies between 2.5 and 3 times the sync's T - b (found by
// scaling their length; shorter ones are decided by the term of one alone),
// where the bound is 2b + (T - b) + (1 - 1/3) W: no plan of them on four
// ranks simulates faster, and the bound is above the former
// 2b + max(W, 2(T - b)).
TEST(PhysicalLowerBound, AllGatherBeyondTheFirstForwardBelowEveryPlan) {
  const HardwareModel hw = Hw("qwen3-8b", 4);
  ASSERT_DOUBLE_EQ(MaxForwardShare(hw), 1.0 / 3.0);  // full recompute
  const auto [T, b, optimizer] = SyncOnOneNodeOf4ByHand(hw);
  std::vector<Sequence> seqs;
  double work = 0;
  for (int64_t len = 64; len < (1 << 20); len += len / 8) {
    seqs.assign(3, Sequence{len, 0.0});
    work = SpreadWorkByHand(hw, seqs);
    if (work > 2.5 * (T - b)) break;
  }
  ASSERT_GT(work, 2.5 * (T - b));
  ASSERT_LT(work, 3.0 * (T - b));
  const double bound = PhysicalLowerBoundS(hw, seqs);
  EXPECT_NEAR(bound, 2 * b + (T - b) + work * 2 / 3 + optimizer, 1e-9 * bound);
  EXPECT_GT(bound, 2 * b + std::max(work, 2 * (T - b)) + optimizer);
  int plans = 0;
  ForEachPlan(3, 4, hw.shape.q_heads, [&](const Plan& plan) {
    const SimResult r = SimulatePlan(hw, plan, seqs);
    if (r.oom) return;
    ++plans;
    EXPECT_LE(bound, r.iter_s * (1 + 1e-12));
  });
  EXPECT_GT(plans, 100);
}

// MaxForwardShare against every group the simulator runs: random sequences
// (vision tokens included) on random rank sets, ring and all-to-all, under
// each recompute policy, an MLLM with its encoder trained and frozen, and
// attention curves whose backward runs far more efficiently than the forward
// (one of them past the ceiling); no group's forward takes a larger share of
// its time, and with full recompute (the presets' policy) some group comes
// within 20 % of it.
TEST(MaxForwardShare, NoGroupsForwardTakesMore) {
  std::mt19937_64 rng(7);
  for (const char* model : {"qwen3-8b", "qwen3-vl-8b"}) {
    for (Recompute recompute :
         {Recompute::kFull, Recompute::kSelective, Recompute::kNone}) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool frozen = variant == 1, fast_backward = variant == 2;
        HardwareModel hw = Hw(model, 32);
        hw.recompute = recompute;
        hw.vision_frozen = frozen;
        if (fast_backward) {
          hw.attn_fwd_eff_max = 0.2;
          hw.attn_fwd_half_tokens = 4000;
          hw.attn_bwd_eff_max = 1.2;
          hw.attn_bwd_half_tokens = 10;
        }
        const double share = MaxForwardShare(hw);
        ASSERT_GT(share, 0);
        ASSERT_LE(share, 1);
        double highest = 0;
        for (int trial = 0; trial < 300; ++trial) {
          std::vector<Sequence> seqs(1 + rng() % 4);
          for (Sequence& seq : seqs) {
            seq.length_tokens =
                1 + static_cast<int64_t>(rng() % (rng() % 2 ? 64 : 40000));
            seq.eta = (rng() % 3) / 2.0;
            seq.vision_tokens = rng() % 2 ? seq.length_tokens / 2 : 0;
          }
          const int d = 1 + static_cast<int>(rng() % 32);
          std::vector<int> ranks(32);
          std::iota(ranks.begin(), ranks.end(), 0);
          std::shuffle(ranks.begin(), ranks.end(), rng);
          ranks.resize(d);
          const CommKind comm =
              rng() % 2 ? CommKind::kRing : CommKind::kAllToAll;
          const GroupSimResult g = SimulateGroup(hw, seqs, ranks, comm);
          EXPECT_LE(g.forward_s, share * g.time_s * (1 + 1e-12))
              << model << " d=" << d;
          highest = std::max(highest, g.forward_s / g.time_s);
        }
        if (recompute == Recompute::kFull && !(frozen && hw.multimodal)) {
          EXPECT_GT(highest, 0.8 * share) << model;
        }
      }
    }
  }
}

// Sixteen sequences on one rank: the spread work, by hand, is above any one
// sequence alone, and below the simulation (no padding, launches or curves).
TEST(PhysicalLowerBound, SingleRankByHandAndBelowEverySimulation) {
  const HardwareModel hw = Hw("qwen3-1.7b", 1);
  const std::vector<Sequence> seqs(16, Sequence{4096, 0.0});
  const double optimizer = 26.0 * BackboneParams(hw.shape) / hw.hbm_bytes_per_s;
  EXPECT_NEAR(PhysicalLowerBoundS(hw, seqs),
              SpreadWorkByHand(hw, seqs) + optimizer, 1e-12);
  Plan plan;
  plan.num_ranks = 1;
  GroupPlan all = Group({0}, {});
  for (int k = 0; k < 16; ++k) all.sequences.push_back(k);
  plan.micro_batches.push_back({{all}, 0});
  EXPECT_LT(PhysicalLowerBoundS(hw, seqs), SimulatePlan(hw, plan, seqs).iter_s);
}

// Many sequences on one node of 4: the spread work W dominates, and with
// overlap the bound is W plus one bucket of each collective, by hand.
TEST(PhysicalLowerBound, SpreadWorkPlusOneBucketEachWayByHand) {
  const HardwareModel hw = Hw("qwen3-1.7b", 4);
  const std::vector<Sequence> seqs(64, Sequence{2048, 0.0});
  const auto [T, b, optimizer] = SyncOnOneNodeOf4ByHand(hw);
  const double work = SpreadWorkByHand(hw, seqs);
  ASSERT_GT(work, 2 * (T - b));
  EXPECT_NEAR(PhysicalLowerBoundS(hw, seqs), work + 2 * b + optimizer,
              1e-9 * work);
  EXPECT_NEAR(PhysicalLowerBoundS(hw, seqs, false), work + 2 * T + optimizer,
              1e-9 * work);
}

// The long-sequence term against brute force: one sequence on four ranks
// (one node of 4, or two of 2), every plan simulated (every degree, ring or
// all-to-all, micro-batching), the best is the bound exactly, and the best
// of ring groups only the rings-only bound; with overlap and without.
TEST(PhysicalLowerBound, TheBestPlanOfOneSequenceMeetsIt) {
  for (int per_node : {4, 2}) {
    HardwareModel hw = Hw("qwen3-1.7b", 4);
    hw.ranks_per_node = per_node;
    for (const Sequence& seq : {Sequence{32768, 0.0}, Sequence{8192, 0.5}}) {
      const std::vector<Sequence> seqs = {seq};
      for (bool overlap : {true, false}) {
        SimOptions so;
        so.overlap_grad_reduce = overlap;
        double best = std::numeric_limits<double>::infinity();
        double best_ring = best;
        ForEachPlan(1, 4, hw.shape.q_heads, [&](const Plan& plan) {
          const SimResult r = SimulatePlan(hw, plan, seqs, so);
          if (r.oom) return;
          best = std::min(best, r.iter_s - r.group_create_s);
          if (plan.micro_batches[0].groups[0].comm == CommKind::kRing)
            best_ring = std::min(best_ring, r.iter_s - r.group_create_s);
        });
        const std::string where = std::to_string(per_node) + " per node, " +
                                  std::to_string(seq.length_tokens) +
                                  (overlap ? ", overlap" : "");
        EXPECT_NEAR(PhysicalLowerBoundS(hw, seqs, overlap), best, 1e-9 * best)
            << where;
        EXPECT_NEAR(PhysicalLowerBoundS(hw, seqs, overlap, true), best_ring,
                    1e-9 * best)
            << where;
      }
    }
  }
}

TEST(PhysicalLowerBound, BelowStaticPlansOfEveryDegree) {
  const HardwareModel hw = Hw("qwen3-4b", 16);
  std::vector<Sequence> seqs;
  for (int i = 0; i < 16; ++i)
    seqs.push_back({1024 + 3000 * i, i % 3 == 0 ? 0.5 : 0.0});
  for (int cp : {1, 2, 4, 8, 16}) {
    for (bool overlap : {true, false}) {
      Plan plan;
      plan.num_ranks = 16;
      MicroBatchPlan mb;
      for (int j = 0; j < 16 / cp; ++j) {
        GroupPlan g = Group(Range(j * cp, cp), {});
        for (int k = j; k < 16; k += 16 / cp) g.sequences.push_back(k);
        mb.groups.push_back(g);
      }
      plan.micro_batches.push_back(mb);
      SimOptions so;
      so.overlap_grad_reduce = overlap;
      EXPECT_LT(PhysicalLowerBoundS(hw, seqs, overlap),
                SimulatePlan(hw, plan, seqs, so).iter_s)
          << cp << " " << overlap;
    }
  }
}

TEST(SimulatePlan, SameSeedSameResultOtherSeedOtherResult) {
  const HardwareModel hw = Hw("qwen3-1.7b", 8);
  std::vector<Sequence> seqs;
  Plan plan;
  plan.num_ranks = 8;
  for (int mb = 0; mb < 4; ++mb) {
    MicroBatchPlan m;
    for (int g = 0; g < 4; ++g) {
      seqs.push_back({1000 + 500 * g + 100 * mb, 0.0});
      m.groups.push_back(
          Group(Range(2 * g, 2), {static_cast<int>(seqs.size()) - 1}));
    }
    plan.micro_batches.push_back(m);
  }
  SimOptions o;
  o.noise_rel = 0.1;
  o.noise_seed = 5;
  const SimResult a = SimulatePlan(hw, plan, seqs, o);
  const SimResult b = SimulatePlan(hw, plan, seqs, o);
  EXPECT_EQ(a.iter_s, b.iter_s);
  EXPECT_EQ(a.micro_batch_end_s, b.micro_batch_end_s);
  o.noise_seed = 6;
  EXPECT_NE(SimulatePlan(hw, plan, seqs, o).iter_s, a.iter_s);
  // Without noise the seed is irrelevant.
  SimOptions quiet;
  quiet.noise_seed = 1;
  const double t1 = SimulatePlan(hw, plan, seqs, quiet).iter_s;
  quiet.noise_seed = 2;
  EXPECT_EQ(SimulatePlan(hw, plan, seqs, quiet).iter_s, t1);
}

TEST(SimulatePlan, BadPlans) {
  const HardwareModel hw = Hw("qwen3-1.7b", 4);
  const std::vector<Sequence> seqs = {{1000, 0.0}};
  Plan plan;
  plan.num_ranks = 4;
  plan.micro_batches.push_back({{Group({4}, {0})}, 0});
  EXPECT_THROW(SimulatePlan(hw, plan, seqs), InputError);
  plan.micro_batches[0].groups[0] = Group({0}, {1});
  EXPECT_THROW(SimulatePlan(hw, plan, seqs), InputError);
  plan.micro_batches[0].groups[0] = Group({0}, {0});
  plan.status = PlanStatus::kInfeasible;
  EXPECT_THROW(SimulatePlan(hw, plan, seqs), InputError);
}

TEST(CalibrateMemory, PlannerFeasibleGroupsNeverOomInSimulator) {
  for (const char* model : {"qwen3-8b", "internvl3-8b"}) {
    const HardwareModel hw = Hw(model);
    const CostModel cm = CalibrateMemory(hw, CostModel{});
    for (int64_t len = 1000; len <= 400000; len = len * 3 / 2) {
      for (int d : {1, 2, 3, 4, 8, 16}) {
        const std::vector<Sequence> seqs = {{len, 0.05}};
        const bool fits =
            GroupMemBytes(cm, GroupLoad::Of(seqs[0]), d) <= cm.mem_capacity;
        for (CommKind k : {CommKind::kRing, CommKind::kAllToAll}) {
          if (fits)
            EXPECT_FALSE(SimulateGroup(hw, seqs, Range(0, d), k).oom)
                << model << len << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fcp::sim
