// `megatron-dcp`: Megatron-Core's hybrid (dynamic) context-parallel scheduler,
// ported rule by rule from megatron-core 0.16.1
// (megatron/core/pipeline_parallel/hybrid_cp_schedule.py, BalancedCPScheduler;
// driven per global batch by megatron/core/datasets/data_schedule.py,
// HybridCPDataLoaderWrapper). docs/baselines.md cites the function of every
// rule. Its one setting, max_seqlen_per_dp_cp_rank, is tuned per batch like
// the static degrees (smallest estimate among the candidates).
// Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::baselines {

// One barrier-delimited step of the hybrid-CP schedule ("hdp group"): CP
// groups on disjoint contiguous ranks, each running its sequences one after
// another (one forward/backward per sequence).
struct DcpCpGroup {
  int first_rank = 0;
  int size = 0;
  std::vector<int> sequences;  // in execution order
};
struct DcpSchedule {
  int infeasible_sequence =
      -1;  // >= 0: needs more than N ranks at this setting
  std::vector<std::vector<DcpCpGroup>> steps;
  double est_s = 0;  // Σ_steps max_groups Σ_sequences T({s}, size) (cost model)
  int64_t placements =
      0;              // sequence placements including re-placements after trims
  int64_t trims = 0;  // sequences trimmed back to the leftovers
  int64_t expansions = 0;  // group doublings that filled idle ranks
};

// The schedule Megatron-Core builds for `request` with
// max_seqlen_per_dp_cp_rank = `max_seqlen_per_rank` tokens (>= 1).
// O((K + trims) log K + steps · log N · log K + expansions · log N); trims are
// capped at K + 64 (then trimming stops), so the whole is O(K log K + N log N)
// per step.
// `longest_first` (optional) is the batch's indices sorted by length,
// descending, stable (LongestFirst), to share the sort across settings.
DcpSchedule ScheduleHybridCp(const PlanRequest& request,
                             int64_t max_seqlen_per_rank,
                             const std::vector<int>* longest_first = nullptr);
std::vector<int> LongestFirst(const PlanRequest& request);

// The candidates tuned over: the memory limit T_mem = floor((mem_capacity -
// mem_static) / mem_per_token) and, for every power of two p <= N,
// ceil(s_max / p) and floor(T_mem / p), all clipped to [1, T_mem]; ascending,
// distinct.
std::vector<int64_t> DcpMaxSeqlenCandidates(const PlanRequest& request);

class MegatronDcpStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "megatron-dcp"; }
  Setting setting() const override { return Setting::kMaxSeqlenPerRank; }
  std::vector<int64_t> SettingCandidates(
      const PlanRequest& request) const override {
    return DcpMaxSeqlenCandidates(request);
  }
  std::string_view description() const override {
    return "Megatron-Core hybrid CP (BalancedCPScheduler): power-of-two CP per "
           "sequence from max_seqlen_per_dp_cp_rank (tuned), 5% balance, idle "
           "ranks filled; a group's sequences run one after another";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

// `megatron-dcp-dev`: Megatron-LM dev's packing-aware Dynamic-CP scheduler
// (DefaultDynamicCPScheduler, next_hdp_group_packing_aware; checked at dev
// commit d48bd6be0a85). Each step is one micro-batch: CP groups tiling all N
// ranks, each packing several sequences into one THD forward/backward. Empty
// and *infeasible_sequence >= 0 when some sequence needs more than N ranks at
// this setting or does not fit alone on N ranks. O(M · K · G · log N) for M
// micro-batches, K sequences and G <= N groups per micro-batch (every
// micro-batch revisits the sequences left over, as Megatron does).
std::vector<std::vector<DcpCpGroup>> ScheduleDynamicCpDev(
    const PlanRequest& request, int64_t max_seqlen_per_rank,
    int* infeasible_sequence);

class MegatronDcpDevStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "megatron-dcp-dev"; }
  Setting setting() const override { return Setting::kMaxSeqlenPerRank; }
  std::vector<int64_t> SettingCandidates(
      const PlanRequest& request) const override {
    return DcpMaxSeqlenCandidates(request);
  }
  std::string_view description() const override {
    return "Megatron-LM dev's packing-aware Dynamic-CP "
           "(DefaultDynamicCPScheduler): "
           "power-of-two CP groups packing sequences up to "
           "max_seqlen_per_dp_cp_rank "
           "(tuned) per rank, 5% workload cap, idle ranks filled";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override;
};

}  // namespace fcp::baselines
