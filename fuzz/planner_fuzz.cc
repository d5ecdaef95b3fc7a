// libFuzzer target: fcp::MakePlan (strategies fcp and fcp-paper) driven by a
// fuzzed batch, cluster and cost model.
//
// Properties:
//  - MakePlan returns or throws fcp::InputError (nothing else);
//  - an InputError for every request that breaks the documented rules
//    (restated here independently), and for valid ones only from the
//    numeric-range rule (times that would overflow, memory above 2^62 bytes);
//  - kOk plans pass ValidatePlan, have finite estimates and a bound <= est;
//  - kInfeasible exactly when some sequence needs more than N ranks of memory
//    (recomputed here), naming such a sequence;
//  - planning twice gives the identical plan (determinism), on a sample.
// Sizes are kept small (K <= 48, N <= 320) so that one input takes
// milliseconds even under ASan; scale is covered by bench/limits_bench.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "fcp/io.h"
#include "fcp/scheduler.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "planner_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// A coefficient: mostly realistic magnitudes, sometimes extreme or invalid.
double Coefficient(FuzzedDataProvider& fdp, double typical) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return 0.0;
    case 1: return std::numeric_limits<double>::denorm_min();
    case 2: return 1e300;
    case 3: return std::numeric_limits<double>::max();
    case 4: return -typical;
    case 5: return std::numeric_limits<double>::quiet_NaN();
    case 6: return std::numeric_limits<double>::infinity();
    case 7: return typical * std::ldexp(1.0, fdp.ConsumeIntegralInRange<int>(-60, 60));
    default: return typical * (0.25 + 4 * fdp.ConsumeProbability<double>());
  }
}

int64_t Length(FuzzedDataProvider& fdp) {
  const int log2 = fdp.ConsumeIntegralInRange<int>(0, 41);
  if (log2 == 41) return fdp.ConsumeIntegralInRange<int64_t>(-2, 0);  // invalid
  const int64_t lo = int64_t{1} << (log2 > 0 ? log2 - 1 : 0);
  const int64_t hi = int64_t{1} << log2;
  return fdp.ConsumeIntegralInRange<int64_t>(lo, hi);
}

// Outcome counts, printed at exit when FCP_FUZZ_STATS is set (to see that the
// corpus reaches real plans, not only rejections).
struct Stats {
  long ok = 0, infeasible = 0, rejected = 0, micro_batches = 0;
  ~Stats() {
    if (std::getenv("FCP_FUZZ_STATS")) {
      std::fprintf(stderr, "planner_fuzz: ok %ld (micro-batches %ld), infeasible %ld, rejected %ld\n",
                   ok, micro_batches, infeasible, rejected);
    }
  }
} stats;

std::string WithoutSolverMs(const fcp::Plan& plan) {
  fcp::Plan copy = plan;
  copy.solver_ms = 0;
  return fcp::PlanToJson(copy, -1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  fcp::PlanRequest req;
  req.cluster.num_ranks = fdp.ConsumeIntegralInRange<int>(-1, 320);
  req.cluster.ranks_per_node = fdp.ConsumeIntegralInRange<int>(-1, 40);
  fcp::CostModel& cm = req.cost;
  cm.alpha1 = Coefficient(fdp, 1e-11);
  cm.alpha2 = Coefficient(fdp, 1e-6);
  cm.beta1 = Coefficient(fdp, 1e-3);
  cm.alpha3 = Coefficient(fdp, 1e5);
  cm.beta2 = Coefficient(fdp, 1e-4);
  cm.bw_intra_node = Coefficient(fdp, 2e11);
  cm.bw_inter_node = Coefficient(fdp, 5e10);
  cm.mem_per_token = Coefficient(fdp, 5e5);
  cm.mem_static = Coefficient(fdp, 2e10);
  cm.mem_capacity = Coefficient(fdp, 6.4e10);
  const int k = fdp.ConsumeIntegralInRange<int>(0, 48);
  for (int i = 0; i < k; ++i) {
    fcp::Sequence s;
    s.length_tokens = Length(fdp);
    switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: s.eta = 1.0; break;
      case 1: s.eta = fdp.ConsumeProbability<double>(); break;
      case 2: s.eta = fdp.ConsumeBool() ? -0.5 : std::numeric_limits<double>::quiet_NaN(); break;
      default: s.eta = 0.0; break;
    }
    req.sequences.push_back(s);
  }
  fcp::PlanOptions options;
  options.strategy = fdp.ConsumeBool() ? "fcp" : "fcp-paper";
  const bool check_determinism = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;

  if (std::getenv("FCP_FUZZ_DUMP")) {  // reproduce a finding with `fcp plan`
    std::string seqs;
    char buf[96];
    for (const fcp::Sequence& s : req.sequences) {
      std::snprintf(buf, sizeof buf, "%s{\"length\": %lld, \"eta\": %.17g}", seqs.empty() ? "" : ", ",
                    static_cast<long long>(s.length_tokens), s.eta);
      seqs += buf;
    }
    std::fprintf(stderr,
                 "{\"cluster\": {\"ranks\": %d, \"ranks_per_node\": %d},\n \"cost_model\": %s,\n"
                 " \"sequences\": [%s]}\nstrategy: %s\n",
                 req.cluster.num_ranks, req.cluster.ranks_per_node,
                 fcp::CostModelToJson(cm, -1).c_str(), seqs.c_str(), options.strategy.c_str());
  }
  // Independent statement of the documented input rules (scheduler.h,
  // types.h), without the numeric-range rule.
  auto finite_ge0 = [](double x) { return std::isfinite(x) && x >= 0; };
  bool request_valid = req.cluster.num_ranks >= 1 && req.cluster.ranks_per_node >= 1 && k >= 1 &&
                       finite_ge0(cm.alpha1) && finite_ge0(cm.alpha2) && finite_ge0(cm.beta1) &&
                       finite_ge0(cm.alpha3) && finite_ge0(cm.beta2) &&
                       finite_ge0(cm.mem_per_token) && finite_ge0(cm.mem_static) &&
                       finite_ge0(cm.bw_intra_node) && cm.bw_intra_node > 0 &&
                       finite_ge0(cm.bw_inter_node) && cm.bw_inter_node > 0 &&
                       std::isfinite(cm.mem_capacity) && cm.mem_capacity > cm.mem_static;
  for (const fcp::Sequence& s : req.sequences) {
    request_valid &= s.length_tokens >= 1 && s.length_tokens <= (int64_t{1} << 40) &&
                     s.eta >= 0 && s.eta <= 1;
  }

  fcp::Plan plan;
  try {
    plan = fcp::MakePlan(req, options);
  } catch (const fcp::InputError& e) {
    // A valid request may only be refused by the numeric-range rule: its
    // times would overflow (field cost_model) or its memory exceeds 2^62
    // bytes (cost_model.mem_capacity).
    if (request_valid && e.field() != "cost_model" && e.field() != "cost_model.mem_capacity") {
      Fail("InputError for a valid request", e.what());
    }
    ++stats.rejected;
    return 0;
  }
  if (!request_valid) Fail("MakePlan accepted an invalid request", "");

  // Independent infeasibility test: a sequence needs more than N ranks when
  // mem_static + mem_per_token * s / N > mem_capacity.
  int first_infeasible = -1;
  for (int i = 0; i < k && first_infeasible < 0; ++i) {
    const double per_rank = cm.mem_static + cm.mem_per_token *
                                                static_cast<double>(req.sequences[i].length_tokens) /
                                                req.cluster.num_ranks;
    if (per_rank > cm.mem_capacity) first_infeasible = i;
  }
  if (plan.status == fcp::PlanStatus::kInfeasible) {
    if (first_infeasible < 0) Fail("infeasible, but every sequence fits on N ranks", plan.message);
    if (plan.infeasible_sequence != first_infeasible) {
      Fail("infeasible_sequence is not the first infeasible sequence", plan.message);
    }
    if (!plan.micro_batches.empty()) Fail("infeasible plan has micro-batches", "");
    ++stats.infeasible;
  } else {
    if (first_infeasible >= 0) {
      Fail("ok plan although a sequence cannot fit", std::to_string(first_infeasible));
    }
    const std::string v = fcp::ValidatePlan(req, plan);
    if (!v.empty()) Fail("ValidatePlan", v);
    if (!std::isfinite(plan.est_ms) || !std::isfinite(plan.lower_bound_ms)) {
      Fail("non-finite estimate", fcp::PlanToJson(plan, -1));
    }
    ++stats.ok;
    stats.micro_batches += static_cast<long>(plan.micro_batches.size());
  }
  if (check_determinism) {
    const fcp::Plan again = fcp::MakePlan(req, options);
    if (WithoutSolverMs(plan) != WithoutSolverMs(again)) Fail("non-deterministic plan", "");
  }
  return 0;
}
