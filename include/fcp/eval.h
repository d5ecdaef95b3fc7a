// The evaluations (`fcp eval paper|study|calibrate|noise|gap`): experiments
// that compare strategies, the simulator and the cost model against each other
// or against published figures, and write reports. This header is their index:
// it declares `eval paper` and `eval noise` and includes the headers of the
// other three, which are large enough to stand alone. Code: src/eval/.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "fcp/calibration.h"  // `fcp eval calibrate`
#include "fcp/experiment.h"   // the experiments the evaluations run
#include "fcp/gap_eval.h"     // `fcp eval gap`
#include "fcp/profiler.h"     // CostModel fitting (eval noise's base)
#include "fcp/study.h"        // `fcp eval study`
#include "fcp/types.h"

namespace fcp::sim {

// --- `fcp eval paper`: the paper's evaluation on the simulator ---
struct PaperEvalOptions {
  std::string out_dir;  // created if missing; report.md, *.csv, *.png go here
  bool quick = false;   // fewer steps, scaling only to 64 ranks (smoke test)
  uint64_t seed = 1;
  bool plots = true;  // PNGs via gnuplot (skipped with a note if missing)
  Dealing dealing =
      Dealing::kBalanced;  // static baselines' dealing (ExperimentConfig)
  Tuning tune =
      Tuning::kHindsight;  // baselines' settings (ExperimentConfig::tune)
  std::function<void(const std::string&)> progress;  // may be empty
};
// Runs Figures 3, 4, 5, 6, Tables 1, 2, 6 and the extreme case, writing
// markdown (report.md) with the paper's numbers beside ours, one CSV per
// figure/table and PNG charts. Returns the markdown. Throws InputError("out")
// when the directory cannot be created or written.
std::string RunPaperEval(const PaperEvalOptions& options);

}  // namespace fcp::sim

namespace fcp {

// --- `fcp eval noise`: robustness of plans to coefficient error ---
// (paper Tables 4-5). For each rank count and noise level p, every coefficient
// (alpha1, alpha2, beta1, alpha3, beta2) is multiplied by (1 + u),
// u ~ Uniform[-p, p] independently (seeded); the same batches are re-planned
// with MakePlan; a plan "matches" when its multiset of CP degrees (all groups,
// all micro-batches) equals the plan under the unperturbed coefficients; the
// step time of both plans is SIMULATED (fcp::sim::SimulatePlan, no noise).

// The timing coefficients `fcp eval noise` can perturb, in its draw order
// (names as in the cost_model JSON).
inline constexpr const auto& kNoiseCoefficients = kTimingCoefficients;

struct NoiseEvalOptions {
  std::string cluster = "ascend910c-4x16";
  std::string model = "qwen3-8b";
  std::string dataset = "github";  // fcp::SampleBatch dataset name
  int64_t batch_sequences = 512;   // sequences per global batch (paper GBS)
  int batches = 16;                // global batches per rank count
  int trials = 8;                  // perturbation draws per batch and level
  std::vector<int> rank_counts = {32, 64};
  std::vector<double> noise_levels = {0.05, 0.10, 0.20, 0.30, 0.50};
  std::string strategy = "fcp";
  uint64_t seed = 1;
  // Which of kNoiseCoefficients are perturbed; the others keep their base
  // value. Every trial draws one factor per coefficient whatever this says,
  // so runs that perturb different subsets see the same draws (an ablation).
  std::vector<std::string> perturb{std::begin(kNoiseCoefficients),
                                   std::end(kNoiseCoefficients)};
  // All perturbed coefficients take the first draw's factor (one common
  // error instead of independent ones).
  bool common_factor = false;
  // Base ("fitted") coefficients; when unset they are fitted with RunProfile
  // on sim:<cluster> for the model (the default profile grid).
  std::optional<CostModel> base;
  // The planner plans against mem_capacity·(1 - mem_headroom): its memory
  // model (docs/design.md §2) and the simulator's differ slightly, and a plan
  // that fills memory exactly can be an OOM in the simulator. Batches whose
  // base plan still OOMs are skipped (NoiseEvalRow::batches counts the used
  // ones).
  double mem_headroom = 0.02;
  // PlanRequest::group_time_sigma of every plan, base and perturbed (fcp
  // ranks by the expected step under it: a hedge that trades unperturbed
  // speed for robustness; base_step_s shows the price).
  double group_time_sigma = 0;
  // Learning from measured steps (RecalibrateCostModel): before each plan,
  // base and perturbed, the planner runs this many other batches of the
  // dataset (the same ones for every plan), times their groups in the
  // simulator and recalibrates its coefficients from them. 0: plans as given.
  int feedback_steps = 0;
  RecalibrationOptions recalibration;
};

struct NoiseEvalRow {
  int ranks = 0;
  double noise = 0;     // p (fraction)
  int batches = 0;      // batches whose base plan ran (not OOM, feasible)
  int plans = 0;        // batches × trials
  double cp_match = 0;  // fraction of plans with an unchanged degree multiset
  double time_change_mean =
      0;  // mean of (t_perturbed - t_base) / t_base (simulated)
  double time_change_max = 0;
  double base_step_s = 0;  // mean simulated step of the unperturbed plans (s)
  double paper_time_change =
      -1;  // paper Table 4/5 (fraction), -1 when not reported
  double paper_cp_match = -1;
};

struct NoiseEvalReport {
  NoiseEvalOptions options;
  CostModel base;
  std::vector<NoiseEvalRow> rows;
  double wall_s = 0;
};

// Throws InputError naming the field for bad options (unknown preset/dataset,
// counts < 1, noise outside [0, 0.95], ranks above the cluster's).
NoiseEvalReport RunNoiseEval(const NoiseEvalOptions& options);
std::string NoiseEvalToJson(const NoiseEvalReport& report, int indent = 2);
std::string NoiseEvalToTable(const NoiseEvalReport& report);

}  // namespace fcp
