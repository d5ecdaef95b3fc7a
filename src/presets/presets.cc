// Model and cluster presets (docs/design.md §6) and default cost coefficients.
//
// Derivation of DeriveCostModel (all per rank; a rank is one device, TP = PP =
// 1):
//
// The derivation mirrors, term by term, the calibrated simulator's hardware
// model (docs/simulator.md), from the cluster preset's own figures, so the
// planner's T(G, d) tracks the simulator without a fit:
//
// Compute. P_layer = attention projections h·(dq + 2·dkv) + dq·h plus a SwiGLU
// MLP 3·h·f, where dq = q_heads·head_dim and dkv = kv_heads·head_dim. Training
// costs 2 FLOPs/param/token forward and 4 backward; full activation recompute
// (below) adds one more forward: 8·L·P_layer per token, plus the LM head
// 6·h·V (not recomputed), at the GEMM ceiling gemm_eff_max. GEMMs run at
// gemm_eff_max · m/(m + m_half) on m rows: the m_half part is a constant
// (alpha2_gemm · m_half, into beta1). The elementwise work (norms, activations,
// residuals: 2·(8h + 3f + 2dq + 2dkv) bytes per token per layer and pass, 4
// passes) is HBM-bound and linear in tokens: into alpha2.
// Causal attention forward is 2·s²·dq per layer (QKᵀ and PV); the passes are
// forward and recompute forward at the forward curve, backward (2.5× FLOPs)
// at the backward curve, each e_max·n/(n + n_half) on chunks of n = s/d
// tokens: alpha1 = 2·L·dq·(2/Ef + 2.5/Eb)/peak, and the n_half terms give the
// short-chunk overhead h = (2·hf/Ef + 2.5·hb/Eb)/(2/Ef + 2.5/Eb) tokens. A
// causal block of n tokens is slower by S(n) = 1 + gain·(n/512)^-exp. At d = 1
// the whole sequence is one causal block: a loss of (S(s) - 1)·s per token of
// s; on a ring only the diagonal block (1/d of a rank's pairs) is causal:
// (S(n) - 1)·n/d. One h cannot hold both: the d = 1 form at n =
// kCausalRefTokens, weighted by kCausalDiagonalWeight, is added to h.
// Full (bidirectional) attention doubles the pairs: (1 + eta).
//
// Communication (zigzag ring, per layer). Forward and recompute forward send
// the K, V chunk (2·dkv bf16 per token) d - 1 times; backward sends K, V with
// the fp32 dK, dV (3× the bytes) d - 1 times, plus one dK, dV hop home:
// alpha3 = kRingBytesUnits · L · 2·dkv · 2 bytes (5 units per (d - 1) hops,
// plus the home hop's 2 spread over kRingRefDegree - 1 hops). Every ring step
// pays, per layer, one message latency in each of its 3 passes and 7 kernel
// launches (2 per forward pass, 3 backward): gamma = L · (3·latency + 7·launch)
// with the link's latency. The latency travels with the transfer, which
// attention hides: gamma_intra/inter = L · 3·latency; the launches are on the
// critical path: gamma_serial = L · 7·launch. beta2 = L · (latency_inter +
// 8·launch) (the home hop and the passes' extra launches).
//
// Launch overhead of the layers: beta1 += L · 3 passes · kKernelsPerLayerPass
// · launch_s.
//
// Memory. Model states: bf16 weights (2 B/param) and bf16 gradients (2 B/param)
// replicated; fp32 master weights + Adam m, v (12 B/param) sharded over all N
// ranks (Megatron distributed optimizer / ZeRO-1); plus kFrameworkReserveBytes.
// Activations with full recompute: one bf16 checkpoint of h per layer per token
// (2·L·h bytes) plus the working set of the one layer being recomputed:
// 2 bytes · (4·h + 2·dq + 2·dkv + 4·f) (norm inputs, QKV, attention output,
// MLP input, gate/up, activation, down input). Logits are computed in chunks by
// a fused cross-entropy, so the vocabulary adds no per-token term.
// MLLMs: the backbone's coefficients; the vision encoder's parameters are added
// to the model states; its compute (on each rank's share of the vision
// tokens) is alpha2_vision per vision token (VisionEncoderSPerToken below).
#include "fcp/presets.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "fcp/model_arithmetic.h"
#include "fcp/plan_check.h"
#include "fcp/types.h"
#include "fcp/unknown_names.h"

namespace fcp {
namespace {

constexpr double kFrameworkReserveBytes = 3e9;
// Chunk length at which the causal diagonal's slowdown is folded into h: the
// middle of the chunks plans use (1k-16k tokens; h_causal 350-620 tokens).
constexpr double kCausalRefTokens = 4096;
// The weight that minimises the mean |error| of T(G, d) against the simulator
// over every preset, both clusters (single and packed sequences, 1k-128k
// tokens, d = 1..64; src/cost/preset_fidelity_test.cc's grid): 1.16 % at 0.6,
// against 1.27 % at 0.4, 1.19 % at 0.8 and 1.30 % at 1.0 (the full d = 1 form).
constexpr double kCausalDiagonalWeight = 0.6;
// Ring bytes per token per (d - 1) hops, in units of one bf16 K, V chunk:
// 5 per hop plus the home hop's 2 spread over kRingRefDegree - 1 hops.
constexpr double kRingRefDegree = 9;
constexpr double kRingBytesUnits = 5.0 + 2.0 / (kRingRefDegree - 1);

ModelPreset Llm(const char* name, int layers, int hidden, int q_heads,
                int kv_heads, int head_dim, int ffn, int64_t vocab) {
  ModelPreset m;
  m.shape = ModelShape{name,     layers, hidden, q_heads, kv_heads,
                       head_dim, ffn,    vocab,  0,       0};
  return m;
}

ModelPreset Mllm(ModelPreset backbone, const char* name, int vision_layers,
                 int vision_hidden, int tokens_per_tile) {
  backbone.shape.name = name;
  backbone.shape.vision_layers = vision_layers;
  backbone.shape.vision_hidden = vision_hidden;
  backbone.multimodal = true;
  backbone.vision_tokens_per_tile = tokens_per_tile;
  return backbone;
}

}  // namespace

int64_t ModelPreset::params() const {
  return static_cast<int64_t>(BackboneParams(shape));
}

int64_t ModelPreset::vision_params() const {
  return static_cast<int64_t>(VisionParams(shape));
}

const std::vector<ModelPreset>& ModelPresets() {
  // Text models: Qwen3 and Llama 3 model cards
  // (layers/hidden/q/kv/head_dim/ffn/vocab).
  static const std::vector<ModelPreset> presets = [] {
    const ModelPreset qwen3_1_7b =
        Llm("qwen3-1.7b", 28, 2048, 16, 8, 128, 6144, 151936);
    const ModelPreset qwen3_4b =
        Llm("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936);
    const ModelPreset qwen3_8b =
        Llm("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936);
    // InternVL backbones: Qwen2.5-1.5B / 3B / 7B; vision InternViT-300M (24 x
    // 1024), 256 tokens per 448² tile. Qwen3-VL: Qwen3 backbones, ≈98 tokens
    // per 448² frame pair (pair-merged in time).
    const ModelPreset qwen25_1_5b = Llm("", 28, 1536, 12, 2, 128, 8960, 151936);
    const ModelPreset qwen25_3b = Llm("", 36, 2048, 16, 2, 128, 11008, 151936);
    const ModelPreset qwen25_7b = Llm("", 28, 3584, 28, 4, 128, 18944, 152064);
    return std::vector<ModelPreset>{
        qwen3_1_7b,
        qwen3_4b,
        qwen3_8b,
        Llm("llama3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256),
        Llm("llama3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256),
        Llm("llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256),
        // Llama 3 paper (arXiv 2407.21783) Table 3; Qwen3-32B model card
        // (config.json).
        Llm("llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256),
        // Llama 2 paper (arXiv 2307.09288) 13B: multi-head attention (40 kv
        // heads), the model of NVIDIA's Dynamic-CP measurements
        // (docs/baselines.md).
        Llm("llama2-13b", 40, 5120, 40, 40, 128, 13824, 32000),
        Llm("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936),
        Mllm(qwen25_1_5b, "internvl3-2b", 24, 1024, 256),
        Mllm(qwen25_3b, "internvl2.5-4b", 24, 1024, 256),
        Mllm(qwen25_7b, "internvl3-8b", 24, 1024, 256),
        Mllm(qwen3_1_7b, "qwen3-vl-2b", 24, 1024, 98),
        Mllm(qwen3_4b, "qwen3-vl-4b", 24, 1024, 98),
        Mllm(qwen3_8b, "qwen3-vl-8b", 27, 1152, 98),
    };
  }();
  return presets;
}

const std::vector<ClusterPreset>& ClusterPresets() {
  static const std::vector<ClusterPreset> presets = [] {
    // Kernel efficiencies (docs/simulator.md, docs/calibration.md): the
    // attention curves are least-squares fits to FlashAttention-3's published
    // BF16 head-dim-128 H100 figures (arXiv 2407.08608, forward with and
    // without causal mask, backward), within 4 % of every published point;
    // the GEMM ceiling is calibrated against published end-to-end H100 runs
    // (`fcp eval calibrate`). No Ascend 910C kernel figures were available: it
    // is given the same fractions of its own peak.
    ClusterPreset ascend;
    ascend.name = "ascend910c-4x16";
    // Paper's testbed: 4 nodes x 16 Ascend 910C NPUs, 64 GB, ~376 TFLOPS bf16,
    // HCCS ~196 GB/s in-node, RoCE ~50 GB/s across nodes; HBM 3.2 TB/s (spec).
    ascend.num_ranks = 64;
    ascend.ranks_per_node = 16;
    ascend.peak_flops = 376e12;
    ascend.mem_bytes = 64e9;
    ascend.bw_intra_node = 196e9;
    ascend.bw_inter_node = 50e9;
    ascend.hbm_bytes_per_s = 3.2e12;
    ascend.latency_intra_s = 8e-6;
    ascend.latency_inter_s = 20e-6;
    ascend.launch_s = 8e-6;

    // 8 nodes x 8 H100 SXM: 989 TFLOPS dense bf16, 80 GB, NVLink ~450 GB/s per
    // direction, 400 Gb/s InfiniBand per GPU (50 GB/s). HBM: 2.93 TB/s
    // sustained (measured 2.90-2.97 TB/s against the 3.35 TB/s spec).
    ClusterPreset h100;
    h100.name = "h100-8x8";
    h100.num_ranks = 64;
    h100.ranks_per_node = 8;
    h100.peak_flops = 989e12;
    h100.mem_bytes = 80e9;
    h100.bw_intra_node = 450e9;
    h100.bw_inter_node = 50e9;
    h100.hbm_bytes_per_s = 2.93e12;
    h100.latency_intra_s = 5e-6;
    h100.latency_inter_s = 15e-6;
    h100.launch_s = 5e-6;
    return std::vector<ClusterPreset>{ascend, h100};
  }();
  return presets;
}

const ModelPreset* FindModelPreset(std::string_view name) {
  for (const auto& m : ModelPresets()) {
    if (m.shape.name == name) return &m;
  }
  return nullptr;
}

const ClusterPreset* FindClusterPreset(std::string_view name) {
  for (const auto& c : ClusterPresets()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string UnknownModelPresetMessage(std::string_view name) {
  std::string names;
  for (const auto& m : ModelPresets())
    names += (names.empty() ? "" : ", ") + m.shape.name;
  return "unknown model preset '" + std::string(name) + "' (known: " + names +
         ")";
}

std::string UnknownClusterPresetMessage(std::string_view name) {
  std::string names;
  for (const auto& c : ClusterPresets())
    names += (names.empty() ? "" : ", ") + c.name;
  return "unknown cluster preset '" + std::string(name) + "' (known: " + names +
         ")";
}

namespace {

// The vision encoder and projector per LLM vision token (s; 0 for LLMs), as
// the simulator runs them on P = kVisionPatchesPerTile patches per tile and
// kVisionPatchesPerToken per token: ViT GEMMs 24·vh²·vl FLOPs per patch and
// pass at the GEMM ceiling (4 passes trained, 1 frozen), full attention
// inside a tile 4·vh·P·vl per patch forward at the unmasked curves at P
// (trained: two forwards and the backward's 2.5×; frozen: one forward), and
// the projector 2·(vh·patches·h + h²) per token, three passes either way.
double VisionEncoderSPerToken(const ModelPreset& model,
                              const ClusterPreset& cluster,
                              bool vision_frozen) {
  const ModelShape& s = model.shape;
  if (!model.multimodal || s.vision_layers <= 0 || s.vision_hidden <= 0)
    return 0;
  const double vh = s.vision_hidden, vl = s.vision_layers, h = s.hidden;
  const double patches = kVisionPatchesPerToken, tile = kVisionPatchesPerTile;
  const double gemm_rate = cluster.peak_flops * cluster.gemm_eff_max;
  const double vit_gemm_s = 24.0 * vh * vh * vl * patches / gemm_rate;
  const double attn_flops = 4.0 * vh * tile * vl * patches;
  const double fwd_s =
      attn_flops / (cluster.peak_flops * cluster.attn_fwd_eff_max * tile /
                    (tile + cluster.attn_fwd_half_tokens));
  const double bwd_s = 2.5 * attn_flops /
                       (cluster.peak_flops * cluster.attn_bwd_eff_max * tile /
                        (tile + cluster.attn_bwd_half_tokens));
  const double proj_s = 2.0 * (vh * patches * h + h * h) / gemm_rate;
  if (vision_frozen) return vit_gemm_s + fwd_s + 3.0 * proj_s;
  return 4.0 * vit_gemm_s + 2.0 * fwd_s + bwd_s + 3.0 * proj_s;
}

}  // namespace

CostModel DeriveCostModel(const ModelPreset& model,
                          const ClusterPreset& cluster, bool vision_frozen) {
  const ModelShape& s = model.shape;
  const double dq = static_cast<double>(s.q_heads) * s.head_dim;
  const double dkv = static_cast<double>(s.kv_heads) * s.head_dim;
  const double layers = s.layers;

  CostModel cm;
  const double peak = cluster.peak_flops;
  // Attention: both curves, forward passes (2) and backward (2.5× FLOPs).
  const double fwd_w = 2.0 / cluster.attn_fwd_eff_max;
  const double bwd_w = 2.5 / cluster.attn_bwd_eff_max;
  cm.alpha1 = 2.0 * layers * dq * (fwd_w + bwd_w) / peak;
  const double unmasked_h = (fwd_w * cluster.attn_fwd_half_tokens +
                             bwd_w * cluster.attn_bwd_half_tokens) /
                            (fwd_w + bwd_w);
  const double causal_h =
      cluster.attn_causal_gain *
      std::pow(kCausalRefTokens / 512.0, -cluster.attn_causal_exponent) *
      kCausalRefTokens;
  cm.attn_overhead_tokens = unmasked_h + kCausalDiagonalWeight * causal_h;
  // Linear layers at the GEMM ceiling, plus the HBM-bound elementwise work.
  const double linear_flops_per_token =
      8.0 * layers * LayerParams(s) +
      6.0 * s.hidden * static_cast<double>(s.vocab);
  const double gemm_s_per_token =
      linear_flops_per_token / (peak * cluster.gemm_eff_max);
  const double elementwise_s_per_token =
      4.0 * layers * ElementwiseBytesPerToken(s) / cluster.hbm_bytes_per_s;
  cm.alpha2 = gemm_s_per_token + elementwise_s_per_token;
  cm.alpha2_vision = VisionEncoderSPerToken(model, cluster, vision_frozen);
  cm.beta1 = gemm_s_per_token * cluster.gemm_eff_half_rows +
             layers * 3 * kKernelsPerLayerPass * cluster.launch_s;
  // Ring.
  cm.alpha3 = kRingBytesUnits * layers * 2.0 * dkv * 2.0;
  cm.gamma_intra = layers * 3 * cluster.latency_intra_s;
  cm.gamma_inter = layers * 3 * cluster.latency_inter_s;
  cm.gamma_serial = layers * 7 * cluster.launch_s;
  cm.ring_tail_steps = 1;  // zigzag ring: d attention steps, d - 1 transfers
  cm.beta2 = layers * (cluster.latency_inter_s + 8 * cluster.launch_s);
  cm.bw_intra_node = cluster.bw_intra_node;
  cm.bw_inter_node = cluster.bw_inter_node;
  cm.mem_per_token = 2.0 * layers * s.hidden +
                     2.0 * (4.0 * s.hidden + 2 * dq + 2 * dkv + 4.0 * s.ffn);
  const double params = static_cast<double>(model.params()) +
                        static_cast<double>(model.vision_params());
  cm.mem_static = 4.0 * params +
                  12.0 * params / std::max(1, cluster.num_ranks) +
                  kFrameworkReserveBytes;
  cm.mem_capacity = cluster.mem_bytes;
  return cm;
}

void CheckModelFitsOneRank(const CostModel& derived, const ModelPreset& model,
                           const ClusterPreset& cluster) {
  if (derived.mem_capacity > derived.mem_static) return;
  constexpr double kGiB = double{1 << 30};
  char buf[320];
  std::snprintf(
      buf, sizeof buf,
      "%s's states need %.1f GiB per rank on %d ranks of %s (%.1f GiB each): "
      "they do "
      "not fit one rank (more ranks, a smaller model or a cost_model)",
      model.shape.name.c_str(), derived.mem_static / kGiB, cluster.num_ranks,
      cluster.name.c_str(), derived.mem_capacity / kGiB);
  throw InputError("model", buf);
}

}  // namespace fcp
