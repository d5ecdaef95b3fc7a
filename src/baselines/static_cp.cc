// `megatron` (Megatron-LM static ring CP) and `deepspeed` (DeepSpeed-Ulysses
// static sequence parallelism). docs/design.md §4; docs/baselines.md.
#include "baselines/static_cp.h"

#include <limits>
#include <string>

#include "baselines/common.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"
#include "planner/balanced_static.h"

namespace fcp::baselines {
namespace {

// The static plan on degree c with the requested dealing.
Plan StaticPlan(const PlanRequest& request, int c, CommKind comm,
                Dealing dealing) {
  if (dealing == Dealing::kLoader)
    return StaticDataParallelPlan(request, c, comm);
  auto mbs = planner::BalancedStaticMicroBatches(request, c, comm);
  FCP_CHECK(
      mbs.has_value());  // callers checked c | N and that every sequence fits
  Plan plan;
  plan.num_ranks = request.cluster.num_ranks;
  plan.micro_batches = std::move(*mbs);
  return plan;
}

const char* DealingName(Dealing d) {
  return d == Dealing::kLoader ? "data-loader order" : "balanced by work (LPT)";
}

Plan SolveStatic(std::string_view name, const PlanRequest& request,
                 const PlanOptions& options, const std::vector<int>& allowed,
                 CommKind comm, const std::string& rule) {
  const int n = request.cluster.num_ranks;
  if (options.cp_degree != 0) {
    const int c = options.cp_degree;
    bool ok = false;
    for (int a : allowed) ok |= a == c;
    if (!ok) {
      throw InputError("cp_degree", std::string(name) + " needs " + rule +
                                        " (got " + std::to_string(c) + ")");
    }
    const int bad = FirstNotFitting(request, c);
    if (bad >= 0) {
      return InfeasiblePlan(name, request, bad,
                            "sequences[" + std::to_string(bad) +
                                "] does not fit in memory on cp_degree " +
                                std::to_string(c) + " ranks");
    }
    Plan plan = StaticPlan(request, c, comm, options.dealing);
    plan.notes["dealing"] = DealingName(options.dealing);
    plan.notes["cp_degree"] = std::to_string(c);
    plan.notes["dp_degree"] = std::to_string(n / c);
    plan.notes["cp_degree_source"] = "fixed (--cp)";
    return plan;
  }
  Plan best;
  double best_ms = std::numeric_limits<double>::infinity();
  int best_c = 0;
  std::string tried;
  for (int c : allowed) {
    if (FirstNotFitting(request, c) >= 0) continue;
    Plan plan = StaticPlan(request, c, comm, options.dealing);
    const double ms = EstimateMs(request, plan);
    if (!tried.empty()) tried += ",";
    tried += std::to_string(c) + ":" + FormatDouble(ms, 5) + "ms";
    if (ms < best_ms) {
      best_ms = ms;
      best = std::move(plan);
      best_c = c;
    }
  }
  if (best_c == 0) {
    // No allowed degree holds every sequence: name the sequence that needs the
    // most ranks.
    int worst = 0;
    int64_t worst_d = 0;
    for (size_t k = 0; k < request.sequences.size(); ++k) {
      const int64_t d =
          MinDegree(request.cost, GroupLoad::Of(request.sequences[k]));
      if (d > worst_d) worst_d = d, worst = static_cast<int>(k);
    }
    return InfeasiblePlan(name, request, worst,
                          "sequences[" + std::to_string(worst) + "] needs " +
                              std::to_string(worst_d) +
                              " ranks; no allowed degree (" + rule +
                              ") holds it");
  }
  best.notes["dealing"] = DealingName(options.dealing);
  best.notes["cp_degree"] = std::to_string(best_c);
  best.notes["dp_degree"] = std::to_string(n / best_c);
  best.notes["cp_degree_source"] =
      "tuned (best estimated makespan among " + rule + ")";
  best.notes["cp_degree_candidates"] = tried;
  return best;
}

}  // namespace

std::vector<int> MegatronDegrees(int num_ranks) {
  std::vector<int> out;
  for (int c = 1; c <= num_ranks; ++c) {
    if (num_ranks % c == 0) out.push_back(c);
  }
  return out;
}

std::vector<int> UlyssesDegrees(int num_ranks, int q_heads) {
  std::vector<int> out;
  // DeepSpeed-Ulysses splits attention heads across the group: the degree
  // must divide the head count (no power-of-two rule); c | N for replicas.
  for (int c = 1; c <= num_ranks; ++c) {
    if (num_ranks % c == 0 && q_heads % c == 0) out.push_back(c);
  }
  return out;
}

std::vector<int64_t> MegatronStrategy::SettingCandidates(
    const PlanRequest& request) const {
  const std::vector<int> degrees = MegatronDegrees(request.cluster.num_ranks);
  return {degrees.begin(), degrees.end()};
}

std::vector<int64_t> DeepSpeedStrategy::SettingCandidates(
    const PlanRequest& request) const {
  const std::vector<int> degrees = UlyssesDegrees(
      request.cluster.num_ranks, ShapeOrDefault(request, nullptr).q_heads);
  return {degrees.begin(), degrees.end()};
}

Plan MegatronStrategy::Solve(const PlanRequest& request,
                             const PlanOptions& options) const {
  return SolveStatic(
      name(), request, options, MegatronDegrees(request.cluster.num_ranks),
      CommKind::kRing,
      "a divisor of N = " + std::to_string(request.cluster.num_ranks));
}

Plan DeepSpeedStrategy::Solve(const PlanRequest& request,
                              const PlanOptions& options) const {
  bool fallback = false;
  const ModelShape shape = ShapeOrDefault(request, &fallback);
  Plan plan = SolveStatic(
      name(), request, options,
      UlyssesDegrees(request.cluster.num_ranks, shape.q_heads),
      CommKind::kAllToAll,
      "a divisor of N = " + std::to_string(request.cluster.num_ranks) +
          " and q_heads = " + std::to_string(shape.q_heads));
  plan.notes["q_heads"] =
      std::to_string(shape.q_heads) +
      (fallback ? " (model absent: default model preset " + shape.name + ")"
                : "");
  return plan;
}

}  // namespace fcp::baselines
