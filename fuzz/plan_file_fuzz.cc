// libFuzzer target: `fcp simulate --plan` files (fcp::sim::ParsePlannedBatches,
// issue 30), i.e. plans from an untrusted source.
//
// Properties: the parser returns or throws fcp::InputError, nothing else (no
// crash, no std::bad_alloc: nesting and values are capped); every returned
// plan passes CheckPlanShape for its own batch (the shared validator: every
// rank in [0, N) once per micro-batch, every sequence exactly once), its
// estimates are finite and non-negative, and parsing is deterministic.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/experiment.h"
#include "fcp/io.h"
#include "fcp/plan_check.h"
#include "fcp/scheduler.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "plan_file_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<fcp::sim::PlannedBatch> batches;
  try {
    batches = fcp::sim::ParsePlannedBatches(text);
  } catch (const fcp::InputError&) {
    return 0;
  }
  if (batches.empty()) Fail("no batches returned without an error", "");
  for (size_t i = 0; i < batches.size(); ++i) {
    const fcp::PlanRequest& req = batches[i].batch.request;
    const fcp::Plan& plan = batches[i].plan;
    try {
      fcp::CheckPlanShape(req, plan);
    } catch (const fcp::InputError& e) {
      Fail("a returned plan fails CheckPlanShape", e.what());
    }
    if (!std::isfinite(plan.est_ms) || plan.est_ms < 0)
      Fail("bad est_ms", std::to_string(i));
    for (const fcp::MicroBatchPlan& mb : plan.micro_batches) {
      for (const fcp::GroupPlan& g : mb.groups) {
        if (!std::isfinite(g.est_ms) || g.est_ms < 0)
          Fail("bad group est_ms", std::to_string(i));
      }
    }
  }
  const std::vector<fcp::sim::PlannedBatch> again =
      fcp::sim::ParsePlannedBatches(text);
  if (again.size() != batches.size()) Fail("non-deterministic", "batch count");
  for (size_t i = 0; i < again.size(); ++i) {
    if (fcp::PlanToJson(again[i].plan, -1) !=
        fcp::PlanToJson(batches[i].plan, -1))
      Fail("non-deterministic", "plan " + std::to_string(i));
  }
  return 0;
}
