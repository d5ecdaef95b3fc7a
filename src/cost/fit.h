// Least-squares fitting of the planner's cost coefficients (docs/design.md §2,
// paper Eq. 8-9) from measured or simulated samples, with standard errors and
// held-out error. Thread-safety: pure functions.
//
// Compute samples fit  Tcp = alpha1·x_attn + (alpha1·h)·x_h + alpha2·x_lin + beta1
//                           + gamma_serial·(d-1),
//   x_attn = Σ(1+eta)s²/d, x_h = Σ(1+eta)s, x_lin = Σs/d (Eq. 8 + v2 h, gamma_serial)
// Communication samples (d > 1) fit
//   Tcm = alpha3·x_comm + beta2 + gamma_intra·x_gi + gamma_inter·x_ge,
//   x_comm = Σs·(d-1)/d / v, x_gi = d-1 on one node (else 0),
//   x_ge = d-1 across nodes (else 0)                             (Eq. 9 + v2 gamma)
// Both by weighted least squares minimising RELATIVE residuals (weights 1/y),
// with coefficients constrained >= 0 (exact active-set search over the few
// unknowns). A sample may carry only a total time T (no split); such samples
// refine all nine coefficients on the full formula
// T = Tcp + Tcm - min(A·(d - ring_tail_steps)/d, Tcm), ring_tail_steps fixed by
// FitOptions (see FitOptions::refine_on_total). Predictions call
// GroupTimePartsS (the one implementation of the formula). With
// FitOptions::paper_terms_only the v2 columns are left out (the paper's model).
#pragma once

#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "fcp/cost_model.h"
#include "fcp/types.h"

namespace fcp {

struct FitSample {
  GroupLoad load;        // Σ s and Σ (1+eta) s² of the group
  int degree = 1;        // d >= 1
  double bw_bytes_per_s = 1;  // v used for this group's placement
  Link link = Link::kIntraNode;  // which step latency (gamma) the placement pays
  double compute_s = std::numeric_limits<double>::quiet_NaN();  // measured Tcp
  double comm_s = std::numeric_limits<double>::quiet_NaN();     // measured Tcm (d > 1)
  double total_s = std::numeric_limits<double>::quiet_NaN();    // measured T
  std::string label;     // grouping key for held-out reports (model, size...)
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
};

struct FittedCoefficient {
  double value = 0;
  double std_error = 0;  // from the residual variance and (XᵀWX)⁻¹; 0 if unidentified
};

struct FitResult {
  FittedCoefficient alpha1, alpha2, beta1, alpha3, beta2;
  // Cost model v2 (docs/design.md §2); 0 with paper_terms_only.
  FittedCoefficient attn_overhead_tokens, gamma_intra, gamma_inter, gamma_serial;
  double ring_tail_steps = 0;  // FitOptions::ring_tail_steps the fit assumed (0 for paper terms)
  int compute_samples = 0;
  int comm_samples = 0;
  int total_samples = 0;
  double rms_rel_residual = 0;  // over total_s (else compute_s vs Tcp) of the fit samples
  bool refined = false;
  // Copies the nine fitted values and ring_tail_steps into `base` (bandwidths
  // and memory fields kept).
  CostModel Apply(const CostModel& base) const;
};

// Throws InputError("samples") when fewer than 3 compute samples exist or
// when no sample has a usable time; ("samples[i]") for a bad sample.
FitResult FitCostCoefficients(std::span<const FitSample> samples,
                              const FitOptions& options = {});

// Predicted times of one sample under coefficients `cm` (s).
double PredictComputeS(const CostModel& cm, const FitSample& s);
double PredictCommS(const CostModel& cm, const FitSample& s);
double PredictTotalS(const CostModel& cm, const FitSample& s);

// Relative error |pred - measured| / measured of total_s (or of compute_s
// against Tcp when a sample has no total) over `samples`, overall and per label.
struct ErrorStats {
  double mean = 0;
  double max = 0;
  int count = 0;
};
struct HeldoutReport {
  ErrorStats overall;
  std::map<std::string, ErrorStats> by_label;
};
HeldoutReport EvaluateRelativeError(const CostModel& cm,
                                    std::span<const FitSample> samples);

}  // namespace fcp
