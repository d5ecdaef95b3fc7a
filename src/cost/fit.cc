#include "fcp/fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

namespace fcp {
namespace {

bool Has(double x) { return std::isfinite(x); }

// The regressors of the linear parametrisation, in this column order:
// alpha1, alpha1·h, alpha2, beta1, gamma_serial (compute) and alpha3, beta2,
// gamma_intra, gamma_inter (communication); alpha3_home (communication, never
// hidden); alpha2_vision (compute) last, so that the subsets RelativeNnls tries
// without it come first, in the order they had before it.
enum Col {
  kAttn,
  kOverhead,
  kLin,
  kBeta1,
  kGammaSerial,
  kComm,
  kBeta2,
  kGammaIntra,
  kGammaInter,
  kHome,
  kVision,
  kNumCols
};

double XAttn(const FitSample& s) { return s.load.sum_attn / s.degree; }
double XOverhead(const FitSample& s) { return s.load.sum_attn_tokens; }
double XLin(const FitSample& s) { return s.load.sum_tokens / s.degree; }
double XVision(const FitSample& s) { return s.load.sum_vision / s.degree; }
double XComm(const FitSample& s) {
  return s.degree > 1
             ? s.load.sum_tokens * (s.degree - 1) / s.degree / s.bw_bytes_per_s
             : 0.0;
}
// A ring's transfer after its last attention step (Σs/d/v); Ulysses has none.
double XHome(const FitSample& s) {
  return s.degree > 1 && s.comm != CommKind::kAllToAll
             ? s.load.sum_tokens / s.degree / s.bw_bytes_per_s
             : 0.0;
}
double XGamma(const FitSample& s, Link link) {
  return s.degree > 1 && s.link == link ? s.degree - 1.0 : 0.0;
}
double XRingSteps(const FitSample& s) { return s.degree - 1.0; }

// `cm` with the sample's own bandwidth on the sample's link, so that the one
// formula (GroupTimePartsS, or AllToAllGroupTimePartsS with `model`'s heads)
// predicts it.
GroupTimeParts PredictParts(const CostModel& cm, const FitSample& s,
                            const std::optional<ModelShape>& model) {
  if (s.comm == CommKind::kAllToAll) {
    if (!model)
      throw InputError("samples", "an all-to-all sample needs the model shape");
    return AllToAllGroupTimePartsS(cm, *model, s.load, s.degree,
                                   s.bw_bytes_per_s);
  }
  CostModel at = cm;
  (s.link == Link::kIntraNode ? at.bw_intra_node : at.bw_inter_node) =
      s.bw_bytes_per_s;
  return GroupTimePartsS(at, s.load, s.degree, s.link);
}

// "samples[i]" after checking the sample's degree, load and bandwidth.
std::string CheckedSampleField(const FitSample& s, size_t i) {
  std::string field = "samples[" + std::to_string(i) + "]";
  if (s.degree < 1) throw InputError(field, "degree must be >= 1");
  if (!(s.load.sum_tokens > 0) || !(s.load.sum_attn > 0))
    throw InputError(field, "group load must be > 0");
  if (!(s.bw_bytes_per_s > 0)) throw InputError(field, "bandwidth must be > 0");
  return field;
}

struct LsqResult {
  Eigen::VectorXd coef;
  Eigen::VectorXd std_error;
  double rss = 0;  // weighted (relative) residual sum of squares
  bool ok = false;
};

// min ||W (X c - y)|| subject to c >= 0, W = diag(1/y). Exact: tries every
// subset of free coefficients (p <= 10) and keeps the best feasible one.
LsqResult RelativeNnls(const Eigen::MatrixXd& x, const Eigen::VectorXd& y) {
  const int n = static_cast<int>(x.rows()), p = static_cast<int>(x.cols());
  Eigen::MatrixXd xw = x;
  Eigen::VectorXd yw = Eigen::VectorXd::Ones(n);
  for (int i = 0; i < n; ++i) xw.row(i) /= y(i);
  LsqResult best;
  best.rss = std::numeric_limits<double>::infinity();
  for (int mask = 1; mask < (1 << p); ++mask) {
    std::vector<int> cols;
    for (int j = 0; j < p; ++j)
      if (mask & (1 << j)) cols.push_back(j);
    const int k = static_cast<int>(cols.size());
    if (k > n) continue;
    // Columns are equilibrated (unit norm) so that rank detection does not
    // confuse s² against 1 scales with deficiency.
    Eigen::MatrixXd a(n, k);
    Eigen::VectorXd norm(k);
    for (int j = 0; j < k; ++j) {
      norm(j) = xw.col(cols[j]).norm();
      if (norm(j) == 0) norm(j) = 1;
      a.col(j) = xw.col(cols[j]) / norm(j);
    }
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
    if (qr.rank() < k) continue;
    Eigen::VectorXd c = qr.solve(yw);
    if ((c.array() < 0).any()) continue;
    const double rss = (a * c - yw).squaredNorm();
    if (rss < best.rss * (1 - 1e-12)) {
      best.ok = true;
      best.rss = rss;
      best.coef = Eigen::VectorXd::Zero(p);
      best.std_error = Eigen::VectorXd::Zero(p);
      const double dof = std::max(1, n - k);
      const double sigma2 = rss / dof;
      const Eigen::MatrixXd cov = sigma2 * (a.transpose() * a).inverse();
      for (int j = 0; j < k; ++j) {
        best.coef(cols[j]) = c(j) / norm(j);
        best.std_error(cols[j]) = std::sqrt(std::max(0.0, cov(j, j))) / norm(j);
      }
    }
  }
  if (!best.ok) {  // everything zero is always feasible
    best.coef = Eigen::VectorXd::Zero(p);
    best.std_error = Eigen::VectorXd::Zero(p);
    best.rss = static_cast<double>(n);
    best.ok = true;
  }
  return best;
}

// The relative error of one sample: total time when measured, else compute
// time against Tcp. NaN when the sample has neither.
double RelativeError(const CostModel& cm, const FitSample& s,
                     const std::optional<ModelShape>& model) {
  if (Has(s.total_s))
    return (PredictTotalS(cm, s, model) - s.total_s) / s.total_s;
  if (Has(s.compute_s))
    return (PredictComputeS(cm, s, model) - s.compute_s) / s.compute_s;
  return std::numeric_limits<double>::quiet_NaN();
}

double RmsRelative(const CostModel& cm, std::span<const FitSample> samples,
                   const std::optional<ModelShape>& model) {
  double sum = 0;
  int n = 0;
  for (const auto& s : samples) {
    const double r = RelativeError(cm, s, model);
    if (!Has(r)) continue;
    sum += r * r;
    ++n;
  }
  return n ? std::sqrt(sum / n) : 0.0;
}

}  // namespace

CostModel FitResult::Apply(const CostModel& base) const {
  CostModel cm = base;
  cm.alpha1 = alpha1.value;
  cm.alpha2 = alpha2.value;
  cm.beta1 = beta1.value;
  cm.alpha3 = alpha3.value;
  cm.beta2 = beta2.value;
  cm.attn_overhead_tokens = attn_overhead_tokens.value;
  cm.gamma_intra = gamma_intra.value;
  cm.gamma_inter = gamma_inter.value;
  cm.gamma_serial = gamma_serial.value;
  cm.alpha3_home = alpha3_home.value;
  cm.alpha2_vision = alpha2_vision.value;
  cm.ring_tail_steps = ring_tail_steps;
  return cm;
}

double PredictComputeS(const CostModel& cm, const FitSample& s,
                       const std::optional<ModelShape>& model) {
  return PredictParts(cm, s, model).compute_s;
}

double PredictCommS(const CostModel& cm, const FitSample& s,
                    const std::optional<ModelShape>& model) {
  return PredictParts(cm, s, model).comm_s;
}

double PredictTotalS(const CostModel& cm, const FitSample& s,
                     const std::optional<ModelShape>& model) {
  return PredictParts(cm, s, model).total_s;
}

namespace {

// Sets the coefficients of `out` from a solution over the columns `cols` of
// the linear parametrisation (other coefficients keep their values).
void StoreColumns(const LsqResult& r, const std::vector<int>& cols,
                  FitResult& out) {
  double values[kNumCols], errors[kNumCols];
  FittedCoefficient* fields[kNumCols] = {
      &out.alpha1,       nullptr,          &out.alpha2,       &out.beta1,
      &out.gamma_serial, &out.alpha3,      &out.beta2,        &out.gamma_intra,
      &out.gamma_inter,  &out.alpha3_home, &out.alpha2_vision};
  bool has_overhead = false;
  for (size_t j = 0; j < cols.size(); ++j) {
    values[cols[j]] = r.coef(j);
    errors[cols[j]] = r.std_error(j);
    if (cols[j] == kOverhead) has_overhead = true;
    if (fields[cols[j]]) *fields[cols[j]] = {r.coef(j), r.std_error(j)};
  }
  if (has_overhead) {
    // The fit is linear in alpha1·h; h itself is that over alpha1.
    const double a1 = out.alpha1.value;
    out.attn_overhead_tokens =
        a1 > 0
            ? FittedCoefficient{values[kOverhead] / a1, errors[kOverhead] / a1}
            : FittedCoefficient{};
  }
}

// Solves the relative NNLS on rows built by `row` over the columns `cols`.
template <typename RowFn>
LsqResult SolveColumns(const std::vector<const FitSample*>& rows,
                       const std::vector<int>& cols, RowFn row,
                       std::vector<double>* y_out = nullptr) {
  Eigen::MatrixXd x(rows.size(), cols.size());
  Eigen::VectorXd y(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    double full[kNumCols] = {};
    y(i) = row(*rows[i], full);
    for (size_t j = 0; j < cols.size(); ++j) x(i, j) = full[cols[j]];
  }
  if (y_out) y_out->assign(y.data(), y.data() + y.size());
  return RelativeNnls(x, y);
}

}  // namespace

// Long because: the Eq. 8 fit, the Eq. 9 fit and the joint refinement share the
// samples' design matrices.
FitResult FitCostCoefficients(std::span<const FitSample> samples,
                              const FitOptions& options) {
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const std::string field = CheckedSampleField(s, i);
    for (double t : {s.compute_s, s.comm_s, s.total_s})
      if (Has(t) && !(t > 0)) throw InputError(field, "times must be > 0");
    if (s.comm == CommKind::kAllToAll && !options.model)
      throw InputError(field, "an all-to-all sample needs the model shape");
  }
  if (!(options.ring_tail_steps >= 0 && options.ring_tail_steps <= 1))
    throw InputError("ring_tail_steps", "must be in [0, 1]");
  FitResult out;
  const bool v2 = !options.paper_terms_only;
  out.ring_tail_steps = v2 ? options.ring_tail_steps : 0.0;
  // Of a ring group's attention, the share that can hide its transfers (an
  // all-to-all hides none).
  auto hideable = [&](const FitSample& s) {
    if (s.comm == CommKind::kAllToAll) return 0.0;
    return (s.degree - out.ring_tail_steps) / s.degree;
  };
  // --- Eq. 8 (+ h) on compute samples (or totals of d = 1 groups, where T =
  // Tcp) ---
  std::vector<const FitSample*> comp, comm, total;
  for (const auto& s : samples) {
    if (Has(s.compute_s) || (s.degree == 1 && Has(s.total_s)))
      comp.push_back(&s);
    if (s.degree > 1 && Has(s.comm_s)) comm.push_back(&s);
    if (Has(s.total_s)) total.push_back(&s);
  }
  if (comp.size() < 3)
    throw InputError(
        "samples",
        "need at least 3 samples with a compute time (or d = 1 total)");
  std::vector<int> compute_cols = {kAttn, kLin, kBeta1};
  if (v2) compute_cols.insert(compute_cols.end(), {kOverhead, kGammaSerial});
  // Only where some sample has vision tokens (else an all-zero column).
  const bool vision =
      v2 && std::any_of(comp.begin(), comp.end(), [](const FitSample* s) {
        return s->load.sum_vision > 0;
      });
  if (vision) compute_cols.push_back(kVision);
  std::vector<int> comm_cols = {kComm, kBeta2};
  if (v2) comm_cols.insert(comm_cols.end(), {kGammaIntra, kGammaInter, kHome});
  auto compute_row = [&](const FitSample& s, double* x) {
    x[kAttn] = XAttn(s);
    x[kOverhead] = XOverhead(s);
    x[kLin] = XLin(s);
    x[kVision] = XVision(s);
    x[kBeta1] = 1.0;
    x[kGammaSerial] = XRingSteps(s);
    // Never hidden, so a total always carries it (the compute fit has no
    // such column: it is 0 there).
    x[kHome] = XHome(s);
    if (s.comm == CommKind::kAllToAll) {  // whole sequences, heads / d
      const double pad = AllToAllFactorsFor(*options.model, s.degree).pad;
      x[kAttn] *= pad;
      x[kOverhead] *= pad / s.degree;
      x[kGammaSerial] = 0;
    }
  };
  auto comm_row = [&](const FitSample& s, double* x) {
    x[kComm] = XComm(s);
    x[kHome] = XHome(s);
    x[kBeta2] = 1.0;
    x[kGammaIntra] = XGamma(s, Link::kIntraNode);
    x[kGammaInter] = XGamma(s, Link::kInterNode);
    if (s.comm == CommKind::kAllToAll) {  // rho·alpha3 per token of Σs/d
      x[kComm] *= AllToAllFactorsFor(*options.model, s.degree).rho / s.degree;
      x[kGammaIntra] = x[kGammaInter] = 0;
    }
  };
  StoreColumns(SolveColumns(comp, compute_cols,
                            [&](const FitSample& s, double* x) {
                              compute_row(s, x);
                              return Has(s.compute_s) ? s.compute_s : s.total_s;
                            }),
               compute_cols, out);
  // --- Eq. 9 (+ gamma) on communication samples ---
  if (comm.size() >= 2) {
    StoreColumns(SolveColumns(comm, comm_cols,
                              [&](const FitSample& s, double* x) {
                                comm_row(s, x);
                                return s.comm_s;
                              }),
                 comm_cols, out);
  }
  // No split communication times: derive them from totals of d > 1 groups
  // that are clearly communication-bound under the compute fit, where
  // T = Tcp - H + Tcm with H the hideable attention, i.e. Tcm = T - Tcp + H >
  // H.
  if (comm.size() < 2) {
    const CostModel cfit = out.Apply(CostModel{});
    std::vector<FitSample> derived;
    for (const FitSample* s : total) {
      if (s->degree < 2) continue;
      const GroupTimeParts p = PredictParts(cfit, *s, options.model);
      const double hidden = p.attn_s * hideable(*s);
      const double rest = s->total_s - (p.compute_s - hidden);
      if (rest > 1.05 * hidden && rest > 0) {
        derived.push_back(*s);
        derived.back().comm_s = rest;
      }
    }
    if (derived.size() >= 2) {
      std::vector<const FitSample*> rows;
      for (const auto& d : derived) rows.push_back(&d);
      StoreColumns(SolveColumns(rows, comm_cols,
                                [&](const FitSample& s, double* x) {
                                  comm_row(s, x);
                                  return s.comm_s;
                                }),
                   comm_cols, out);
    }
  }
  out.compute_samples = static_cast<int>(comp.size());
  out.comm_samples = static_cast<int>(comm.size());
  out.total_samples = static_cast<int>(total.size());
  CostModel cm = out.Apply(CostModel{});
  double best_rms = RmsRelative(cm, samples, options.model);

  // --- Refinement on totals: alternate (branch of the min per sample, NNLS)
  // ---
  if (options.refine_on_total && total.size() >= 5) {
    CostModel cur = cm;
    std::vector<int> prev_branch;
    for (int it = 0; it < options.max_iterations; ++it) {
      std::vector<int> branch(total.size());
      for (size_t i = 0; i < total.size(); ++i) {
        const GroupTimeParts p = PredictParts(cur, *total[i], options.model);
        branch[i] =
            total[i]->degree > 1 && p.attn_s * hideable(*total[i]) <= p.comm_s;
      }
      if (branch == prev_branch) break;
      prev_branch = branch;
      std::vector<int> all_cols = compute_cols;
      all_cols.insert(all_cols.end(), comm_cols.begin(), comm_cols.end());
      std::vector<std::array<double, kNumCols>> rows(total.size());
      for (size_t i = 0; i < total.size(); ++i) {
        double* x = rows[i].data();
        std::fill(x, x + kNumCols, 0.0);
        compute_row(*total[i], x);
        if (branch[i]) {  // communication-bound: the hideable attention hides
                          // behind Tcm
          const double exposed = 1.0 - hideable(*total[i]);
          x[kAttn] *= exposed;
          x[kOverhead] *= exposed;
          comm_row(*total[i], x);
        }
      }
      // Unidentified columns (all zero) keep their current value (their
      // contribution is zero anyway); fit the rest.
      std::vector<int> cols;
      for (int c : all_cols) {
        bool any = false;
        for (const auto& r : rows) any |= r[c] != 0;
        if (any) cols.push_back(c);
      }
      size_t next = 0;
      const LsqResult r =
          SolveColumns(total, cols, [&](const FitSample& s, double* x) {
            std::copy(rows[next].begin(), rows[next].end(), x);
            ++next;
            return s.total_s;
          });
      FitResult cand = out;
      StoreColumns(r, cols, cand);
      const CostModel cand_cm = cand.Apply(CostModel{});
      const double rms = RmsRelative(cand_cm, samples, options.model);
      cur = cand_cm;
      if (rms < best_rms) {
        best_rms = rms;
        cand.refined = true;
        out = cand;
      }
    }
  }
  out.rms_rel_residual = best_rms;
  return out;
}

std::array<double*, kNumFittedCoefficients> TimingCoefficientFields(
    CostModel& cm) {
  std::array<double*, kNumFittedCoefficients> fields{};
  for (size_t i = 0; i < fields.size(); ++i)
    fields[i] = &(cm.*(FittedCoefficients()[i]->member));
  return fields;
}

namespace {

double PredictAnyTotalS(const CostModel& cm, const FitSample& s,
                        const std::optional<ModelShape>& model) {
  return PredictTotalS(cm, s, model);
}

void CheckAllToAllHasModel(std::span<const FitSample> samples,
                           const std::optional<ModelShape>& model) {
  for (size_t i = 0; i < samples.size(); ++i)
    if (samples[i].comm == CommKind::kAllToAll && !model)
      throw InputError("samples[" + std::to_string(i) + "]",
                       "an all-to-all sample needs the model shape");
}

}  // namespace

double RmsLogError(const CostModel& cm, std::span<const FitSample> samples,
                   const std::optional<ModelShape>& model) {
  CheckAllToAllHasModel(samples, model);
  double sum = 0;
  for (const FitSample& s : samples)
    sum += std::pow(std::log(PredictAnyTotalS(cm, s, model) / s.total_s), 2);
  return samples.empty() ? 0.0
                         : std::sqrt(sum / static_cast<double>(samples.size()));
}

// Long because: one Gauss-Newton loop: whitened residuals, numerical Jacobian,
// step.
Recalibration RecalibrateCostModel(const CostModel& prior,
                                   std::span<const FitSample> measured,
                                   const RecalibrationOptions& options) {
  if (!(options.prior_sigma > 0 && std::isfinite(options.prior_sigma)))
    throw InputError("prior_sigma", "must be > 0");
  if (!(options.measurement_sigma > 0 &&
        std::isfinite(options.measurement_sigma)))
    throw InputError("measurement_sigma", "must be > 0");
  for (size_t i = 0; i < measured.size(); ++i) {
    const FitSample& s = measured[i];
    const std::string field = CheckedSampleField(s, i);
    if (!(Has(s.total_s) && s.total_s > 0))
      throw InputError(field, "total_s must be > 0");
  }
  CheckAllToAllHasModel(measured, options.model);
  constexpr int kParams = static_cast<int>(kNumFittedCoefficients);
  const int n = static_cast<int>(measured.size());
  CostModel prior_copy = prior;
  const std::array<double*, kParams> prior_fields =
      TimingCoefficientFields(prior_copy);
  std::array<double, kParams> prior_values;
  for (int k = 0; k < kParams; ++k) prior_values[k] = *prior_fields[k];
  auto model_at = [&](const Eigen::VectorXd& theta) {
    CostModel cm = prior;
    const std::array<double*, kParams> fields = TimingCoefficientFields(cm);
    for (int k = 0; k < kParams; ++k)
      *fields[k] = prior_values[k] * std::exp(theta(k));
    return cm;
  };
  // Stacked, whitened residuals: measurements, then the prior's
  // pseudo-observations.
  auto residuals = [&](const Eigen::VectorXd& theta) {
    const CostModel cm = model_at(theta);
    Eigen::VectorXd r(n + kParams);
    for (int i = 0; i < n; ++i)
      r(i) = std::log(PredictAnyTotalS(cm, measured[i], options.model) /
                      measured[i].total_s) /
             options.measurement_sigma;
    for (int k = 0; k < kParams; ++k) r(n + k) = theta(k) / options.prior_sigma;
    return r;
  };

  Eigen::VectorXd theta = Eigen::VectorXd::Zero(kParams);
  Eigen::VectorXd r = residuals(theta);
  double cost = r.squaredNorm();
  double lambda = 1e-3;
  for (int it = 0; it < options.max_iterations && n > 0; ++it) {
    // Numerical Jacobian: the formula has a min() kink (hidden transfers), so
    // one-sided steps of 1e-6 in log-scale.
    Eigen::MatrixXd jac(n + kParams, kParams);
    for (int k = 0; k < kParams; ++k) {
      Eigen::VectorXd t = theta;
      t(k) += 1e-6;
      jac.col(k) = (residuals(t) - r) / 1e-6;
    }
    const Eigen::MatrixXd jtj = jac.transpose() * jac;
    const Eigen::VectorXd jtr = jac.transpose() * r;
    bool improved = false;
    while (lambda < 1e10) {
      Eigen::MatrixXd a = jtj;
      a.diagonal() += lambda * jtj.diagonal().cwiseMax(1e-12);
      const Eigen::VectorXd step = a.ldlt().solve(-jtr);
      const Eigen::VectorXd next = theta + step;
      const Eigen::VectorXd next_r = residuals(next);
      const double next_cost = next_r.squaredNorm();
      if (std::isfinite(next_cost) && next_cost < cost) {
        const bool converged = cost - next_cost < 1e-10 * (1 + cost);
        theta = next;
        r = next_r;
        cost = next_cost;
        lambda = std::max(1e-9, lambda / 10);
        improved = !converged;
        break;
      }
      lambda *= 10;
    }
    if (!improved) break;
  }
  Recalibration out;
  out.cost_model = model_at(theta);
  for (int k = 0; k < kParams; ++k) out.scale[k] = std::exp(theta(k));
  out.samples = n;
  out.rms_rel_before = RmsLogError(prior, measured, options.model);
  out.rms_rel_after = RmsLogError(out.cost_model, measured, options.model);
  return out;
}

HeldoutReport EvaluateRelativeError(const CostModel& cm,
                                    std::span<const FitSample> samples,
                                    const std::optional<ModelShape>& model) {
  HeldoutReport rep;
  auto add = [](ErrorStats& e, double err) {
    e.mean = (e.mean * e.count + err) / (e.count + 1);
    e.max = std::max(e.max, err);
    ++e.count;
  };
  for (const auto& s : samples) {
    const double r = RelativeError(cm, s, model);
    if (!Has(r)) continue;
    const double err = std::fabs(r);
    add(rep.overall, err);
    add(rep.by_label[s.label], err);
  }
  return rep;
}

}  // namespace fcp
