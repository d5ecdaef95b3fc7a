// libFuzzer target: the simulator on plans of every fast strategy (issue 18:
// "a fuzz target for the simulator/baselines inputs").
//
// Input: a model and a cluster preset, N in [1, 256], up to 32 sequences
// (lengths 1..2^20, any mask), a strategy (not the MILP ones: their wall-clock
// limits belong to baselines_fuzz), noise sigma in [0, 0.5]. The request is
// planned with the preset's derived cost model, and every kOk plan is run on
// the simulated cluster.
//
// Properties:
//  - MakePlan and SimulatePlan return or throw InputError, nothing else;
//  - a simulated global batch that is not OOM has finite, non-negative times,
//    iter_s >= compute_s, tokens equal to the batch's tokens, a busy fraction
//    in [0, 1] and one end time per micro-batch;
//  - without noise the simulation is deterministic.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/simulator.h"
#include "fuzzed_request.h"

namespace {

[[noreturn]] void Fail(const std::string& strategy, const char* what,
                       const std::string& detail) {
  std::fprintf(stderr, "sim_fuzz: %s: %s: %s\n", strategy.c_str(), what,
               detail.c_str());
  std::abort();
}

bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> strategies = [] {
    std::vector<std::string> out;
    for (const std::string& s : fcp::StrategyNames()) {
      if (s != "flexsp" && s != "optimal") out.push_back(s);
    }
    return out;
  }();
  FuzzedDataProvider fdp(data, size);
  const fcp::fuzz::Presets presets = fcp::fuzz::PickPresets(fdp, 256);
  const fcp::ModelPreset& model = *presets.model;
  const fcp::ClusterPreset& cluster = presets.cluster;
  const std::string strategy =
      strategies[fdp.ConsumeIntegralInRange<size_t>(0, strategies.size() - 1)];

  fcp::PlanRequest req;
  req.cluster = {cluster.num_ranks, cluster.ranks_per_node};
  req.cost = fcp::DeriveCostModel(model, cluster);
  req.model = model.shape;
  const int k = fdp.ConsumeIntegralInRange<int>(1, 32);
  double tokens = 0;
  for (int i = 0; i < k; ++i) {
    fcp::Sequence s;
    s.length_tokens = fdp.ConsumeIntegralInRange<int64_t>(1, int64_t{1} << 20);
    s.eta = fdp.ConsumeBool() ? 0.0 : fdp.ConsumeProbability<double>();
    tokens += static_cast<double>(s.length_tokens);
    req.sequences.push_back(s);
  }
  fcp::sim::SimOptions options;
  options.noise_rel =
      fdp.ConsumeBool() ? 0.0 : 0.5 * fdp.ConsumeProbability<double>();
  options.noise_seed = fdp.ConsumeIntegral<uint64_t>();

  fcp::PlanOptions plan_options;
  plan_options.strategy = strategy;
  fcp::Plan plan;
  fcp::sim::SimResult result;
  const fcp::sim::HardwareModel hw =
      fcp::sim::MakeHardwareModel(model, cluster);
  try {
    plan = fcp::MakePlan(req, plan_options);
    if (plan.status != fcp::PlanStatus::kOk) return 0;
    result = fcp::sim::SimulatePlan(hw, plan, req.sequences, options);
  } catch (const fcp::InputError&) {
    return 0;  // e.g. DeepSpeed degrees that do not divide the head count
  }
  if (result.oom) {
    if (result.oom_message.empty()) Fail(strategy, "OOM without a message", "");
    return 0;
  }
  for (double t :
       {result.iter_s, result.compute_s, result.grad_sync_s,
        result.group_create_s, result.exposed_comm_s, result.tokens_per_s}) {
    if (!FiniteNonNegative(t))
      Fail(strategy, "time not finite and >= 0", std::to_string(t));
  }
  if (result.iter_s + 1e-12 < result.compute_s)
    Fail(strategy, "iter_s < compute_s", "");
  if (result.tokens != tokens)
    Fail(strategy, "tokens differ from the batch's", "");
  if (!(result.busy_fraction >= 0 && result.busy_fraction <= 1 + 1e-9)) {
    Fail(strategy, "busy fraction outside [0, 1]",
         std::to_string(result.busy_fraction));
  }
  if (result.micro_batch_end_s.size() != plan.micro_batches.size()) {
    Fail(strategy, "one end time per micro-batch", "");
  }
  if (options.noise_rel == 0) {
    const fcp::sim::SimResult again =
        fcp::sim::SimulatePlan(hw, plan, req.sequences, options);
    if (again.iter_s != result.iter_s)
      Fail(strategy, "non-deterministic simulation", "");
  }
  return 0;
}
