#include "fcp/gap_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "baselines/optimal.h"
#include "baselines/random_instances.h"
#include "fcp/scheduler.h"
#include "fcp/unknown_names.h"

namespace fcp::baselines {
namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  Plan plan;
  double ms = 0;
  std::string violation;
};

// Solve + EvaluatePlan + ValidatePlan (what MakePlan does), timed, without
// aborting on a violation so that the report can count it.
Timed RunOne(const Strategy& s, const PlanRequest& req, const PlanOptions& po) {
  Timed t;
  const auto start = Clock::now();
  t.plan = s.Solve(req, po);
  t.plan.strategy = std::string(s.name());
  t.plan.num_ranks = req.cluster.num_ranks;
  if (t.plan.status == PlanStatus::kOk) EvaluatePlan(req, t.plan);
  t.ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (t.plan.status == PlanStatus::kOk) t.violation = ValidatePlan(req, t.plan);
  return t;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t idx = static_cast<size_t>(std::ceil(q * v.size())) - 1;
  return v[std::min(idx, v.size() - 1)];
}

}  // namespace

// Long because: one loop over instances x strategies with its bookkeeping
// (gaps, bound violations, failures).
GapReport EvaluateGap(const GapOptions& options) {
  if (options.instances < 1 || options.instances > 1000000)
    throw InputError("instances", "must be in [1, 1000000]");
  if (options.max_sequences < 1 || options.max_sequences > kOptimalMaxSequences)
    throw InputError("max_sequences",
                     fmt::format("must be in [1, {}] (optimal's limit)",
                                 kOptimalMaxSequences));
  if (options.max_ranks < 1 || options.max_ranks > kOptimalMaxRanks)
    throw InputError(
        "max_ranks",
        fmt::format("must be in [1, {}] (optimal's limit)", kOptimalMaxRanks));
  if (!(options.time_limit_s > 0))
    throw InputError("time_limit", "must be > 0");
  GapReport report;
  report.options = options;
  std::vector<std::string> names = options.strategies;
  if (names.empty()) {
    for (const std::string& n : StrategyNames())
      if (n != "optimal" && !n.starts_with("ref-")) names.push_back(n);
  }
  std::vector<const Strategy*> strategies;
  for (const std::string& n : names) {
    const Strategy* s = FindStrategy(n);
    if (s == nullptr) throw InputError("strategies", UnknownStrategyMessage(n));
    strategies.push_back(s);
    report.strategies.push_back(StrategyGap{});
    report.strategies.back().strategy = n;
  }
  const Strategy* optimal = FindStrategy("optimal");
  if (optimal == nullptr)
    throw InputError("strategies", "optimal is not registered");
  std::mt19937_64 rng(options.seed);
  RandomInstanceOptions inst;
  inst.max_sequences = options.max_sequences;
  inst.max_ranks = options.max_ranks;
  PlanOptions po;
  po.time_limit_s = options.time_limit_s;
  po.seed = options.seed;
  std::vector<double> opt_ms;
  for (int i = 0; i < options.instances; ++i) {
    const PlanRequest req = RandomRequest(rng, inst);
    ValidateRequest(req);
    po.strategy = "optimal";
    const Timed best = RunOne(*optimal, req, po);
    if (best.plan.status != PlanStatus::kOk || !best.violation.empty()) {
      throw std::logic_error("optimal failed on instance " + std::to_string(i) +
                             ": " + best.plan.message + best.violation);
    }
    opt_ms.push_back(best.ms);
    if (options.progress) {
      options.progress("[eval gap] instance " + std::to_string(i + 1) + "/" +
                       std::to_string(options.instances));
    }
    const double ref = best.plan.est_ms;
    double min_gap = std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < strategies.size(); ++j) {
      StrategyGap& sg = report.strategies[j];
      po.strategy = sg.strategy;
      const Timed t = RunOne(*strategies[j], req, po);
      sg.mean_solver_ms += t.ms;
      sg.max_solver_ms = std::max(sg.max_solver_ms, t.ms);
      double gap = std::numeric_limits<double>::quiet_NaN();
      if (t.plan.status != PlanStatus::kOk) {
        ++sg.infeasible;
      } else if (!t.violation.empty() &&
                 t.violation != "lower_bound_ms exceeds est_ms") {
        // (A lower-bound violation is a bound problem, not a plan problem:
        // the plan itself is still valid and comparable.)
        ++sg.invalid;
        if (sg.invalid_reasons.size() < 3)
          sg.invalid_reasons.push_back(
              fmt::format("instance {}: {}", i, t.violation));
      } else {
        ++sg.planned;
        sg.multi_micro_batch += t.plan.micro_batches.size() > 1 ? 1 : 0;
        gap = t.plan.est_ms / ref - 1.0;
        min_gap = std::min(min_gap, gap);
      }
      sg.gaps.push_back(gap);
    }
    for (StrategyGap& sg : report.strategies) {
      const double g = sg.gaps.back();
      if (!std::isnan(g) && g <= min_gap + 1e-9) ++sg.closest;
    }
  }
  report.instances = options.instances;
  for (StrategyGap& sg : report.strategies) {
    std::vector<double> ok;
    for (size_t i = 0; i < sg.gaps.size(); ++i) {
      if (std::isnan(sg.gaps[i])) continue;
      ok.push_back(sg.gaps[i]);
      if (sg.worst_instance < 0 || sg.gaps[i] > sg.max_gap) {
        sg.max_gap = sg.gaps[i];
        sg.worst_instance = static_cast<int>(i);
      }
    }
    sg.mean_solver_ms /= std::max(1, options.instances);
    if (!ok.empty()) {
      double sum = 0;
      for (double g : ok) sum += g;
      sg.mean_gap = sum / ok.size();
      sg.p95_gap = Percentile(ok, 0.95);
      sg.min_gap = *std::min_element(ok.begin(), ok.end());
    }
  }
  double sum = 0;
  for (double m : opt_ms) sum += m;
  report.optimal_mean_solver_ms = sum / opt_ms.size();
  report.optimal_max_solver_ms =
      *std::max_element(opt_ms.begin(), opt_ms.end());
  std::stable_sort(report.strategies.begin(), report.strategies.end(),
                   [](const StrategyGap& a, const StrategyGap& b) {
                     return a.mean_gap < b.mean_gap;
                   });
  return report;
}

std::string GapReportToJson(const GapReport& report, int indent) {
  nlohmann::json j;
  j["kind"] =
      "estimated by the planner's cost model (not measured, not simulated)";
  j["seed"] = report.options.seed;
  j["instances"] = report.instances;
  j["max_sequences"] = report.options.max_sequences;
  j["max_ranks"] = report.options.max_ranks;
  j["time_limit_s"] = report.options.time_limit_s;
  j["optimal"] = {{"mean_solver_ms", report.optimal_mean_solver_ms},
                  {"max_solver_ms", report.optimal_max_solver_ms}};
  nlohmann::json arr = nlohmann::json::array();
  for (const StrategyGap& sg : report.strategies) {
    arr.push_back({{"strategy", sg.strategy},
                   {"planned", sg.planned},
                   {"infeasible", sg.infeasible},
                   {"invalid", sg.invalid},
                   {"invalid_examples", sg.invalid_reasons},
                   {"multi_micro_batch", sg.multi_micro_batch},
                   {"closest", sg.closest},
                   {"mean_gap", sg.mean_gap},
                   {"p95_gap", sg.p95_gap},
                   {"max_gap", sg.max_gap},
                   {"min_gap", sg.min_gap},
                   {"worst_instance", sg.worst_instance},
                   {"mean_solver_ms", sg.mean_solver_ms},
                   {"max_solver_ms", sg.max_solver_ms}});
  }
  j["strategies"] = arr;
  return j.dump(indent);
}

std::string GapReportToTable(const GapReport& report) {
  std::string out = fmt::format(
      "Optimality gap vs `optimal` (planner cost-model estimates), {} random "
      "instances, "
      "seed {}, K <= {}, N <= {}\n",
      report.instances, report.options.seed, report.options.max_sequences,
      report.options.max_ranks);
  out += fmt::format(
      "{:<14} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>10} {:>10}\n",
      "strategy", "mean", "p95", "max", "min", "closest", "planned", "infeas",
      "multi", "mean_ms", "max_ms");
  auto pct = [](double g) { return fmt::format("{:.2f}%", 100.0 * g); };
  for (const StrategyGap& sg : report.strategies) {
    out += fmt::format(
        "{:<14} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>10.3f} "
        "{:>10.3f}\n",
        sg.strategy, pct(sg.mean_gap), pct(sg.p95_gap), pct(sg.max_gap),
        pct(sg.min_gap), sg.closest, sg.planned, sg.infeasible,
        sg.multi_micro_batch, sg.mean_solver_ms, sg.max_solver_ms);
    for (const std::string& r : sg.invalid_reasons)
      out += "  INVALID " + r + "\n";
  }
  out += fmt::format(
      "{:<14} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>10.3f} "
      "{:>10.3f}\n",
      "optimal", "0.00%", "0.00%", "0.00%", "0.00%", "-", report.instances, 0,
      0, report.optimal_mean_solver_ms, report.optimal_max_solver_ms);
  out +=
      "gap = est_ms / optimal_est_ms - 1; closest = instances with the "
      "smallest gap "
      "(ties count); multi = plans using > 1 micro-batch; solver times are "
      "wall-clock "
      "on this machine.\n";
  return out;
}

}  // namespace fcp::baselines
