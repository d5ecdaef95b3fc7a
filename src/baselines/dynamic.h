// Dynamic baselines without a solver: `megatron-dcp` (Megatron-Core dynamic
// / hybrid CP) and `bytescale` (ByteScale-style data-aware sharding). See
// docs/baselines.md for the exact rules. Thread-safety: stateless.
#pragma once

#include <cstdint>

#include "fcp/scheduler.h"

namespace fcp::baselines {

// Megatron-DCP's per-sequence degree: the next power of two >= ceil(s / T)
// with T = floor((mem_capacity - mem_static) / mem_per_token) tokens per rank.
int64_t DcpDegree(const CostModel& cm, int64_t length_tokens);

class MegatronDcpStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "megatron-dcp"; }
  std::string_view description() const override {
    return "Megatron-Core dynamic CP: per-sequence power-of-two CP, longest first, "
           "least-loaded group, idle ranks filled";
  }
  Plan Solve(const PlanRequest& request, const PlanOptions& options) const override;
};

class ByteScaleStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "bytescale"; }
  std::string_view description() const override {
    return "ByteScale-style: each long sequence on the fewest ranks it needs, short "
           "ones balanced greedily";
  }
  Plan Solve(const PlanRequest& request, const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
