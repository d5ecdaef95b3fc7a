// The profiler (docs/design.md §7): measures the step time of one rank of a CP
// group over a grid of sequence lengths × degrees, fits the planner's cost
// coefficients (alpha1, alpha2, beta1 of Eq. 8; alpha3, beta2 of Eq. 9) by
// least squares, and reports standard errors and held-out relative error.
//
// Targets:
//   "cpu"          real kernels on this CPU (src/kernels): one rank's share
//                  (zigzag chunk of s/d tokens) of a small transformer layer,
//                  d ring steps of attention forward + backward, the layer's
//                  GEMMs (OpenBLAS), and the ring's KV/dKV traffic measured
//                  through ProfileOptions::ring_transport (MPI under mpirun,
//                  see src/exec/profile_transport.h) or, by default, as
//                  in-process copies overlapped on a second thread. Measured.
//   "sim:CLUSTER"  samples of the simulator's hardware (fcp::sim) for a
//                  model preset on a cluster preset, with seeded multiplicative
//                  log-normal measurement noise. Simulated.
//
// Thread-safety: RunProfile is reentrant (the cpu target uses a helper thread
// and OpenBLAS internally; run one cpu profile at a time for sane timings).
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fcp/fit.h"
#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp {

namespace profile {
class RingTransport;  // src/profile/cpu_target.h
}  // namespace profile

struct ProfileOptions {
  std::string target =
      "sim:ascend910c-4x16";  // "cpu" or "sim:<cluster preset>"
  // sim: a model preset (qwen3-8b, ...); cpu: "cpu-tiny" (the default there):
  // 1 layer, hidden 256, 4 heads of 64 (GQA 2 kv heads), SwiGLU ffn 768.
  std::string model;             // "" = qwen3-8b (sim) / cpu-tiny (cpu)
  std::vector<int64_t> lengths;  // tokens; empty = the target's default grid
  std::vector<int> degrees;      // CP degrees >= 1; empty = default grid
  int repeats = 3;               // measurements per grid point (mean is used)
  double noise_rel =
      0.02;  // sim: sigma of the log-normal noise per measurement
  double heldout_fraction = 0.25;  // grid points held out of the error fit
  uint64_t seed = 1;               // noise and held-out split
  bool packed_groups =
      true;  // also sample groups of 4 equal sequences (eta 0/1 mix)
  // Skip grid points whose per-rank chunk s/d is below this (tokens): a
  // planner never shards a sequence that thin, and there the fixed per-step
  // costs that Eq. 8-9 do not model dominate. 0 keeps every point.
  int64_t min_tokens_per_rank = 512;
  // cpu: carries the ring's KV/dKV traffic (not owned); nullptr = in-process
  // copies. A multi-process transport (MPI) needs every rank to call
  // RunProfile with the same options (lockstep; see exec::RunProfileOnRing).
  profile::RingTransport* ring_transport = nullptr;
  // Called once per grid length ("[profile] MODEL: length L (i/n)"); may be
  // empty. Called from the calling thread.
  std::function<void(const std::string&)> progress;
};

struct ProfileReport {
  std::string target;
  std::string model;
  std::string hardware;   // "simulated: ..." or "measured: <cpu>, ..."
  std::string transport;  // cpu: what measured the ring traffic ("in-process
                          // copy", "mpi, 2 ranks"); "" for sim targets
  CostModel
      cost_model;  // fitted on all samples; bandwidths/memory from the preset
  FitResult fit;   // the fit behind cost_model
  HeldoutReport heldout;  // fit on the training split, error on held-out points
  std::vector<FitSample> samples;
  std::vector<bool> is_heldout;  // per sample
  double wall_s = 0;             // profiling wall time
  std::string
      residual_note;  // what dominates the residual (largest-error points)
  std::optional<ModelShape> model_shape;  // predicts all-to-all samples
};

// Runs the profile. Throws InputError naming the field: "target", "model",
// "lengths", "degrees", "repeats", "noise", "heldout_fraction".
ProfileReport RunProfile(const ProfileOptions& options);

// Samples measured by another profiler (the PyTorch one, `python -m fcp
// profile --target torch`), fitted and reported exactly as RunProfile fits
// its own: a seeded held-out split, the fit on all samples, the residual note.
struct MeasuredProfile {
  std::string target;  // e.g. "torch:cuda"
  std::string model;
  std::string hardware;            // "measured: ..."
  std::string transport;           // what carried the ring traffic
  std::vector<FitSample> samples;  // ring and all-to-all samples
  std::vector<std::string>
      what;        // description per sample, for the residual note
  CostModel base;  // bandwidths and memory fields of the result
  double heldout_fraction = 0.25;
  uint64_t seed = 1;
  double wall_s = 0;  // measuring time; the fit's time is added
  // The timed model's head counts: needed when samples has all-to-all ones.
  std::optional<ModelShape> model_shape;
};

// Throws InputError("samples") for fewer than 4 samples or a `what` of
// another size, ("heldout_fraction") outside [0, 1), and the fit's errors.
ProfileReport FitMeasuredProfile(const MeasuredProfile& measured);

// {"target","model","hardware",["transport",]"coefficients":{name:{"value","std_error"}},
//  "heldout_error":{"mean","max","by_label":{...}},"samples":N,
//  "cost_model":{...}} — fcp::ParseCostModelJson accepts it (it reads the
// "cost_model" member). `indent` < 0: one line.
std::string ProfileReportToJson(const ProfileReport& report, int indent = 2);

// Human-readable table: coefficients ± standard error, held-out error per
// label (the paper's Table 3 layout), residual note.
std::string ProfileReportToTable(const ProfileReport& report);

// Learning from measured steps: the groups of `plan` (made for `request`) as
// they ran, for RecalibrateCostModel (fcp/fit.h). `group_times_s` holds the
// measured time (s) of every group of the plan in plan order
// (micro_batches[0].groups, then micro_batches[1].groups, ...), e.g. the time
// from a group's first forward to its last backward on its slowest rank.
// A NaN entry (not measured) gives no sample.
// Each sample carries the group's load, degree, comm kind, and the bandwidth
// and link of its placement under request.cost. Throws
// InputError("group_times_s") when the count is not the plan's group count,
// ("group_times_s[i]") for a time that is not NaN and not > 0, and ("plan")
// when the plan is not a plan of `request` (ValidatePlan). Pure function.
std::vector<FitSample> MeasuredGroupSamples(
    const PlanRequest& request, const Plan& plan,
    std::span<const double> group_times_s);

// Learning step after step: keeps every group measured so far and refits the
// coefficients it started from on all of them (RecalibrateCostModel).
// options.model is needed for plans with all-to-all groups. Not thread-safe.
class CoefficientLearner {
 public:
  explicit CoefficientLearner(CostModel start,
                              RecalibrationOptions options = {})
      : start_(std::move(start)),
        options_(std::move(options)),
        learnt_{start_} {}
  // Adds the groups of `plan` (made for `request`) as MeasuredGroupSamples
  // does, then refits. Returns the coefficients to plan with next.
  const CostModel& Learn(const PlanRequest& request, const Plan& plan,
                         std::span<const double> group_times_s);
  const CostModel& cost() const {
    return learnt_.cost_model;
  }  // the start before any step
  const Recalibration& last() const { return learnt_; }
  const std::vector<FitSample>& measured() const { return measured_; }

 private:
  CostModel start_;
  RecalibrationOptions options_;
  std::vector<FitSample> measured_;
  Recalibration learnt_;
};

}  // namespace fcp
