// Executes a Plan (fcp::Plan from the planner) on a world of ranks: per
// micro-batch, this rank finds its CP group, gets the group communicator from
// the cache, takes its zigzag shard and runs the model's forward/backward with
// ring attention; gradients accumulate locally over the micro-batches and are
// all-reduced once per global batch, with the per-token loss normalised over
// the whole global batch.
// Thread-safety: one thread per rank; functions taking `world` are collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/comm_cache.h"
#include "exec/communicator.h"
#include "exec/model.h"
#include "fcp/types.h"

namespace fcp::exec {

// A global batch: byte sequences (length >= 1) and their masks.
struct GlobalBatch {
  std::vector<std::vector<uint8_t>> sequences;
  // Mask factor per sequence in [0, 1]: 0 causal, 1 full, between: a
  // bidirectional prefix over a causal rest (dispatch.h says which).
  std::vector<double> eta;
  std::vector<int64_t> lengths() const;
  // Next-token targets of the whole batch: Σ (len - 1).
  int64_t num_targets() const;
};

// "" when `plan` can be executed on `num_ranks` ranks for `num_sequences`
// sequences (every sequence in exactly one group, groups of a micro-batch on
// disjoint ranks in [0, num_ranks), no empty group, status ok); else the
// first violation, naming the field ("micro_batches[1].groups[0].ranks").
// `q_heads` > 0: an all-to-all group must also have a degree dividing the
// query heads (no runtime pads heads; the planners never emit the others).
std::string CheckExecutablePlan(const Plan& plan, int num_ranks,
                                int num_sequences, int q_heads = 0);

// A random plan that passes CheckExecutablePlan: 1..max_micro_batches
// micro-batches, random group sizes, random rank order, idle ranks allowed.
Plan RandomValidPlan(int num_sequences, int num_ranks, uint64_t seed,
                     int max_micro_batches = 3);

// One group holding every sequence, on rank 0, one micro-batch.
Plan SingleRankPlan(int num_sequences);

// Plan <-> flat integers, for MPI broadcast (micro-batches, groups' ranks
// and sequences, status; estimates and notes are not carried).
std::vector<int64_t> EncodePlan(const Plan& plan);
Plan DecodePlan(const std::vector<int64_t>& code);

struct ExecStats {
  double loss_sum = 0;       // Σ CE over this rank's targets (nats)
  int64_t num_tokens = 0;    // tokens this rank processed
  double compute_s = 0;      // wall time in forward/backward
  double group_setup_s = 0;  // wall time in CommCache::Acquire
  // This rank's forward/backward wall time in each micro-batch of the plan
  // (s; 0 where it was idle): what learning from measured steps takes.
  std::vector<double> micro_batch_s;
};

// Runs every micro-batch of `plan` on this rank and adds
// (1/batch.num_targets()) · d(Σ CE)/dθ of its shards into `grads` (size
// layout.total); no all-reduce. Collective over `world`.
ExecStats AccumulateGradients(Communicator& world, CommCache& cache,
                              const ModelConfig& cfg, const ParamLayout& layout,
                              const float* params, const GlobalBatch& batch,
                              const Plan& plan, AttentionKernels kernels,
                              float* grads);

// AccumulateGradients + the global batch's single all-reduce (gradients and
// loss in one buffer). `grads` is resized and overwritten; returns the mean
// per-token loss of the global batch. Collective over `world`.
double GlobalGradients(Communicator& world, CommCache& cache,
                       const ModelConfig& cfg, const ParamLayout& layout,
                       const float* params, const GlobalBatch& batch,
                       const Plan& plan, AttentionKernels kernels,
                       std::vector<float>& grads, ExecStats* stats = nullptr);

// Single-process oracle: every sequence whole on one rank, reference
// attention kernels, no communicator. Returns the mean per-token loss.
double ReferenceGradients(const ModelConfig& cfg, const ParamLayout& layout,
                          const float* params, const GlobalBatch& batch,
                          std::vector<float>& grads);

}  // namespace fcp::exec
