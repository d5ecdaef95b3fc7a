// `fcp eval search`: fcp's distance to the local-search reference
// (local_search.h) at realistic sizes (issue 32): batches of hundreds of
// sequences from a dataset or real lengths, on cluster presets of 64-256
// ranks, with the presets' derived coefficients and the model's shape. Every
// figure is an estimate of the planner's cost model (the plan estimate fcp
// minimises), not a measurement or a simulation. Library side of the
// command; the CLI only parses and prints. Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fcp/local_search.h"

namespace fcp::baselines {

struct SearchEvalOptions {
  int sequences = 512;  // per batch
  std::vector<int> ranks = {64, 128, 256};
  std::vector<std::string> clusters = {"h100-8x8", "ascend910c-4x16"};
  std::string model = "qwen3-8b";
  std::string dataset = "github";  // when `lengths` is empty
  std::vector<int64_t> lengths;    // real lengths to sample from, if given
  std::string lengths_name;        // how to name them in the report
  int batches = 1;                 // per (cluster, ranks); seeds seed, seed+1..
  uint64_t seed = 1;
  LocalSearchOptions search;  // per instance (its seed: search.seed)
  // The plans the search starts from, of DefaultSearchStarts' (one group of
  // all ranks is always one); empty: that group alone. fcp's, the
  // heuristics' and the static plans' estimates are reported either way.
  std::vector<std::string> starts = {"fcp",      "ref-share", "ref-bisect",
                                     "ref-grow", "megatron",  "deepspeed"};
  // Called before each instance ("[eval search] instance i/I ..."); may be
  // empty.
  std::function<void(const std::string&)> progress;
};

struct SearchEvalRow {
  std::string cluster;
  int ranks = 0;
  uint64_t batch_seed = 0;
  double fcp_ms = 0;        // fcp's plan estimate
  double heuristic_ms = 0;  // best of the reference heuristics
  std::string heuristic;
  double static_ms = 0;     // best balanced static plan (megatron, deepspeed)
  double reference_ms = 0;  // the local search's best
  double bound_ms = 0;      // LowerBoundMs (with all-to-all groups)
  std::string origin;       // the start the reference descends from
  int micro_batches = 0;    // of the reference plan
  int64_t iterations = 0;
  double seconds = 0;
};

struct SearchEvalReport {
  SearchEvalOptions options;
  std::vector<SearchEvalRow> rows;
  double geomean_fcp_over_reference = 1;
  double worst_fcp_over_reference = 1;
  int worst_row = -1;
};

// Throws InputError naming the option ("sequences", "ranks", "clusters",
// "model", "dataset", "batches", "starts", "time_limit_s", ...).
SearchEvalReport EvaluateSearch(const SearchEvalOptions& options);

std::string SearchReportToTable(const SearchEvalReport& report);
std::string SearchReportToJson(const SearchEvalReport& report, int indent = 2);

}  // namespace fcp::baselines
