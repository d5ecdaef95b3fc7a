// libFuzzer target: learning from measured steps (CoefficientLearner,
// MeasuredGroupSamples, RecalibrateCostModel).
//
// Input: a model and a cluster preset, N in [1, 128], up to 32 sequences,
// a strategy among fcp, fcp-ring, megatron and deepspeed, prior and
// measurement sigmas, and up to 4 steps, each a batch and the measured time
// of every group of its plan: a positive factor of the planner's estimate,
// NaN (not measured), or on a few inputs a bad time (0, negative, infinite).
//
// Properties:
//  - Learn returns or throws InputError, nothing else; a bad time or sigma
//    throws InputError;
//  - learnt coefficients are finite and keep the sign of the start's (every
//    one is a positive factor of its start value);
//  - the fit never leaves the measured groups worse explained than the start
//    (RMS log error after <= before: the MAP objective starts at the prior).
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "fcp/presets.h"
#include "fcp/profiler.h"
#include "fcp/scheduler.h"
#include "fuzzed_request.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "learn_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> strategies = {"fcp", "fcp-ring",
                                                      "megatron", "deepspeed"};
  FuzzedDataProvider fdp(data, size);
  const fcp::fuzz::Presets presets = fcp::fuzz::PickPresets(fdp, 128);
  const fcp::ModelPreset& model = *presets.model;
  const fcp::ClusterPreset& cluster = presets.cluster;
  fcp::PlanOptions plan_options;
  plan_options.strategy =
      strategies[fdp.ConsumeIntegralInRange<size_t>(0, strategies.size() - 1)];

  fcp::PlanRequest base;
  base.cluster = {cluster.num_ranks, cluster.ranks_per_node};
  base.cost = fcp::DeriveCostModel(model, cluster);
  base.model = model.shape;
  fcp::RecalibrationOptions options;
  options.model = model.shape;
  const bool bad_sigma = fdp.ConsumeIntegralInRange<int>(0, 15) == 0;
  options.prior_sigma = bad_sigma ? -fdp.ConsumeProbability<double>()
                                  : 0.01 + 2 * fdp.ConsumeProbability<double>();
  options.measurement_sigma = 0.001 + fdp.ConsumeProbability<double>();
  fcp::CoefficientLearner learner(base.cost, options);
  const auto start = fcp::TimingCoefficientFields(base.cost);

  const int steps = fdp.ConsumeIntegralInRange<int>(1, 4);
  for (int step = 0; step < steps; ++step) {
    fcp::PlanRequest req = base;
    req.cost = learner.cost();
    const int k = fdp.ConsumeIntegralInRange<int>(1, 32);
    for (int i = 0; i < k; ++i) {
      fcp::Sequence s;
      s.length_tokens =
          fdp.ConsumeIntegralInRange<int64_t>(1, int64_t{1} << 17);
      s.eta = fdp.ConsumeBool() ? 0.0 : fdp.ConsumeProbability<double>();
      req.sequences.push_back(s);
    }
    fcp::Plan plan;
    try {
      plan = fcp::MakePlan(req, plan_options);
    } catch (const fcp::InputError&) {
      return 0;
    }
    if (plan.status != fcp::PlanStatus::kOk) return 0;
    std::vector<double> times;
    bool bad_time = false;
    for (const auto& mb : plan.micro_batches) {
      for (const auto& g : mb.groups) {
        switch (fdp.ConsumeIntegralInRange<int>(0, 31)) {
          case 0:
            times.push_back(std::numeric_limits<double>::quiet_NaN());
            break;
          case 1:
            times.push_back(fdp.ConsumeBool() ? 0.0 : -1.0), bad_time = true;
            break;
          case 2:
            times.push_back(std::numeric_limits<double>::infinity()),
                bad_time = true;
            break;
          default:
            times.push_back(
                std::max(1e-9, g.est_ms / 1e3) *
                std::exp(4 * (fdp.ConsumeProbability<double>() - 0.5)));
        }
      }
    }
    try {
      learner.Learn(req, plan, times);
      if (bad_time) Fail("accepted a bad time", plan.strategy);
      if (bad_sigma)
        Fail("accepted a bad prior sigma", std::to_string(options.prior_sigma));
    } catch (const fcp::InputError& e) {
      if (!bad_time && !bad_sigma) Fail("InputError on good input", e.what());
      return 0;
    }
    fcp::CostModel learnt = learner.cost();
    const auto now = fcp::TimingCoefficientFields(learnt);
    for (size_t c = 0; c < now.size(); ++c) {
      if (!std::isfinite(*now[c]))
        Fail("coefficient not finite", fcp::kTimingCoefficients[c]);
      if ((*now[c] > 0) != (*start[c] > 0) || (*now[c] < 0) != (*start[c] < 0))
        Fail("coefficient changed sign", fcp::kTimingCoefficients[c]);
    }
    const fcp::Recalibration& r = learner.last();
    if (!(r.rms_rel_after <= r.rms_rel_before * (1 + 1e-9) + 1e-12))
      Fail("fit made the measured groups worse",
           std::to_string(r.rms_rel_before) + " -> " +
               std::to_string(r.rms_rel_after));
  }
  return 0;
}
