// Static-degree baselines: `megatron` (ring CP, one degree, DP replicas) and
// `deepspeed` (Ulysses all-to-all, degree dividing N and q_heads).
// Sequences are dealt to the DP replicas by work and packed into micro-batches
// (planner/balanced_static.h, the yardstick) unless PlanOptions::dealing is
// kLoader (data-loader order, baselines/common.h StaticDataParallelPlan).
// Without --cp the degree is tuned: every allowed degree that holds the
// longest sequence is planned and the one with the smallest estimated
// makespan is kept (notes: cp_degree, cp_degree_source, cp_degree_candidates).
// --cp C outside the allowed set throws InputError("cp_degree"); a sequence
// that does not fit on C ranks yields a kInfeasible plan naming it.
// Thread-safety: stateless.
#pragma once

#include <vector>

#include "fcp/scheduler.h"

namespace fcp::baselines {

// Allowed degrees: divisors of N (megatron); divisors of both N and q_heads
// (deepspeed). Ascending.
std::vector<int> MegatronDegrees(int num_ranks);
std::vector<int> UlyssesDegrees(int num_ranks, int q_heads);

class MegatronStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "megatron"; }
  Setting setting() const override { return Setting::kCpDegree; }
  std::vector<int64_t> SettingCandidates(
      const PlanRequest& request) const override;
  std::string_view description() const override {
    return "Megatron-LM static ring CP: one degree (divisor of N), DP "
           "replicas, "
           "sequences dealt by work (--dealing loader: data-loader order)";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

class DeepSpeedStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "deepspeed"; }
  Setting setting() const override { return Setting::kCpDegree; }
  std::vector<int64_t> SettingCandidates(
      const PlanRequest& request) const override;
  std::string_view description() const override {
    return "DeepSpeed-Ulysses static SP: one degree dividing N and the head "
           "count, all-to-all, sequences dealt by work (--dealing loader: "
           "data-loader order)";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
