// Experiments on the simulator: many global batches x strategies, each plan
// simulated (include/fcp/simulator.h) and aggregated per strategy; the engine
// of `fcp simulate` and of the evaluations (include/fcp/eval.h). Also the
// replay of plans made elsewhere (`fcp simulate --plan FILE`). Every figure
// is simulated.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/io.h"
#include "fcp/scheduler.h"
#include "fcp/simulator.h"
#include "fcp/types.h"

namespace fcp::sim {

// How a baseline's main setting (static CP degree, megatron-dcp's
// max_seqlen_per_dp_cp_rank, bytescale's capacity C) is tuned when not forced.
enum class Tuning {
  // Every candidate the strategy would try on any batch is run over the whole
  // experiment; the fastest on the measured batches is kept (a user who
  // sweeps the setting on their workload: the strongest yardstick).
  kHindsight,
  // The fastest on the warm-up batches, fixed for the run (a user who sets it
  // once before training).
  kWarmup,
};

struct ExperimentConfig {
  std::string dataset =
      "github";  // a DatasetNames() entry; ignored if lengths set
  std::vector<int64_t> lengths;    // real lengths to draw from (--lengths FILE)
  std::string model = "qwen3-8b";  // ModelPresets() name
  std::string cluster = "ascend910c-4x16";  // ClusterPresets() name
  int ranks = 0;               // 0 = the cluster preset's rank count
  int64_t global_batch = 512;  // sequences per global batch (>= 1)
  int steps = 10;              // measured global batches (>= 1)
  int warmup = 5;              // extra batches first, not measured: the
                               // warm-up pick of baselines' settings (>= 0)
  uint64_t seed = 1;           // batch i is drawn with seed + i
  std::vector<std::string> strategies = {"fcp", "fcp-paper", "megatron",
                                         "deepspeed"};
  bool vision_frozen = false;  // MLLMs: frozen vision encoder
  double noise_rel = 0;        // simulator noise (SimOptions::noise_rel)
  double time_limit_s = 10;    // PlanOptions::time_limit_s (flexsp)
  Dealing dealing =
      Dealing::kBalanced;  // PlanOptions::dealing (static baselines)
  std::optional<CostModel> cost_model;  // planner coefficients; default derived
  // Static strategies (megatron, deepspeed): 0 = tune the degree (`tune`);
  // > 0 = this degree, forced (must divide the ranks).
  int cp_degree = 0;
  // megatron-dcp's max_seqlen_per_dp_cp_rank and bytescale's capacity C
  // (tokens): 0 = tune like cp_degree (every candidate the strategy itself
  // would try, simulated; the fastest kept); > 0 = forced.
  int64_t max_seqlen_per_rank = 0;
  int64_t capacity_tokens = 0;
  // How unforced settings above are tuned (fcp simulate --tune); the warm-up
  // pick is reported beside the kept value either way.
  Tuning tune = Tuning::kHindsight;
  // Static strategies: sequences per micro-batch per replica (0 = as many as
  // fit in memory, the strategies' own packing).
  int micro_batch_sequences = 0;
  Recompute recompute = Recompute::kFull;
  bool overlap_grad_reduce = true;  // SimOptions::overlap_grad_reduce
  // With overlap, give the planners the step's gradient sync
  // (PlannerGradientSync): fcp then ranks its candidates by step time, not
  // makespan. false: makespan only (fcp simulate --makespan-only).
  bool planner_grad_sync = true;
  // The group-time spread the planners are told (PlanRequest::
  // group_time_sigma: fcp ranks its candidates by the expected step under
  // it); < 0: the simulator's own noise_rel, as a deployment that measured
  // its variability would. fcp simulate --planner-noise; --makespan-only: 0.
  double planner_noise = -1;
  // Give the planners the communicators the run has created so far and the
  // cost of a new one (PlanRequest::communicators: fcp charges new rank sets
  // in its ranking). false: fcp simulate --makespan-only.
  bool planner_communicators = true;
  // Replace the planner's memory coefficients by the simulator's own
  // (CalibrateMemory), as a profiled deployment would. Timing coefficients
  // are never taken from the simulator.
  bool calibrate_memory = true;
  // Learning from measured steps (fcp simulate --learn): after every step,
  // warm-up included, each strategy's coefficients are recalibrated
  // (RecalibrateCostModel, default options) from the ones above with every
  // group the strategy has run so far, timed by the simulator (noise
  // included), and the next step plans with them. The warm-up pick of a
  // baseline's setting uses the coefficients above; in hindsight, every
  // candidate's run learns as the kept one does.
  bool learn = false;
  // Planners outside the strategy registry, by the name their results carry
  // (`fcp eval study --search-s`'s local-search reference): each is called
  // instead of MakePlan with the step's request (the run's communicators
  // included) and the step's index (warm-up first), returns an evaluated plan
  // and is simulated like any strategy; it has no main setting to tune.
  // `strategies` may name them; a registered strategy's name may not be used.
  std::map<std::string,
           std::function<Plan(const PlanRequest& request, size_t step)>>
      extra_planners;
  // Progress lines (e.g. to stderr); may be empty.
  std::function<void(const std::string&)> progress;
  // Called with each strategy's first measured global batch: its plan, the
  // batch, the simulation (SimResult::group_spans: the timeline) and the
  // cluster's ranks per node. For traces and plots; may be empty.
  std::function<void(const Plan&, std::span<const Sequence>, const SimResult&,
                     int ranks_per_node)>
      on_first_measured_step;
  // Called with every measured and warm-up step's request and plan after the
  // tuning (for `fcp simulate --save-plans`); may be empty.
  std::function<void(const std::string& strategy, const PlanRequest&,
                     const Plan&)>
      on_plan;
};

// Asynchronous CPU scheduling (paper §4, "decoupling scheduling and
// training"): the plan of step i is computed while step i-1 runs. Step 0's
// solver time is exposed (nothing to hide behind). Summed over the measured
// steps by RunExperiment (src/eval/step_totals.h).
struct OverlapReport {
  double solver_s = 0;   // Σ solver time
  double hidden_s = 0;   // Σ min(solver_i, iter_{i-1})
  double exposed_s = 0;  // solver_s - hidden_s
  double hidden_fraction() const {
    return solver_s > 0 ? hidden_s / solver_s : 1.0;
  }
};
struct StrategyResult {
  std::string strategy;
  bool oom = false;  // some step's plan does not fit the simulated memory
  bool infeasible = false;  // the planner found no feasible plan
  std::string message;      // why, when oom or infeasible
  double iter_s = 0;        // mean simulated time per global batch
  double tokens_per_s = 0;  // Σ tokens / Σ iter_s
  double compute_s = 0;     // mean time until the last group ends
  double grad_sync_s = 0;   // mean gradient sync + optimizer
  double solver_ms = 0;  // mean planner wall time per global batch (measured)
  double solver_max_ms = 0;
  double schedule_ms = 0;    // solver + simulated communicator creation, mean
  double micro_batches = 0;  // mean micro-batches per global batch
  double busy_fraction = 0;  // mean
  int cp_degree = 0;         // tuned static degree (megatron/deepspeed), else 0
  std::string degree_candidates;  // "1:12.3s,2:10.1s,..." tried while tuning
  // The tuned (or forced) main setting of any strategy that has one: its
  // plan-note name (cp_degree, max_seqlen_per_dp_cp_rank, capacity_tokens)
  // and value; empty / 0 otherwise. `degree_candidates` lists its candidates.
  std::string setting_name;
  int64_t setting = 0;
  // How `setting` was chosen: "hindsight", "warm-up" or "forced"; and the
  // value the warm-up batches pick with its mean measured step (0 when it
  // did not run or was not measured).
  std::string tuning;
  int64_t warmup_setting = 0;
  double warmup_iter_s = 0;
  std::string first_micro_batch_mix;    // e.g. "<8>x1, <6>x2, <1>x4"
  std::map<int, int> degree_histogram;  // degree -> groups, all measured steps
  OverlapReport overlap;  // asynchronous scheduling over the measured steps
  std::vector<double> step_iter_s;
  std::map<std::string, double>
      speedup_vs;       // other strategy -> its iter / ours
  double vs_bound = 0;  // iter_s / ExperimentResult::lower_bound_s (>= 1)
};

struct ExperimentResult {
  ExperimentConfig config;  // with ranks resolved
  double mean_tokens_per_batch = 0;
  // Mean PhysicalLowerBoundS over the measured batches (simulated seconds).
  double lower_bound_s = 0;
  // The same with rings_only: no plan of ring groups only runs faster.
  double ring_lower_bound_s = 0;
  std::vector<StrategyResult> results;
};

// Runs the experiment: for each step, draws the global batch, plans it with
// every strategy (a baseline's main setting tuned per ExperimentConfig::tune:
// in hindsight by default, every candidate run and the fastest on the
// measured batches kept), simulates each plan and aggregates over the measured
// steps. Throws InputError naming the field for unknown
// dataset/model/cluster/strategy or bad counts. Not thread-safe only in that
// `progress` is called from the calling thread.
ExperimentResult RunExperiment(const ExperimentConfig& config);

// {"simulated": true, "config": {...}, "results": [...]} (README format).
std::string ExperimentToJson(const ExperimentResult& result, int indent = 2);
// A fixed-width text table, labelled simulated.
std::string ExperimentToTable(const ExperimentResult& result);

// "<8>x1, <6>x2" from degree -> count, largest degree first.
std::string DegreeMix(const std::map<int, int>& degree_counts);

// --- `fcp simulate --plan FILE`: plans made elsewhere ---
struct PlannedBatch {
  BatchInput batch;  // an `fcp plan` input
  Plan plan;         // its plan, estimates recomputed
};
// Parses a plan file: a JSON array, or JSON lines, of {"batch": <fcp plan
// input>, "plan": <fcp plan --format json output for it>}. Every pair is
// validated; errors name the field, e.g.
// "[3].plan.micro_batches[0].groups[2].ranks". All batches must share one
// cluster (ranks, ranks_per_node).
std::vector<PlannedBatch> ParsePlannedBatches(std::string_view text);
// One line of such a file for `request` and its `plan`.
std::string PlannedBatchToJson(const PlanRequest& request, const Plan& plan);
// Simulates the batches in order as one run, with RunExperiment's rules: the
// first config.warmup batches run but are not measured, one communicator
// cache, gradient sync per batch, noise seed config.seed·1000003 + i. The
// hardware, topology included, is config.model on config.cluster with
// config.ranks ranks (0: the batches'); a batch whose cluster differs in ranks
// or ranks per node is refused naming "[i].batch.cluster.…", and an
// all-to-all group whose degree does not divide the model's query heads
// naming "[i].plan.micro_batches[m].groups[g].comm". config.
// on_first_measured_step is called as RunExperiment calls it. The result has
// one entry, named "plan". MLLM vision tokens are estimated from eta (the
// batch format carries no vision tokens). Throws InputError.
ExperimentResult ReplayPlannedBatches(const std::vector<PlannedBatch>& batches,
                                      const ExperimentConfig& config);

}  // namespace fcp::sim
