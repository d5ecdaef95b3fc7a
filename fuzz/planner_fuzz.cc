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
// Half of the inputs also set cost model v2's terms (gamma_*, h, e); a quarter
// plan for group-time noise (group_time_sigma).
// A quarter of inputs put mem_static a hair below mem_capacity (issue 18's
// hang); scripts/fuzz.sh gives every input a timeout, so a hang is a finding.
// Sizes are kept small (K <= 48, N <= 320) so that one input takes
// milliseconds even under ASan; scale is covered by bench/limits_bench.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fcp/io.h"
#include "fcp/scheduler.h"
#include "fuzzed_request.h"

namespace {

using namespace fcp::fuzz;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "planner_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Outcome counts, printed at exit when FCP_FUZZ_STATS is set (to see that the
// corpus reaches real plans, not only rejections).
struct Stats {
  long ok = 0, infeasible = 0, rejected = 0, micro_batches = 0;
  ~Stats() {
    if (std::getenv("FCP_FUZZ_STATS")) {
      std::fprintf(stderr,
                   "planner_fuzz: ok %ld (micro-batches %ld), infeasible %ld, "
                   "rejected %ld\n",
                   ok, micro_batches, infeasible, rejected);
    }
  }
} stats;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  fcp::PlanRequest req = FuzzedRequest(fdp, 320, 48);
  fcp::PlanOptions options;
  options.strategy = fdp.ConsumeBool() ? "fcp" : "fcp-paper";
  const bool check_determinism = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  MaybeNearEqualMemory(fdp, req);
  MaybeV2Terms(fdp, req);
  MaybeGroupTimeSigma(fdp, req);
  if (std::getenv("FCP_FUZZ_DUMP")) DumpRequest(req, options.strategy);
  const bool request_valid = RequestValid(req);

  fcp::Plan plan;
  try {
    plan = fcp::MakePlan(req, options);
  } catch (const fcp::InputError& e) {
    // A valid request may only be refused by the numeric-range rule.
    if (request_valid && !NumericRangeField(e.field())) {
      Fail("InputError for a valid request", e.what());
    }
    ++stats.rejected;
    return 0;
  }
  if (!request_valid) Fail("MakePlan accepted an invalid request", "");

  // Independent infeasibility test: a sequence needs more than N ranks when
  // mem_static + mem_per_token * s / N > mem_capacity.
  const int first_infeasible = FirstInfeasible(req);
  if (plan.status == fcp::PlanStatus::kInfeasible) {
    if (first_infeasible < 0)
      Fail("infeasible, but every sequence fits on N ranks", plan.message);
    if (plan.infeasible_sequence != first_infeasible) {
      Fail("infeasible_sequence is not the first infeasible sequence",
           plan.message);
    }
    if (!plan.micro_batches.empty())
      Fail("infeasible plan has micro-batches", "");
    ++stats.infeasible;
  } else {
    if (first_infeasible >= 0) {
      Fail("ok plan although a sequence cannot fit",
           std::to_string(first_infeasible));
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
    if (WithoutSolverMs(plan) != WithoutSolverMs(again))
      Fail("non-deterministic plan", "");
  }
  return 0;
}
