// Built-in model and cluster presets (docs/design.md §6): the facts about
// models and hardware that the cost model, the simulator and the baselines all
// use, and the derivation of default cost coefficients from FLOP counts and
// those hardware figures. Where each figure comes from is documented in
// src/presets/presets.cc and docs/simulator.md. Thread-safe (immutable data).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fcp/types.h"

namespace fcp {

struct ClusterPreset {
  std::string name;
  int num_ranks = 0;
  int ranks_per_node = 0;
  double peak_flops = 0;     // dense bf16 FLOP/s per rank
  double mem_bytes = 0;      // device memory per rank
  double bw_intra_node = 0;  // bytes/s, P2P within a node (per direction)
  double bw_inter_node = 0;  // bytes/s, P2P across nodes (per rank)
  // --- measured or published hardware figures (docs/simulator.md) ---
  double hbm_bytes_per_s = 3.2e12;  // sustained device-memory bandwidth
  double latency_intra_s =
      8e-6;  // per P2P message / collective step, in a node
  double latency_inter_s = 20e-6;  // the same across nodes
  double launch_s = 8e-6;          // per kernel launch (host + device gap)
  // Sustained efficiency (fraction of peak_flops) of kernels of the size a
  // rank runs: eff(n) = max · n / (n + half), n = rows (GEMM) or query
  // tokens of one attention block. Attention: FlashAttention-3 style kernels;
  // forward and backward on their own curves, both without a causal mask; a
  // causal block of n tokens is slower by 1 + causal_gain ·
  // (n/512)^-causal_exponent.
  double gemm_eff_max = 0.63;
  double gemm_eff_half_rows = 256;
  double attn_fwd_eff_max = 0.676;
  double attn_fwd_half_tokens = 209;
  double attn_bwd_eff_max = 0.598;
  double attn_bwd_half_tokens = 427;
  double attn_causal_gain = 0.594;
  double attn_causal_exponent = 0.794;
};

// An MLLM's vision encoder: ViT patches per LLM vision token (the 2×2 merge)
// and per 448² tile of 14² patches (full attention inside a tile).
inline constexpr int kVisionPatchesPerToken = 4;
inline constexpr int kVisionPatchesPerTile = 1024;

struct ModelPreset {
  ModelShape shape;
  bool multimodal = false;
  int vision_tokens_per_tile =
      0;                   // LLM tokens per 448² image tile / frame pair
  int64_t params() const;  // backbone parameters incl. embeddings
  int64_t vision_params() const;  // vision encoder parameters (0 for LLMs)
};

const std::vector<ModelPreset>& ModelPresets();
const std::vector<ClusterPreset>& ClusterPresets();
// nullptr when unknown.
const ModelPreset* FindModelPreset(std::string_view name);
const ClusterPreset* FindClusterPreset(std::string_view name);

inline constexpr std::string_view kDefaultCluster = "ascend910c-4x16";
inline constexpr std::string_view kDefaultModel = "qwen3-8b";

// Default coefficients for `model` trained on `cluster` (see presets.cc for the
// FLOP/byte derivation, recompute policy and sharding assumed); an MLLM's
// vision encoder trained, or frozen (forward only) with `vision_frozen`.
CostModel DeriveCostModel(const ModelPreset& model,
                          const ClusterPreset& cluster,
                          bool vision_frozen = false);

}  // namespace fcp
