#include "fcp/search_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>

#include "fcp/datasets.h"
#include "fcp/presets.h"
#include "fcp/unknown_names.h"

namespace fcp::baselines {
// Named, not anonymous: the wheel's unity build merges anonymous namespaces.
namespace search_eval_internal {

void CheckSearchEvalOptions(const SearchEvalOptions& o) {
  if (o.sequences < 1 || o.sequences > 100000)
    throw InputError("sequences", "must be in [1, 100000]");
  if (o.ranks.empty()) throw InputError("ranks", "give at least one");
  for (int n : o.ranks)
    if (n < 1 || n > 4096)
      throw InputError("ranks", "each must be in [1, 4096]");
  if (o.clusters.empty()) throw InputError("clusters", "give at least one");
  for (const std::string& c : o.clusters) {
    if (FindClusterPreset(c) == nullptr)
      throw InputError("clusters", UnknownClusterPresetMessage(c));
  }
  if (FindModelPreset(o.model) == nullptr)
    throw InputError("model", UnknownModelPresetMessage(o.model));
  if (o.lengths.empty() && FindDataset(o.dataset) == nullptr)
    throw InputError("dataset", "unknown dataset '" + o.dataset + "'");
  const char* const known[] = {"fcp",      "ref-share", "ref-bisect",
                               "ref-grow", "megatron",  "deepspeed"};
  for (const std::string& s : o.starts) {
    if (std::find(std::begin(known), std::end(known), s) == std::end(known)) {
      throw InputError("starts", "unknown start '" + s +
                                     "' (known: fcp, ref-share, ref-bisect, "
                                     "ref-grow, megatron, deepspeed)");
    }
  }
  if (o.batches < 1 || o.batches > 1000)
    throw InputError("batches", "must be in [1, 1000]");
  if (!(o.search.time_limit_s > 0) || !std::isfinite(o.search.time_limit_s))
    throw InputError("time_limit_s", "must be a finite number > 0");
  if (o.search.max_iterations < 0)
    throw InputError("iterations", "must be >= 0 (0 = until the time limit)");
}

PlanRequest InstanceRequest(const SearchEvalOptions& o,
                            const std::string& cluster_name, int ranks,
                            uint64_t batch_seed) {
  ClusterPreset cluster = *FindClusterPreset(cluster_name);
  cluster.num_ranks = ranks;
  const ModelPreset& model = *FindModelPreset(o.model);
  PlanRequest r;
  r.cluster = {ranks, cluster.ranks_per_node};
  r.cost = DeriveCostModel(model, cluster);
  r.model = model.shape;
  r.sequences = o.lengths.empty()
                    ? SampleBatch(o.dataset, o.sequences, batch_seed)
                    : SampleFromLengths(o.lengths, o.sequences, batch_seed);
  return r;
}

// The row's other plans: fcp, the best heuristic, the best static plan.
void FillStrategyScores(const PlanRequest& request,
                        const std::vector<SearchStart>& plans,
                        SearchEvalRow& row) {
  row.heuristic_ms = row.static_ms = INFINITY;
  for (const SearchStart& p : plans) {
    const double ms = SearchScoreMs(request, p.plan);
    if (p.name == "fcp") row.fcp_ms = ms;
    if (p.name.starts_with("ref-") && ms < row.heuristic_ms) {
      row.heuristic_ms = ms;
      row.heuristic = p.name;
    }
    if ((p.name == "megatron" || p.name == "deepspeed") && ms < row.static_ms)
      row.static_ms = ms;
  }
}

SearchEvalRow RunInstance(const SearchEvalOptions& o,
                          const std::string& cluster, int ranks,
                          uint64_t batch_seed) {
  const PlanRequest request = InstanceRequest(o, cluster, ranks, batch_seed);
  ValidateRequest(request);
  const std::vector<SearchStart> plans = DefaultSearchStarts(request);
  std::vector<SearchStart> starts;
  for (const SearchStart& p : plans) {
    if (std::find(o.starts.begin(), o.starts.end(), p.name) != o.starts.end())
      starts.push_back(p);
  }
  const LocalSearchResult found = LocalSearch(request, starts, o.search);
  if (found.plan.status != PlanStatus::kOk) {
    throw InputError("sequences",
                     fmt::format("batch {} on {} x {}: {}", batch_seed, cluster,
                                 ranks, found.plan.message));
  }
  SearchEvalRow row;
  row.cluster = cluster;
  row.ranks = ranks;
  row.batch_seed = batch_seed;
  FillStrategyScores(request, plans, row);
  row.reference_ms = found.score_ms;
  row.bound_ms = LowerBoundMs(request, /*all_to_all=*/true);
  row.origin = found.origin;
  row.micro_batches = static_cast<int>(found.plan.micro_batches.size());
  row.iterations = found.iterations;
  row.seconds = found.seconds;
  return row;
}

std::string DataName(const SearchEvalOptions& o) {
  return o.lengths.empty() ? o.dataset : o.lengths_name;
}

std::string StartsName(const SearchEvalOptions& o) {
  std::string out;
  for (const std::string& s : o.starts) out += s + ", ";
  return out + "one group of all ranks";
}

}  // namespace search_eval_internal

using search_eval_internal::DataName;
using search_eval_internal::StartsName;

SearchEvalReport EvaluateSearch(const SearchEvalOptions& options) {
  search_eval_internal::CheckSearchEvalOptions(options);
  SearchEvalReport report;
  report.options = options;
  report.options.progress = nullptr;
  const int total =
      static_cast<int>(options.clusters.size() * options.ranks.size()) *
      options.batches;
  double log_sum = 0;
  for (const std::string& cluster : options.clusters) {
    for (int ranks : options.ranks) {
      for (int b = 0; b < options.batches; ++b) {
        const uint64_t batch_seed = options.seed + b;
        if (options.progress) {
          options.progress(fmt::format(
              "[eval search] instance {}/{}: {} x {} ranks, batch {}",
              report.rows.size() + 1, total, cluster, ranks, batch_seed));
        }
        report.rows.push_back(search_eval_internal::RunInstance(
            options, cluster, ranks, batch_seed));
        const SearchEvalRow& row = report.rows.back();
        const double ratio = row.fcp_ms / row.reference_ms;
        log_sum += std::log(ratio);
        if (report.worst_row < 0 || ratio > report.worst_fcp_over_reference) {
          report.worst_fcp_over_reference = ratio;
          report.worst_row = static_cast<int>(report.rows.size()) - 1;
        }
      }
    }
  }
  report.geomean_fcp_over_reference = std::exp(log_sum / total);
  return report;
}

std::string SearchReportToTable(const SearchEvalReport& report) {
  const SearchEvalOptions& o = report.options;
  std::string out = fmt::format(
      "fcp vs a local-search reference (planner cost-model estimates, not "
      "simulated): {}, {}, {} sequences per batch, search seed {}, {} s / {} "
      "iterations per instance, from {}\n",
      DataName(o), o.model, o.sequences, o.search.seed, o.search.time_limit_s,
      o.search.max_iterations > 0 ? std::to_string(o.search.max_iterations)
                                  : std::string("unlimited"),
      StartsName(o));
  out += fmt::format(
      "{:<16} {:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} "
      "{:>9}  {:<20} {:>3} {:>10}\n",
      "cluster", "ranks", "batch", "fcp_s", "heur_s", "static_s", "ref_s",
      "bound_s", "fcp/ref", "heur/ref", "stat/ref", "ref/bound",
      "reference from", "mbs", "iterations");
  for (const SearchEvalRow& r : report.rows) {
    out += fmt::format(
        "{:<16} {:>5} {:>5} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} "
        "{:>7.4f}x {:>7.4f}x {:>7.4f}x {:>8.4f}x  {:<20} {:>3} {:>10}\n",
        r.cluster, r.ranks, r.batch_seed, r.fcp_ms / 1000,
        r.heuristic_ms / 1000, r.static_ms / 1000, r.reference_ms / 1000,
        r.bound_ms / 1000, r.fcp_ms / r.reference_ms,
        r.heuristic_ms / r.reference_ms, r.static_ms / r.reference_ms,
        r.reference_ms / r.bound_ms, r.origin, r.micro_batches, r.iterations);
  }
  if (report.worst_row >= 0) {
    const SearchEvalRow& w = report.rows[report.worst_row];
    out += fmt::format(
        "fcp / reference: geometric mean {:.4f}x, worst {:.4f}x ({}, {} ranks, "
        "batch {}); heur = best reference heuristic, static = best balanced "
        "static plan, bound = LowerBoundMs\n",
        report.geomean_fcp_over_reference, report.worst_fcp_over_reference,
        w.cluster, w.ranks, w.batch_seed);
  }
  double seconds = 0;
  for (const SearchEvalRow& r : report.rows) seconds += r.seconds;
  out += fmt::format(
      "searched {} instances in {:.1f} s (wall clock on this machine)\n",
      report.rows.size(), seconds);
  return out;
}

std::string SearchReportToJson(const SearchEvalReport& report, int indent) {
  const SearchEvalOptions& o = report.options;
  nlohmann::json j;
  j["kind"] =
      "estimated by the planner's cost model (not measured, not simulated)";
  j["data"] = DataName(o);
  j["model"] = o.model;
  j["sequences"] = o.sequences;
  j["seed"] = o.seed;
  j["starts"] = o.starts;
  j["search"] = {{"seed", o.search.seed},
                 {"time_limit_s", o.search.time_limit_s},
                 {"max_iterations", o.search.max_iterations}};
  nlohmann::json rows = nlohmann::json::array();
  for (const SearchEvalRow& r : report.rows) {
    rows.push_back({{"cluster", r.cluster},
                    {"ranks", r.ranks},
                    {"batch_seed", r.batch_seed},
                    {"fcp_ms", r.fcp_ms},
                    {"heuristic_ms", r.heuristic_ms},
                    {"heuristic", r.heuristic},
                    {"static_ms", r.static_ms},
                    {"reference_ms", r.reference_ms},
                    {"bound_ms", r.bound_ms},
                    {"reference_from", r.origin},
                    {"reference_micro_batches", r.micro_batches},
                    {"iterations", r.iterations},
                    {"seconds", r.seconds}});
  }
  j["instances"] = rows;
  j["geomean_fcp_over_reference"] = report.geomean_fcp_over_reference;
  j["worst_fcp_over_reference"] = report.worst_fcp_over_reference;
  return j.dump(indent);
}

}  // namespace fcp::baselines
