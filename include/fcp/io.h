// JSON and text I/O for batches, cost models, plans and length files.
// Parsers throw InputError naming the field ("sequences[3]",
// "cost_model.alpha1"). Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp {

// Where a cost-model coefficient's value came from (plan note cost_model).
enum class CoefficientSource {
  kPreset,   // derived from the model and cluster presets
  kInput,    // the input's cost_model (or a --cost-model file of coefficients)
  kProfile,  // the cost_model of an `fcp profile` report (--cost-model)
  kUnsetZero,  // a v2 term left unset where timing coefficients were set: 0
};
// One source per entry of kCostCoefficients (fcp/cost_coefficients.h).
using CostSources = std::vector<CoefficientSource>;

// "input: alpha1, alpha2; preset: mem_static; 0 (unset v2 term: ...): ..."
// — the plan note `cost_model`.
std::string CostSourcesNote(const CostSources& sources);

// A parsed `fcp plan` input (format in the README).
struct BatchInput {
  PlanRequest request;
  CostSources cost_sources;  // where each coefficient of request.cost came from
  std::string cluster_name;  // preset name, or "" for an inline cluster
  std::string model_name;    // preset name, or "" when absent
};

// Parses the batch JSON. `cluster` defaults to kDefaultCluster; `model` is
// optional; given `cost_model` keys override the model preset's coefficients
// (a complete cost_model needs no model). Limits: at most 10^7 sequences,
// lengths in [1, 2^40], N in [1, 2^20], nesting 16 deep, at most 2^16 JSON
// values outside "sequences", no NUL byte. The text is parsed as a stream:
// sequences are converted one at a time, so memory is the parsed batch
// (24 bytes a sequence), not a JSON document tree.
BatchInput ParseBatchJson(std::string_view text);
// The same, read from a file or "-" (stdin) while parsing; the text is never
// held in memory as a whole (docs/reliability.md states the peak).
BatchInput ReadBatchJson(const std::string& path);

// Overrides fields of `base` with the keys of a cost_model JSON object given as
// text, or of the "cost_model" member of an `fcp profile` report. Unknown keys
// are an error naming the key, beside "cost_model" too (there only the report's
// own keys, with their types, are accepted). The unset rule (docs/design.md
// §2): an object that sets any timing coefficient (a `fitted` entry of
// kCostCoefficients) leaves every v2 term it does not set at 0, the paper's
// model; one that sets none keeps `base`'s. `sources` (optional, one entry
// per coefficient) is updated for every field the object set or zeroed.
CostModel ParseCostModelJson(std::string_view text, const CostModel& base,
                             CostSources* sources = nullptr);
// The same, read from a file or "-" (stdin).
CostModel ReadCostModelJson(const std::string& path, const CostModel& base,
                            CostSources* sources = nullptr);

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

// Reads a whole file or "-" (stdin), at most 2 GiB; pipes, FIFOs and
// /dev/stdin work. InputError(path, ...) when it cannot be opened or read, is a
// directory, or is larger.
std::string ReadFileOrStdin(const std::string& path);

// Writes `text` to `path` by AtomicFile's policy (below): devices and FIFOs
// in place, anything else replaced atomically, so a failed write leaves the
// old file as it was. InputError(path, "cannot write '<path>': <reason>").
void WriteTextFile(const std::string& path, std::string_view text);
// An output file that appears at `path` only when complete: a mkstemp file
// in the same directory (mode 0644) renamed over `path` by Commit(); removed
// when destroyed uncommitted. A symlink at `path` is replaced, not followed;
// an existing device, FIFO or socket (/dev/null, /dev/stdout) is written in
// place.
// Errors are InputError(field, "cannot write '<path>': <reason>") with the
// path's control characters escaped. Not copyable.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const std::string& field);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  int fd() const { return fd_; }  // for a child process's stdout
  void Write(std::string_view data);
  // Flushes to disk and renames into place.
  void Commit();

 private:
  std::string path_, field_, temp_path_;
  int fd_ = -1;
};
// Writes `contents` to `path` through an AtomicFile.
void WriteFileAtomically(const std::string& path, std::string_view contents,
                         const std::string& field);
// Checks before a long run that the directory `path` would be written in
// exists, so that a typo fails at once rather than after the work.
// InputError(field) naming the path and the directory.
void CheckOutputDirectory(const std::string& path, const std::string& field);
// `text` with control characters as \n, \r, \t or \xNN, for one-line
// error messages that echo user input (paths).
std::string EscapeForMessage(std::string_view text);

}  // namespace fcp
