// "Where flexible CP pays": fcp against the best work-balanced static CP plan
// over global batch sizes, cluster sizes, both cluster presets, every dataset,
// real lengths and the extreme case — all on the simulator, so every figure is
// simulated. The engine of `fcp eval study`.
//
// Units: seconds (simulated), tokens. Thread-safety: RunStudy is a pure
// function of its options except for the progress callback and the files it
// writes.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::sim {

struct StudyOptions {
  std::string out_dir;  // study.md and study.csv go here (created)
  bool quick = false;   // a small grid, one measured batch per case
  uint64_t seed = 1;    // batch i of a case is drawn with seed + i
  std::vector<int64_t>
      lengths;  // real lengths (e.g. --lengths FILE); empty = no "real" rows
  std::string lengths_label =
      "real";  // how the real lengths are named in the tables
  // The grid's axes; empty = the defaults (both cluster presets; each
  // dataset's own model, qwen3-8b for text and qwen3-vl-8b for video; global
  // batches 16..2,048 at 64 ranks; ranks 8..1,024 at gbs 8 x ranks).
  std::vector<std::string> clusters;  // cluster presets
  std::vector<std::string> models;    // model presets: every case runs on each
  std::vector<int64_t> global_batches;  // the batch-size part's gbs values
  std::vector<int> ranks;               // the scale part's rank counts
  int warmup = 2;  // unmeasured batches: the warm-up pick of static degrees
  // Static degrees: tuned in hindsight (every degree run on the measured
  // batches, the fastest kept: the yardstick) or on the warm-up batches; the
  // warm-up pick is reported beside either way (ExperimentConfig::tune).
  bool tune_in_hindsight = true;
  int steps = 3;  // measured global batches per case
  // Planner coefficients of every strategy (fcp's plans, the static
  // baselines' dealing by work): true = fitted by `fcp profile --target
  // sim:CLUSTER --model MODEL` with its defaults (2 % measurement noise, seed
  // 1), once per cluster and model, as a user profiles their cluster before
  // planning; false = the presets' coefficients derived from hardware figures.
  bool profiled_coefficients = true;
  // Every strategy learns from the steps it ran (ExperimentConfig::learn).
  bool learn = false;
  // The local-search reference (include/fcp/local_search.h; not the fcp
  // planner), off at 0: each measured batch is also planned by LocalSearch
  // with this time limit (s) in the study's own setting (the same request
  // fcp plans: coefficients, gradient sync, the run's communicators), once
  // with all-to-all groups allowed ("search") and once ring-only
  // ("search-ring"), and simulated as fcp's plans are (StudySearchPlanner).
  double search_s = 0;
  // Its max_iterations: moves tried per batch (0 = until search_s). The
  // columns are deterministic when these, not the time limit, end searches.
  int64_t search_iterations = 0;
  std::function<void(const std::string&)> progress;  // may be empty
};

// One case: fcp and the best balanced static baseline on the same batches.
struct StudyRow {
  std::string part;     // "batch size", "scale", "extreme"
  std::string cluster;  // cluster preset
  std::string dataset;  // dataset name or lengths_label
  std::string model;    // model preset
  int ranks = 0;
  int64_t global_batch = 0;
  double bound_s = 0;       // physical lower bound per global batch
  double fcp_s = 0;         // fcp's simulated time per global batch (0: failed)
  double static_s = 0;      // best balanced static (megatron or deepspeed)
  std::string static_name;  // "megatron c=8" / "deepspeed c=4"
  // The better static plan with each strategy's degree picked on the warm-up
  // batches, timed on the measured ones (0: none ran).
  double static_warmup_s = 0;
  std::string static_warmup_name;
  double loader_s = 0;    // best static in data-loader order (0: not run)
  double fcp_ring_s = 0;  // fcp-ring (ring groups only; 0: failed)
  // The best static plan a ring-only runtime runs: megatron (ring CP), its
  // degree tuned as static_s's is (0: none ran).
  double ring_static_s = 0;
  // No plan of ring groups only is faster (sim::PhysicalLowerBoundS with
  // rings_only, mean over the measured batches): where it is above static_s,
  // fcp-ring below 1.00x is the rings' limit, not the planner's.
  double ring_bound_s = 0;
  double ref_s =
      0;  // best reference heuristic (ref-*, each tuned in hindsight)
  std::string ref_name;  // which one, "ref-share"
  std::string failure;   // why fcp or every static failed, if one did
  // The local-search reference (StudyOptions::search_s; 0: off or failed).
  double search_s = 0;
  double search_ring_s = 0;
  int search_time_limited = 0;  // searches the time limit ended, both kinds
  // In fcp's own model (SearchScoreMs on each measured batch's request): the
  // geometric mean of fcp's plan's score over the search's (fcp-ring's over
  // search-ring's); >= 1, since fcp's plan is a start (0: not run).
  double search_model_gain = 0;
  double search_ring_model_gain = 0;
  double speedup() const {
    return fcp_s > 0 && static_s > 0 ? static_s / fcp_s : 0;
  }
  double ring_speedup() const {
    return fcp_ring_s > 0 && static_s > 0 ? static_s / fcp_ring_s : 0;
  }
  double ring_vs_ring_static() const {
    return fcp_ring_s > 0 && ring_static_s > 0 ? ring_static_s / fcp_ring_s : 0;
  }
  double vs_ref() const { return fcp_s > 0 && ref_s > 0 ? ref_s / fcp_s : 0; }
  double search_speedup() const {
    return search_s > 0 && static_s > 0 ? static_s / search_s : 0;
  }
  double search_ring_speedup() const {
    return search_ring_s > 0 && static_s > 0 ? static_s / search_ring_s : 0;
  }
};

struct StudyResult {
  std::vector<StudyRow> rows;
  std::string markdown;  // the report written to out_dir/study.md
  std::string summary;   // a few lines: geometric mean, worst, best, regimes
};

// What a study search planner saw over its measured batches.
struct SearchTally {
  int searches = 0;
  int time_limited = 0;       // searches the time limit ended
  double log_model_gain = 0;  // Σ log(score of fcp's start / search's score)
  double model_gain() const {
    return searches > 0 ? std::exp(log_model_gain / searches) : 0;
  }
};

// The study's local-search planner (ExperimentConfig::extra_planners) for
// StudyOptions::search_s/search_iterations: on the first `warmup` steps fcp's
// plan (fcp-ring's when `ring`), so that the measured batches start from the
// communicators fcp's run holds; then LocalSearch (seed 1 + step) from
// DefaultSearchStarts, or when `ring` from fcp-ring's plan and those starts
// with every group turned ring, all_to_all = !ring. Each search is added to
// *tally (when given; it must outlive the planner), its gain measured against
// the start "fcp" ("fcp-ring" when `ring`).
std::function<Plan(const PlanRequest&, size_t)> StudySearchPlanner(
    const StudyOptions& options, int warmup, bool ring,
    SearchTally* tally = nullptr);

// Runs every case (progress one line per case) and writes study.md and
// study.csv into options.out_dir. Throws InputError("out") when the directory
// cannot be written and InputError naming the field for bad counts.
StudyResult RunStudy(const StudyOptions& options);

}  // namespace fcp::sim
