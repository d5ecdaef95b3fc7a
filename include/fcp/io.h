// JSON and text I/O for batches, cost models, plans and length files.
// Parsers throw InputError naming the field ("sequences[3]", "cost_model.alpha1").
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp {

// A parsed `fcp plan` input (format in the README).
struct BatchInput {
  PlanRequest request;
  std::string cluster_name;  // preset name, or "" for an inline cluster
  std::string model_name;    // preset name, or "" when absent
};

// Parses the batch JSON. `cluster` defaults to kDefaultCluster; `model` is
// optional; given `cost_model` keys override the model preset's coefficients
// (a complete cost_model needs no model). Limits: at most 10^7 sequences,
// lengths in [1, 2^40], N in [1, 2^20].
BatchInput ParseBatchJson(std::string_view text);

// Overrides fields of `base` with the keys of a cost_model JSON object given as
// text (the format `fcp profile` writes; a top-level {"cost_model": {...}} is
// accepted too). Unknown keys are an error.
CostModel ParseCostModelJson(std::string_view text, const CostModel& base);

// Cost model as the JSON object of the input format.
std::string CostModelToJson(const CostModel& cm, int indent = 2);

// The plan as the output JSON of `fcp plan` (README). `indent` < 0: one line.
std::string PlanToJson(const Plan& plan, int indent = 2);

// A plan as `fcp plan --format json` prints it, for `request` (the batch it
// was made for). Checks structure only: status "ok", ranks == N, every rank
// in [0, N) and used once per micro-batch, every sequence scheduled exactly
// once, comm "ring"/"all-to-all"; unknown keys are errors. Estimates in the
// text are ignored and recomputed (EvaluatePlan). Errors are InputError with
// the field under `field` ("plan.micro_batches[0].groups[2].ranks").
Plan ParsePlanJson(const nlohmann::json& plan_json, const PlanRequest& request,
                   const std::string& field = "plan");

// Lengths from text: one integer per line, or CSV whose header has a `tokens`
// column. Blank lines, lines starting with '#' and zero lengths (empty
// documents: nothing to train on) are skipped. Throws
// InputError("line N", ...) on a bad line.
std::vector<int64_t> ParseLengths(std::string_view text);
// Reads and parses a file; InputError(path, ...) when it cannot be read.
std::vector<int64_t> ReadLengthsFile(const std::string& path);

// Reads a whole file or "-" (stdin), at most 2 GiB. InputError(path, ...) on
// failure or when larger.
std::string ReadFileOrStdin(const std::string& path);

}  // namespace fcp
