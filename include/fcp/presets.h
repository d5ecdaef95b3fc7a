// Built-in model and cluster presets (DESIGN.md §6) and the derivation of
// default cost coefficients from FLOP counts and hardware figures. The
// derivation is documented in src/presets/presets.cc. Thread-safe (immutable data).
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
};

struct ModelPreset {
  ModelShape shape;
  bool multimodal = false;
  int vision_tokens_per_tile = 0;  // LLM tokens per 448² image tile / frame pair
  int64_t params() const;            // backbone parameters incl. embeddings
  int64_t vision_params() const;     // vision encoder parameters (0 for LLMs)
};

const std::vector<ModelPreset>& ModelPresets();
const std::vector<ClusterPreset>& ClusterPresets();
// nullptr when unknown.
const ModelPreset* FindModelPreset(std::string_view name);
const ClusterPreset* FindClusterPreset(std::string_view name);

inline constexpr std::string_view kDefaultCluster = "ascend910c-4x16";
inline constexpr std::string_view kDefaultModel = "qwen3-8b";

// Default coefficients for `model` trained on `cluster` (see presets.cc for the
// FLOP/byte derivation, recompute policy and sharding assumed).
CostModel DeriveCostModel(const ModelPreset& model, const ClusterPreset& cluster);

}  // namespace fcp
