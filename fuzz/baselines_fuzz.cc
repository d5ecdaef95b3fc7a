// libFuzzer target: every registered strategy (the baselines as well as fcp)
// on fuzzed small requests, including near-equal memory (issue 18) and cost
// model v2's terms.
//
// Properties:
//  - MakePlan returns or throws fcp::InputError (nothing else);
//  - an invalid request (rules restated in fuzzed_request.h) is an
//    InputError; a valid one is refused only by the numeric-range rule or by
//    a strategy's own documented limits (optimal: small instances only;
//    deepspeed: degrees dividing the head count);
//  - kOk plans pass ValidatePlan with finite estimates; a request with a
//    sequence that cannot fit on all N ranks is never kOk;
//  - deterministic strategies give the identical plan twice (on a sample).
// Every input has a timeout in scripts/fuzz.sh: a strategy that does not stop
// is a finding. Sizes stay small (K <= 16, N <= 64) and flexsp (the one
// time-limited strategy) gets a 0.5 s limit so that one input takes well
// under a second.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fcp/io.h"
#include "fcp/scheduler.h"
#include "fuzzed_request.h"

namespace {

using namespace fcp::fuzz;

[[noreturn]] void Fail(const std::string& strategy, const char* what,
                       const std::string& detail) {
  std::fprintf(stderr, "baselines_fuzz: %s: %s: %s\n", strategy.c_str(), what,
               detail.c_str());
  std::abort();
}

// flexsp stops at a wall-clock limit, so its plan may differ run to run
// (docs/reliability.md, Determinism); `optimal` is an exhaustive DP, so it
// must plan identically twice like the others.
bool IsTimeLimited(const std::string& strategy) { return strategy == "flexsp"; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> strategies = fcp::StrategyNames();
  FuzzedDataProvider fdp(data, size);
  fcp::PlanRequest req = FuzzedRequest(fdp, 64, 16);
  const std::string strategy =
      strategies[fdp.ConsumeIntegralInRange<size_t>(0, strategies.size() - 1)];
  fcp::PlanOptions options;
  options.strategy = strategy;
  options.time_limit_s = 0.5;
  options.cp_degree =
      fdp.ConsumeBool() ? 0 : fdp.ConsumeIntegralInRange<int>(-1, 70);
  const bool check_determinism = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  MaybeNearEqualMemory(fdp, req);
  MaybeV2Terms(fdp, req);
  if (std::getenv("FCP_FUZZ_DUMP")) DumpRequest(req, strategy);
  const bool request_valid = RequestValid(req);

  fcp::Plan plan;
  try {
    plan = fcp::MakePlan(req, options);
  } catch (const fcp::InputError& e) {
    if (std::string(e.what()).empty()) Fail(strategy, "empty InputError", "");
    return 0;  // invalid, numeric range, or the strategy's own limits
  }
  if (!request_valid)
    Fail(strategy, "MakePlan accepted an invalid request", "");
  if (plan.status == fcp::PlanStatus::kOk) {
    const int first_infeasible = FirstInfeasible(req);
    if (first_infeasible >= 0) {
      Fail(strategy, "ok plan although a sequence cannot fit",
           std::to_string(first_infeasible));
    }
    const std::string v = fcp::ValidatePlan(req, plan);
    if (!v.empty()) Fail(strategy, "ValidatePlan", v);
    if (!std::isfinite(plan.est_ms) || !std::isfinite(plan.lower_bound_ms)) {
      Fail(strategy, "non-finite estimate", fcp::PlanToJson(plan, -1));
    }
  } else if (!plan.micro_batches.empty()) {
    Fail(strategy, "infeasible plan has micro-batches", "");
  }
  if (check_determinism && !IsTimeLimited(strategy)) {
    const fcp::Plan again = fcp::MakePlan(req, options);
    if (WithoutSolverMs(plan) != WithoutSolverMs(again))
      Fail(strategy, "non-deterministic plan", "");
  }
  return 0;
}
