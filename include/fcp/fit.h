// Least-squares fitting of the planner's cost coefficients (docs/design.md §2,
// paper Eq. 8-9) from measured or simulated samples, with standard errors and
// held-out error. Thread-safety: pure functions.
//
// Compute samples fit  Tcp = alpha1·x_attn + (alpha1·h)·x_h + alpha2·x_lin +
// beta1
//                           + gamma_serial·(d-1) + alpha2_vision·x_v,
//   x_attn = Σ(1+eta)s²/d, x_h = Σ(1+eta)s, x_lin = Σs/d, x_v = Σv/d (Eq. 8 +
//   v2 h, gamma_serial, and the vision tokens' column where some sample has
//   any)
// Communication samples (d > 1) fit
//   Tcm + X = alpha3·x_comm + beta2 + gamma_intra·x_gi + gamma_inter·x_ge
//             + alpha3_home·x_home,
//   x_comm = Σs·(d-1)/d / v, x_gi = d-1 on one node (else 0),
//   x_ge = d-1 across nodes (else 0), x_home = Σs/d / v (rings only: the
//   transfer after the last attention step)        (Eq. 9 + v2 gamma, X)
// Both by weighted least squares minimising RELATIVE residuals (weights 1/y),
// with coefficients constrained >= 0 (exact active-set search over the few
// unknowns). A sample may carry only a total time T (no split); such samples
// refine every timing coefficient on the full formula
// T = Tcp + Tcm + X - min(A·(d - ring_tail_steps)/d, Tcm), ring_tail_steps
// fixed by
// FitOptions (see FitOptions::refine_on_total). Predictions call
// GroupTimePartsS (the one implementation of the formula). With
// FitOptions::paper_terms_only the v2 columns are left out (the paper's model).
// All-to-all (Ulysses) samples (FitOptions::model given) enter the same
// columns with Ulysses' regressors: pad·x_attn, pad·x_h/d, x_lin, 1 and
// rho·x_comm/d, 1 (no gamma terms), T = Tcp + Tcm (AllToAllGroupTimePartsS).
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fcp/cost_coefficients.h"
#include "fcp/cost_model.h"
#include "fcp/types.h"

namespace fcp {

struct FitSample {
  GroupLoad load;             // Σ s and Σ (1+eta) s² of the group
  int degree = 1;             // d >= 1
  double bw_bytes_per_s = 1;  // v used for this group's placement
  Link link =
      Link::kIntraNode;  // which step latency (gamma) the placement pays
  // Ring samples follow T(G, d); an all-to-all (Ulysses) sample follows
  // AllToAllGroupTimePartsS with bw_bytes_per_s its per-rank all-to-all
  // bandwidth (its link is not read). Predicting or fitting one needs the
  // model's head counts (FitOptions::model).
  CommKind comm = CommKind::kRing;
  double compute_s = std::numeric_limits<double>::quiet_NaN();  // measured Tcp
  double comm_s =
      std::numeric_limits<double>::quiet_NaN();  // measured Tcm (d > 1)
  double total_s = std::numeric_limits<double>::quiet_NaN();  // measured T
  std::string label;  // grouping key for held-out reports (model, size...)
};

struct FitOptions {
  // After the separate linear fits, refine all coefficients on total_s
  // (samples that have one) by Gauss-Newton with relative residuals.
  bool refine_on_total = true;
  int max_iterations = 50;
  // Fit only the paper's five coefficients (the v2 terms h, gamma_intra,
  // gamma_inter, gamma_serial and ring_tail_steps 0).
  bool paper_terms_only = false;
  // Not fitted: the ring's structure (docs/design.md §2), 1 for a zigzag ring.
  double ring_tail_steps = 1;
  // The model's head counts, needed for all-to-all samples: their compute
  // rows are Ulysses' (whole sequences, heads / d, no gamma_serial) and their
  // communication rows carry alpha3 times the volume factor rho
  // (AllToAllFactorsFor), so they inform the same coefficients.
  std::optional<ModelShape> model;
};

struct FittedCoefficient {
  double value = 0;
  double std_error =
      0;  // from the residual variance and (XᵀWX)⁻¹; 0 if unidentified
};

struct FitResult {
  FittedCoefficient alpha1, alpha2, beta1, alpha3, beta2;
  // Cost model v2 (docs/design.md §2); 0 with paper_terms_only.
  FittedCoefficient attn_overhead_tokens, gamma_intra, gamma_inter,
      gamma_serial, alpha3_home, alpha2_vision;
  double ring_tail_steps =
      0;  // FitOptions::ring_tail_steps the fit assumed (0 for paper terms)
  int compute_samples = 0;
  int comm_samples = 0;
  int total_samples = 0;
  double rms_rel_residual =
      0;  // over total_s (else compute_s vs Tcp) of the fit samples
  bool refined = false;
  // Copies the fitted values and ring_tail_steps into `base` (bandwidths
  // and memory fields kept).
  CostModel Apply(const CostModel& base) const;
};

// Throws InputError("samples") when fewer than 3 compute samples exist or
// when no sample has a usable time; ("samples[i]") for a bad sample or an
// all-to-all sample without options.model.
FitResult FitCostCoefficients(std::span<const FitSample> samples,
                              const FitOptions& options = {});

// Predicted times of one sample under coefficients `cm` (s); `model` predicts
// all-to-all samples (InputError("samples") for one without it).
double PredictComputeS(const CostModel& cm, const FitSample& s,
                       const std::optional<ModelShape>& model = std::nullopt);
double PredictCommS(const CostModel& cm, const FitSample& s,
                    const std::optional<ModelShape>& model = std::nullopt);
double PredictTotalS(const CostModel& cm, const FitSample& s,
                     const std::optional<ModelShape>& model = std::nullopt);

// Relative error |pred - measured| / measured of total_s (or of compute_s
// against Tcp when a sample has no total) over `samples`, overall and per
// label.
struct ErrorStats {
  double mean = 0;
  double max = 0;
  int count = 0;
};
struct HeldoutReport {
  ErrorStats overall;
  std::map<std::string, ErrorStats> by_label;
};
HeldoutReport EvaluateRelativeError(
    const CostModel& cm, std::span<const FitSample> samples,
    const std::optional<ModelShape>& model = std::nullopt);

// The timing coefficients of the cost model (names as in the cost_model
// JSON; the `fitted` entries of kCostCoefficients, in its order); memory and
// bandwidths are not among them.
inline constexpr std::array<const char*, kNumFittedCoefficients>
    kTimingCoefficients = [] {
      std::array<const char*, kNumFittedCoefficients> names{};
      for (size_t i = 0; i < names.size(); ++i)
        names[i] = FittedCoefficients()[i]->name.data();
      return names;
    }();
// Pointers to those fields of `cm`, in kTimingCoefficients' order.
std::array<double*, kNumFittedCoefficients> TimingCoefficientFields(
    CostModel& cm);

// Learning from measured steps (docs/planner/learning.md). The coefficients the
// planner starts with are a prior; group times measured while training refine
// them. Each timing coefficient c_k becomes c_k·exp(theta_k) with theta_k ~
// N(0, prior_sigma²) a priori, and each measured total T_i carries log-normal
// error of measurement_sigma (the model's own error included). The result is
// the maximum a posteriori theta:
//   min  Σ_i (ln T̂_i(theta) - ln T_i)² / measurement_sigma²
//      + Σ_k theta_k² / prior_sigma²
// by Levenberg-Marquardt. A coefficient that no sample moves (a zero one, or a
// ring term where every transfer hides behind attention) keeps its prior
// value, so a few steps suffice where a fresh fit (FitCostCoefficients) would
// be unidentified.
struct RecalibrationOptions {
  double prior_sigma = 0.2;  // > 0: how far off the start coefficients may be
  double measurement_sigma =
      0.03;  // > 0: relative error of one measured group time
  int max_iterations = 50;
  // The model's head counts, needed to predict all-to-all samples.
  std::optional<ModelShape> model;
};

struct Recalibration {
  CostModel cost_model;  // `prior` with the timing coefficients rescaled
  std::array<double, kNumFittedCoefficients>
      scale{};                // c_k / prior c_k, kTimingCoefficients' order
  int samples = 0;            // measured groups used
  double rms_rel_before = 0;  // RMS of ln(T̂/T) under the prior
  double rms_rel_after = 0;   // ... under cost_model
};

// RMS over `samples` of ln(predicted / measured total_s) under `cm` (0 for no
// samples); `model` predicts all-to-all samples (InputError("samples[i]")
// for one without it).
double RmsLogError(const CostModel& cm, std::span<const FitSample> samples,
                   const std::optional<ModelShape>& model = std::nullopt);

// `measured`: groups as they ran (load, degree, the bandwidth and link of
// their placement) with total_s, the measured T(G, d) in seconds; other times
// are ignored. No samples: the prior comes back unchanged. Throws
// InputError("samples[i]") for a sample without a positive finite total_s, a
// degree < 1, zero load or bandwidth, an all-to-all sample without
// options.model; ("prior_sigma"), ("measurement_sigma")
// unless > 0 and finite. Pure function.
Recalibration RecalibrateCostModel(const CostModel& prior,
                                   std::span<const FitSample> measured,
                                   const RecalibrationOptions& options = {});

}  // namespace fcp
