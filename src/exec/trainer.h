// The training loop of fcp-train: a byte-level text corpus, a cost model for
// this CPU, the planner one global batch ahead on a background thread of rank
// 0 with the plan broadcast to every rank, the executor, and AdamW.
//
// Why broadcast rather than plan deterministically everywhere: strategies may
// depend on wall-clock (MILP time limits) or thread timing, so identical
// inputs need not give identical plans on every rank; one planner and a
// broadcast of a few hundred integers is always consistent, and it leaves
// the other ranks' cores to compute. Thread-safety: one thread per rank
// drives a Trainer; the planner thread only calls MakePlan on copied inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/comm_cache.h"
#include "exec/communicator.h"
#include "exec/executor.h"
#include "exec/model.h"
#include "fcp/profiler.h"
#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp::exec {

// Regular files under a directory (recursive, sorted by path), byte-level:
// a file's size is its sequence length (capped at max_len).
struct TextCorpus {
  std::vector<std::string> paths;
  std::vector<int64_t> sizes_bytes;
};
// Throws InputError("data_dir", ...) when the directory has no file of at
// least `min_bytes` bytes.
TextCorpus ListCorpus(const std::string& dir, int64_t min_bytes = 16);

// A corpus with the given sequence lengths (e.g. real token counts, so that
// the length mix is a real one) whose bytes are real text: sequence i is the
// first `lengths[i]` bytes of a file of `text` at least that long (files
// taken in turn among those long enough); a length above the longest file is
// cut to it. Throws InputError("lengths", ...) when `lengths` is empty.
TextCorpus LengthsCorpus(const std::vector<int64_t>& lengths,
                         const TextCorpus& text);

// Indices of the files of global batch `step` (a seeded sample without
// replacement, the same on every rank).
std::vector<int> BatchFiles(const TextCorpus& corpus, int step, int gbs,
                            uint64_t seed);
// Reads the first min(size, max_len) bytes of each file; all causal.
GlobalBatch LoadBatch(const TextCorpus& corpus, const std::vector<int>& files,
                      int64_t max_len);

// Coarse cost model of this executor on a CPU, from FLOP counts and assumed
// rates (documented in trainer.cc and docs/executor.md): GEMM at
// `gemm_flops_per_s`, attention kernels at `attn_flops_per_s`, shared-memory
// MPI at `p2p_bytes_per_s`; memory from activation floats per token.
CostModel CpuCostModel(const ModelConfig& cfg, double mem_capacity_bytes,
                       double gemm_flops_per_s = 8e9,
                       double attn_flops_per_s = 3e9,
                       double p2p_bytes_per_s = 2e9);

// CpuCostModel with alpha1/alpha2 fitted on this machine: times the
// executor's forward+backward of one whole sequence (degree 1) at two lengths
// and solves t(s) = alpha1·s² + alpha2·s + beta1 (beta1 from CpuCostModel).
// Takes about a second for the default model. Not collective; call on one
// rank and broadcast (Trainer does) so that every rank plans alike.
CostModel CalibrateCpuCostModel(const ModelConfig& cfg,
                                double mem_capacity_bytes);

struct TrainOptions {
  ModelConfig model;
  AdamWOptions adam;
  std::string strategy = "fcp";   // any registered strategy
  int cp_degree = 0;              // megatron/deepspeed fixed degree (0 = tune)
  std::optional<CostModel> cost;  // default: see `calibrate`
  bool calibrate = false;         // no `cost`: fit on rank 0 (true) or
                                  // derive from FLOPs (false)
  double mem_capacity_bytes = 256.0 * (1 << 20);
  int64_t max_len = 512;  // tokens (bytes) per sequence, cap
  int gbs = 16;           // sequences per global batch
  int steps = 10;
  uint64_t seed = 1;
  bool async_planning = true;  // plan step k+1 while step k runs
  // Learn from measured steps (RecalibrateCostModel): after each step every
  // group's measured time (its slowest rank's forward/backward) refines the
  // planner's timing coefficients; with async planning a step's times reach
  // the plan of the step after next.
  bool learn = false;
  AttentionKernels kernels = AttentionKernels::kFast;
  // Called on every rank at the start of each step's compute (fault
  // injection in tests; fcp-train's --die-at). May not return.
  std::function<void(int rank, int step)> on_step_start;
  // Called on every rank whenever the step makes progress (start, plan
  // received, gradients reduced, optimizer done): the watchdog's marks.
  std::function<void(int step)> on_progress;
};

// Error naming the field, or nullopt.
std::optional<std::string> ValidateTrainOptions(const TrainOptions& o);

// Everything about a configuration that can be known before training, on any
// rank without communication (every rank gets the same answer): the options,
// the memory of the model states and of the longest sequence the corpus can
// give on `world_size` ranks, and the strategy's plan of global batch 0 with
// the cost model the run will use (a fitted model only changes compute
// coefficients, not feasibility). Returns "field: what" or nullopt.
std::optional<std::string> PreflightCheck(const TrainOptions& o,
                                          const TextCorpus& corpus,
                                          int world_size);

// A failure every rank raises together at the same step (the planner's
// reason is broadcast), so the job can end cleanly without MPI_Abort.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StepReport {
  int step = 0;
  double loss = 0;            // mean per-token CE of the global batch (nats)
  double wall_s = 0;          // whole step on this rank, incl. planning wait
  double plan_s = 0;          // planner wall time for this step's plan
  double plan_visible_s = 0;  // time rank 0 waited for the plan
  double plan_hidden_s = 0;   // plan_s - plan_visible_s (overlapped)
  double est_ms = 0;          // planner's estimate for the step
  double group_setup_s = 0;   // CommCache::Acquire time this step
  int64_t global_tokens = 0;
  std::string layout;  // "[3,1] [2u,2u]": degrees per micro-batch
                       // (u: all-to-all group)
  // RMS of ln(estimate / measured) over this step's groups, the estimates
  // under the coefficients the step was planned with (learn only; else -1).
  double group_error_rms = -1;
  int learnt_groups = 0;  // learn: measured groups learnt from so far
  CommCacheStats cache;   // cumulative, this rank
};

class Trainer {
 public:
  // Collective over `world`. Throws InputError for bad options (on every
  // rank alike, before any communication).
  Trainer(Communicator& world, TrainOptions options, TextCorpus corpus);
  ~Trainer();
  // Runs global batch `step` (0-based, consecutive). Collective.
  StepReport Step(int step);
  const std::vector<float>& params() const { return params_; }
  // The cost model the planner uses (identical on every rank).
  const CostModel& cost() const { return cost_; }

 private:
  struct Planned {
    Plan plan;
    CostModel cost;  // the coefficients it was planned with
    double plan_s = 0;
  };
  PlanRequest RequestFor(int step, const CostModel& cost) const;
  Planned PlanFor(int step, const CostModel& cost) const;
  // learn: gathers every rank's micro-batch times, learns from the groups of
  // `plan` (planned with `planned_with`) and shares the new coefficients.
  // Collective.
  void LearnFrom(int step, const Plan& plan, const CostModel& planned_with,
                 const std::vector<double>& micro_batch_s, StepReport& rep);

  Communicator& world_;
  TrainOptions opt_;
  TextCorpus corpus_;
  CostModel cost_;
  std::optional<CoefficientLearner> learner_;  // learn: rank 0
  ParamLayout layout_;
  std::vector<float> params_;
  std::vector<float> grads_;
  AdamW adam_;
  CommCache cache_;
  std::future<Planned> pending_;  // rank 0: plan of step pending_step_
  int pending_step_ = -1;
};

}  // namespace fcp::exec
