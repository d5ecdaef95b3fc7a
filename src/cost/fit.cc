#include "cost/fit.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace fcp {
namespace {

bool Has(double x) { return std::isfinite(x); }

double XAttn(const FitSample& s) { return s.load.sum_attn / s.degree; }
double XLin(const FitSample& s) { return s.load.sum_tokens / s.degree; }
double XComm(const FitSample& s) {
  return s.degree > 1 ? s.load.sum_tokens * (s.degree - 1) / s.degree / s.bw_bytes_per_s : 0.0;
}

struct LsqResult {
  Eigen::VectorXd coef;
  Eigen::VectorXd std_error;
  double rss = 0;  // weighted (relative) residual sum of squares
  bool ok = false;
};

// min ||W (X c - y)|| subject to c >= 0, W = diag(1/y). Exact: tries every
// subset of free coefficients (p <= 5) and keeps the best feasible one.
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
double RelativeError(const CostModel& cm, const FitSample& s) {
  if (Has(s.total_s)) return (PredictTotalS(cm, s) - s.total_s) / s.total_s;
  if (Has(s.compute_s)) return (PredictComputeS(cm, s) - s.compute_s) / s.compute_s;
  return std::numeric_limits<double>::quiet_NaN();
}

double RmsRelative(const CostModel& cm, std::span<const FitSample> samples) {
  double sum = 0;
  int n = 0;
  for (const auto& s : samples) {
    const double r = RelativeError(cm, s);
    if (!Has(r)) continue;
    sum += r * r;
    ++n;
  }
  return n ? std::sqrt(sum / n) : 0.0;
}

FittedCoefficient Coef(const LsqResult& r, int j) { return {r.coef(j), r.std_error(j)}; }

}  // namespace

CostModel FitResult::Apply(const CostModel& base) const {
  CostModel cm = base;
  cm.alpha1 = alpha1.value;
  cm.alpha2 = alpha2.value;
  cm.beta1 = beta1.value;
  cm.alpha3 = alpha3.value;
  cm.beta2 = beta2.value;
  return cm;
}

double PredictComputeS(const CostModel& cm, const FitSample& s) {
  return cm.alpha1 * XAttn(s) + cm.alpha2 * XLin(s) + cm.beta1;
}

double PredictCommS(const CostModel& cm, const FitSample& s) {
  return s.degree > 1 ? cm.alpha3 * XComm(s) + cm.beta2 : 0.0;
}

double PredictTotalS(const CostModel& cm, const FitSample& s) {
  const double a = cm.alpha1 * XAttn(s);
  const double tcm = PredictCommS(cm, s);
  return PredictComputeS(cm, s) + tcm - std::min(a, tcm);
}

FitResult FitCostCoefficients(std::span<const FitSample> samples,
                              const FitOptions& options) {
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const std::string field = "samples[" + std::to_string(i) + "]";
    if (s.degree < 1) throw InputError(field, "degree must be >= 1");
    if (!(s.load.sum_tokens > 0) || !(s.load.sum_attn > 0))
      throw InputError(field, "group load must be > 0");
    if (!(s.bw_bytes_per_s > 0)) throw InputError(field, "bandwidth must be > 0");
    for (double t : {s.compute_s, s.comm_s, s.total_s})
      if (Has(t) && !(t > 0)) throw InputError(field, "times must be > 0");
  }
  FitResult out;
  // --- Eq. 8 on compute samples (or totals of d = 1 groups, where T = Tcp) ---
  std::vector<const FitSample*> comp, comm, total;
  for (const auto& s : samples) {
    if (Has(s.compute_s) || (s.degree == 1 && Has(s.total_s))) comp.push_back(&s);
    if (s.degree > 1 && Has(s.comm_s)) comm.push_back(&s);
    if (Has(s.total_s)) total.push_back(&s);
  }
  if (comp.size() < 3)
    throw InputError("samples", "need at least 3 samples with a compute time (or d = 1 total)");
  {
    Eigen::MatrixXd x(comp.size(), 3);
    Eigen::VectorXd y(comp.size());
    for (size_t i = 0; i < comp.size(); ++i) {
      x(i, 0) = XAttn(*comp[i]);
      x(i, 1) = XLin(*comp[i]);
      x(i, 2) = 1.0;
      y(i) = Has(comp[i]->compute_s) ? comp[i]->compute_s : comp[i]->total_s;
    }
    const LsqResult r = RelativeNnls(x, y);
    out.alpha1 = Coef(r, 0);
    out.alpha2 = Coef(r, 1);
    out.beta1 = Coef(r, 2);
  }
  // --- Eq. 9 on communication samples ---
  if (comm.size() >= 2) {
    Eigen::MatrixXd x(comm.size(), 2);
    Eigen::VectorXd y(comm.size());
    for (size_t i = 0; i < comm.size(); ++i) {
      x(i, 0) = XComm(*comm[i]);
      x(i, 1) = 1.0;
      y(i) = comm[i]->comm_s;
    }
    const LsqResult r = RelativeNnls(x, y);
    out.alpha3 = Coef(r, 0);
    out.beta2 = Coef(r, 1);
  }
  // No split communication times: derive them from totals of d > 1 groups
  // that are clearly communication-bound under the compute fit, where
  // T = Lin + beta1 + Tcm, i.e. Tcm = T - Lin - beta1 > A.
  if (comm.size() < 2) {
    const CostModel cfit = out.Apply(CostModel{});
    std::vector<std::pair<double, double>> derived;  // (x_comm, Tcm)
    for (const FitSample* s : total) {
      if (s->degree < 2) continue;
      const double a = cfit.alpha1 * XAttn(*s);
      const double rest = s->total_s - cfit.alpha2 * XLin(*s) - cfit.beta1;
      if (rest > 1.05 * a && rest > 0) derived.emplace_back(XComm(*s), rest);
    }
    if (derived.size() >= 2) {
      Eigen::MatrixXd x(derived.size(), 2);
      Eigen::VectorXd y(derived.size());
      for (size_t i = 0; i < derived.size(); ++i) {
        x(i, 0) = derived[i].first;
        x(i, 1) = 1.0;
        y(i) = derived[i].second;
      }
      const LsqResult r = RelativeNnls(x, y);
      out.alpha3 = Coef(r, 0);
      out.beta2 = Coef(r, 1);
    }
  }
  out.compute_samples = static_cast<int>(comp.size());
  out.comm_samples = static_cast<int>(comm.size());
  out.total_samples = static_cast<int>(total.size());
  CostModel cm = out.Apply(CostModel{});
  double best_rms = RmsRelative(cm, samples);

  // --- Refinement on totals: alternate (branch of the min per sample, NNLS) ---
  if (options.refine_on_total && total.size() >= 5) {
    CostModel cur = cm;
    std::vector<int> prev_branch;
    for (int it = 0; it < options.max_iterations; ++it) {
      std::vector<int> branch(total.size());
      Eigen::MatrixXd x = Eigen::MatrixXd::Zero(total.size(), 5);
      Eigen::VectorXd y(total.size());
      for (size_t i = 0; i < total.size(); ++i) {
        const FitSample& s = *total[i];
        const bool comm_bound = s.degree > 1 && cur.alpha1 * XAttn(s) <= PredictCommS(cur, s);
        branch[i] = comm_bound;
        x(i, 1) = XLin(s);
        x(i, 2) = 1.0;
        if (comm_bound) {
          x(i, 3) = XComm(s);
          x(i, 4) = 1.0;
        } else {
          x(i, 0) = XAttn(s);
        }
        y(i) = s.total_s;
      }
      if (branch == prev_branch) break;
      prev_branch = branch;
      // Unidentified columns (all zero) keep their current value: move their
      // contribution to the right-hand side (it is zero anyway) and fit the rest.
      std::vector<int> cols;
      for (int j = 0; j < 5; ++j)
        if (x.col(j).cwiseAbs().maxCoeff() > 0) cols.push_back(j);
      Eigen::MatrixXd xs(total.size(), cols.size());
      for (size_t j = 0; j < cols.size(); ++j) xs.col(j) = x.col(cols[j]);
      const LsqResult r = RelativeNnls(xs, y);
      FitResult cand = out;
      FittedCoefficient* fields[5] = {&cand.alpha1, &cand.alpha2, &cand.beta1,
                                      &cand.alpha3, &cand.beta2};
      for (size_t j = 0; j < cols.size(); ++j)
        *fields[cols[j]] = {r.coef(j), r.std_error(j)};
      const CostModel cand_cm = cand.Apply(CostModel{});
      const double rms = RmsRelative(cand_cm, samples);
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

HeldoutReport EvaluateRelativeError(const CostModel& cm,
                                    std::span<const FitSample> samples) {
  HeldoutReport rep;
  auto add = [](ErrorStats& e, double err) {
    e.mean = (e.mean * e.count + err) / (e.count + 1);
    e.max = std::max(e.max, err);
    ++e.count;
  };
  for (const auto& s : samples) {
    const double r = RelativeError(cm, s);
    if (!Has(r)) continue;
    const double err = std::fabs(r);
    add(rep.overall, err);
    add(rep.by_label[s.label], err);
  }
  return rep;
}

}  // namespace fcp
