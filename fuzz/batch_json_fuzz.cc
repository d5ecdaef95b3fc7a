// libFuzzer target: the batch / cluster / cost-model JSON reader.
//
// Properties checked on every input:
//  - ParseBatchJson and ParseCostModelJson either return or throw
//    fcp::InputError (any other exception escapes and libFuzzer reports it);
//  - a parsed batch satisfies the documented limits and passes
//    ValidateRequest, except for its numeric-range rule (coefficients whose
//    times overflow for these lengths), which only MakePlan applies;
//  - a parsed cost model round-trips exactly through CostModelToJson;
//  - small parsed batches are planned end to end (strategy fcp): the plan is
//    ok and valid, or infeasible, or an InputError.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "batch_json_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

bool SameCost(const fcp::CostModel& a, const fcp::CostModel& b) {
  return a.alpha1 == b.alpha1 && a.alpha2 == b.alpha2 && a.beta1 == b.beta1 &&
         a.alpha3 == b.alpha3 && a.beta2 == b.beta2 &&
         a.bw_intra_node == b.bw_intra_node &&
         a.bw_inter_node == b.bw_inter_node &&
         a.mem_per_token == b.mem_per_token && a.mem_static == b.mem_static &&
         a.mem_capacity == b.mem_capacity;
}

void CheckBatch(std::string_view text) {
  fcp::BatchInput in;
  try {
    in = fcp::ParseBatchJson(text);
  } catch (const fcp::InputError& e) {
    if (std::string_view(e.what()).empty()) Fail("empty InputError", "");
    return;
  }
  const auto& req = in.request;
  if (req.sequences.empty()) Fail("accepted an empty batch", "");
  for (const auto& s : req.sequences) {
    if (s.length_tokens < 1 || s.length_tokens > (int64_t{1} << 40) ||
        !(s.eta >= 0) || !(s.eta <= 1)) {
      Fail("accepted an out-of-range sequence",
           std::to_string(s.length_tokens));
    }
  }
  try {
    fcp::ValidateRequest(req);
  } catch (const fcp::InputError& e) {
    // Only the numeric-range rule, which depends on the whole request (times
    // that would overflow, memory above 2^62 bytes per rank or for the batch
    // on one rank), is left to MakePlan.
    if (e.field() != "cost_model" && e.field() != "cost_model.mem_capacity" &&
        e.field() != "cost_model.mem_per_token") {
      Fail("parser accepted what ValidateRequest rejects", e.what());
    }
    return;
  }
  // Plan only small instances: the fuzzer is about the reader, and the
  // planner has its own target.
  if (req.sequences.size() <= 32 && req.cluster.num_ranks <= 512) {
    try {
      const fcp::Plan plan = fcp::MakePlan(req, {});
      if (plan.status == fcp::PlanStatus::kOk) {
        const std::string v = fcp::ValidatePlan(req, plan);
        if (!v.empty()) Fail("invalid plan", v);
      }
    } catch (const fcp::InputError&) {
      // Fine: e.g. coefficients whose times overflow for these lengths.
    }
  }
}

void CheckCostModel(std::string_view text) {
  static const fcp::CostModel base =
      fcp::DeriveCostModel(*fcp::FindModelPreset(fcp::kDefaultModel),
                           *fcp::FindClusterPreset(fcp::kDefaultCluster));
  fcp::CostModel cm;
  try {
    cm = fcp::ParseCostModelJson(text, base);
  } catch (const fcp::InputError&) {
    return;
  }
  const std::string dumped = fcp::CostModelToJson(cm, -1);
  fcp::CostModel again;
  try {
    again = fcp::ParseCostModelJson(dumped, fcp::CostModel{});
  } catch (const fcp::InputError& e) {
    Fail("CostModelToJson output does not parse",
         std::string(e.what()) + " in " + dumped);
  }
  if (!SameCost(cm, again)) Fail("cost model does not round-trip", dumped);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckBatch(text);
  CheckCostModel(text);
  return 0;
}
