// Model and cluster presets (docs/design.md §6) and default cost coefficients.
//
// Derivation of DeriveCostModel (all per rank; a rank is one device, TP = PP = 1):
//
// Compute. P_layer = attention projections h·(dq + 2·dkv) + dq·h plus a SwiGLU
// MLP 3·h·f, where dq = q_heads·head_dim and dkv = kv_heads·head_dim. Training
// costs 2 FLOPs/param/token forward and 4 backward; full activation recompute
// (below) adds one more forward: 8·L·P_layer per token, plus the LM head
// 6·h·V (not recomputed). alpha2 = that / (peak · kGemmEfficiency).
// Causal attention forward is 2·s²·dq per layer (QKᵀ and PV, 2·s²·dq each,
// halved by the mask); backward ≈ 2.5× forward, recompute 1× forward:
// 9·L·dq·s² FLOPs, so alpha1 = 9·L·dq / (peak · e_max) (e_max: see v2 below).
// Full (bidirectional) attention doubles it, which is the (1 + eta) factor.
//
// Communication. Ring attention moves every K and V block (2·dkv bf16 values
// per token per layer) d-1 times per pass; the passes are forward, recompute
// forward, and backward (K/V again plus dK/dV): alpha3 = 4 · L · 2·dkv · 2 bytes.
// beta1 = L · 3 passes · kKernelsPerLayerPass · kLaunchS (launch + sync),
// beta2 = L · 4 passes · kRingStepLatencyS (P2P handshakes of a ring step).
//
// Cost model v2 (docs/design.md §2). Attention kernels run at efficiency
// e_max · n / (n + h) on chunks of n tokens; the two published points of a
// FlashAttention-3-class H100 curve (~30% of peak at 512 tokens, ~62% at 16k,
// causal) give h = 584 tokens and e_max = 0.642, so alpha1 uses e_max and the
// h·s term carries the short-chunk loss. Every ring step pays one P2P latency
// per pass (4 passes per layer, as alpha3): gamma = L · 4 · latency, with the
// link latency of NVLink/HCCS inside a node and of IB/RoCE across nodes.
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
// to the model states; its compute runs per image before CP and is modelled
// by the simulator, not by the planner's alpha terms.
#include "fcp/presets.h"

#include <algorithm>

namespace fcp {
namespace {

// Effective efficiencies of the calibrated simulator (docs/calibration.md):
// the fraction of peak at which `fcp profile --target sim:h100-8x8 --model
// llama3-8b` fits alpha2 (GEMMs incl. elementwise and launch overhead, 8k-row
// groups) and alpha1 (FlashAttention-3 forward + backward curves, causal).
constexpr double kGemmEfficiency = 0.58;
constexpr double kKernelsPerLayerPass = 10;
constexpr double kLaunchS = 5e-6;
constexpr double kRingStepLatencyS = 15e-6;
constexpr double kFrameworkReserveBytes = 3e9;
// Cost model v2: attention efficiency curve e_max·n/(n + h) through the two
// published FlashAttention-3 points (512 tokens: 0.30, 16384 tokens: 0.62).
constexpr double kAttnEffShortTokens = 512, kAttnEffShort = 0.30;
constexpr double kAttnEffLongTokens = 16384, kAttnEffLong = 0.62;
constexpr double kP2pLatencyIntraS = 5e-6;   // NVLink / HCCS message latency
constexpr double kP2pLatencyInterS = 15e-6;  // InfiniBand / RoCE message latency

ModelPreset Llm(const char* name, int layers, int hidden, int q_heads,
                int kv_heads, int head_dim, int ffn, int64_t vocab) {
  ModelPreset m;
  m.shape = ModelShape{name, layers, hidden, q_heads, kv_heads, head_dim, ffn, vocab, 0, 0};
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

double LayerParams(const ModelShape& s) {
  const double dq = static_cast<double>(s.q_heads) * s.head_dim;
  const double dkv = static_cast<double>(s.kv_heads) * s.head_dim;
  return s.hidden * (dq + 2 * dkv) + dq * s.hidden + 3.0 * s.hidden * s.ffn;
}

}  // namespace

int64_t ModelPreset::params() const {
  return static_cast<int64_t>(shape.layers * LayerParams(shape) +
                              2.0 * shape.hidden * static_cast<double>(shape.vocab));
}

int64_t ModelPreset::vision_params() const {
  // ViT layer: 4h² attention + 8h² MLP (4h FFN).
  return static_cast<int64_t>(12.0 * shape.vision_layers * shape.vision_hidden *
                              static_cast<double>(shape.vision_hidden));
}

const std::vector<ModelPreset>& ModelPresets() {
  // Text models: Qwen3 and Llama 3 model cards (layers/hidden/q/kv/head_dim/ffn/vocab).
  static const std::vector<ModelPreset> presets = [] {
    const ModelPreset qwen3_1_7b = Llm("qwen3-1.7b", 28, 2048, 16, 8, 128, 6144, 151936);
    const ModelPreset qwen3_4b = Llm("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936);
    const ModelPreset qwen3_8b = Llm("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936);
    // InternVL backbones: Qwen2.5-1.5B / 3B / 7B; vision InternViT-300M (24 x 1024),
    // 256 tokens per 448² tile. Qwen3-VL: Qwen3 backbones, ≈98 tokens per 448²
    // frame pair (pair-merged in time).
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
        // Llama 3 paper (arXiv 2407.21783) Table 3; Qwen3-32B model card (config.json).
        Llm("llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256),
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

CostModel DeriveCostModel(const ModelPreset& model, const ClusterPreset& cluster) {
  const ModelShape& s = model.shape;
  const double dq = static_cast<double>(s.q_heads) * s.head_dim;
  const double dkv = static_cast<double>(s.kv_heads) * s.head_dim;
  const double layers = s.layers;

  CostModel cm;
  // v2: h and e_max from the two points of e(n) = e_max·n/(n + h):
  // r = e(L)/e(S) = L(S + h) / (S(L + h))  =>  h = L·S·(r - 1) / (L - r·S).
  const double r = kAttnEffLong / kAttnEffShort;
  const double h = kAttnEffLongTokens * kAttnEffShortTokens * (r - 1) /
                   (kAttnEffLongTokens - r * kAttnEffShortTokens);
  const double attn_eff_max = kAttnEffShort * (kAttnEffShortTokens + h) / kAttnEffShortTokens;
  // At efficiency e_max·n/(n + h) on chunks of n = s/d tokens, s²/d of work
  // takes (s²/d + h·s) / e_max: alpha1 at e_max, plus the h·s term.
  cm.alpha1 = 9.0 * layers * dq / (cluster.peak_flops * attn_eff_max);
  cm.attn_overhead_tokens = h;
  cm.gamma_intra = layers * 4 * kP2pLatencyIntraS;
  cm.gamma_inter = layers * 4 * kP2pLatencyInterS;
  const double linear_flops_per_token =
      8.0 * layers * LayerParams(s) + 6.0 * s.hidden * static_cast<double>(s.vocab);
  cm.alpha2 = linear_flops_per_token / (cluster.peak_flops * kGemmEfficiency);
  cm.beta1 = layers * 3 * kKernelsPerLayerPass * kLaunchS;
  cm.alpha3 = 4.0 * layers * 2.0 * dkv * 2.0;
  cm.beta2 = layers * 4 * kRingStepLatencyS;
  cm.bw_intra_node = cluster.bw_intra_node;
  cm.bw_inter_node = cluster.bw_inter_node;
  cm.mem_per_token =
      2.0 * layers * s.hidden + 2.0 * (4.0 * s.hidden + 2 * dq + 2 * dkv + 4.0 * s.ffn);
  const double params =
      static_cast<double>(model.params()) + static_cast<double>(model.vision_params());
  cm.mem_static = 4.0 * params + 12.0 * params / std::max(1, cluster.num_ranks) +
                  kFrameworkReserveBytes;
  cm.mem_capacity = cluster.mem_bytes;
  return cm;
}

}  // namespace fcp
