// `bytescale` (ByteScale-style data-aware sharding) and the per-sequence
// power-of-two CP size that `flexsp` shares. See docs/baselines.md for the
// exact rules. Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::baselines {

// Megatron-DCP's per-sequence degree: the next power of two >= ceil(s / T)
// with T = floor((mem_capacity - mem_static) / mem_per_token) tokens per rank.
int64_t DcpDegree(const CostModel& cm, int64_t length_tokens);

// ByteScale's candidate per-rank capacities C (tokens), largest first.
std::vector<int64_t> ByteScaleCapacityCandidates(const PlanRequest& request);

class ByteScaleStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "bytescale"; }
  Setting setting() const override { return Setting::kCapacityTokens; }
  std::vector<int64_t> SettingCandidates(
      const PlanRequest& request) const override {
    return ByteScaleCapacityCandidates(request);
  }
  std::string_view description() const override {
    return "ByteScale: data-aware sharding (each sequence on the fewest ranks "
           "that "
           "hold it, short ones packed per rank) + balance scheduler (list "
           "scheduling, ranks run different numbers of micro-batches)";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
