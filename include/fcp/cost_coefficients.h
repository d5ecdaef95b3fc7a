// The one list of the cost model's coefficients (docs/design.md §2): name,
// unit, meaning, whether it is a cost-model-v2 term and whether `fcp profile`
// fits it. The cost_model JSON reader and writer, the validator, the
// profiler's fit vector, the Python bindings and Python's fcp.CostModel all
// iterate this table; nothing else lists the fields.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "fcp/types.h"

namespace fcp {

struct CostCoefficient {
  std::string_view name;      // the cost_model JSON key and the CostModel field
  double CostModel::*member;  // the field
  std::string_view unit;
  std::string_view meaning;
  bool v2;  // a cost-model-v2 term: 0 is the paper's model
  bool
      fitted;  // a timing coefficient `fcp profile` fits (and --learn rescales)
  bool positive;  // must be > 0 (else >= 0)
};

// In the order of the cost_model JSON `fcp` writes.
inline constexpr CostCoefficient kCostCoefficients[] = {
    {"alpha1", &CostModel::alpha1, "s/token^2",
     "attention compute (fwd+bwd, all layers), causal", false, true, false},
    {"alpha2", &CostModel::alpha2, "s/token",
     "linear compute (projections, MLP, norms, loss)", false, true, false},
    {"beta1", &CostModel::beta1, "s", "fixed cost per group per micro-batch",
     false, true, false},
    {"alpha3", &CostModel::alpha3, "bytes/token",
     "ring KV traffic per token of the group per step", false, true, false},
    {"beta2", &CostModel::beta2, "s",
     "fixed communication cost of a group with d > 1", false, true, false},
    {"bw_intra_node", &CostModel::bw_intra_node, "bytes/s",
     "P2P bandwidth, group within one node", false, false, true},
    {"bw_inter_node", &CostModel::bw_inter_node, "bytes/s",
     "P2P bandwidth, group spanning nodes", false, false, true},
    {"mem_per_token", &CostModel::mem_per_token, "bytes/token",
     "activation memory per token", false, false, false},
    {"mem_static", &CostModel::mem_static, "bytes", "per-rank model states",
     false, false, false},
    {"mem_capacity", &CostModel::mem_capacity, "bytes",
     "per-rank device memory", false, false, true},
    {"attn_overhead_tokens", &CostModel::attn_overhead_tokens, "tokens",
     "short-chunk attention overhead h", true, true, false},
    {"gamma_intra", &CostModel::gamma_intra, "s",
     "latency of one ring step, group on one node", true, true, false},
    {"gamma_inter", &CostModel::gamma_inter, "s",
     "latency of one ring step, group spans nodes", true, true, false},
    {"gamma_serial", &CostModel::gamma_serial, "s",
     "per ring step, on the critical path (kernel launches)", true, true,
     false},
    {"alpha3_home", &CostModel::alpha3_home, "bytes/token",
     "ring traffic per token of a rank's share after the last attention step "
     "(dKV home), never hidden",
     true, true, false},
    {"ring_tail_steps", &CostModel::ring_tail_steps, "steps",
     "steps of a ring whose attention hides no transfer, in [0, 1]", true,
     false, false},
    {"alpha2_vision", &CostModel::alpha2_vision, "s/token",
     "vision encoder and projector per LLM vision token (MLLMs), on top of "
     "alpha2",
     true, true, false},
};

inline constexpr size_t kNumCostCoefficients = std::size(kCostCoefficients);

// How many coefficients are fitted (the timing coefficients).
constexpr size_t CountFittedCoefficients() {
  size_t n = 0;
  for (const CostCoefficient& c : kCostCoefficients) n += c.fitted ? 1 : 0;
  return n;
}
inline constexpr size_t kNumFittedCoefficients = CountFittedCoefficients();

// The fitted coefficients, in table order (the profiler's fit vector).
constexpr std::array<const CostCoefficient*, kNumFittedCoefficients>
FittedCoefficients() {
  std::array<const CostCoefficient*, kNumFittedCoefficients> out{};
  size_t i = 0;
  for (const CostCoefficient& c : kCostCoefficients)
    if (c.fitted) out[i++] = &c;
  return out;
}

// The entry named `name`, or nullptr.
constexpr const CostCoefficient* FindCostCoefficient(std::string_view name) {
  for (const CostCoefficient& c : kCostCoefficients)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace fcp
