// `fcp simulate --plan FILE`: global batches planned elsewhere, simulated in
// order as one run with the rules RunExperiment applies to strategies (the
// first `warmup` batches run but are not measured, one communicator cache for
// the run, gradient sync per batch, the same noise seeds per step).
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/simulator.h"
#include "fcp/unknown_names.h"
#include "sim/step_totals.h"

namespace fcp::sim {
namespace {

using nlohmann::json;

// The message part of an InputError ("field: what" -> "what").
std::string WhatOf(const InputError& e) {
  const std::string all = e.what();
  return all.size() > e.field().size() + 2 ? all.substr(e.field().size() + 2) : all;
}

json ParseOne(std::string_view text, const std::string& field) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw InputError(field, std::string("invalid JSON: ") + e.what());
  }
}

}  // namespace

std::vector<PlannedBatch> ParsePlannedBatches(std::string_view text) {
  std::vector<json> items;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) throw InputError("plan", "empty input");
  if (text[first] == '[') {
    json all = ParseOne(text, "plan");
    for (auto& j : all) items.push_back(std::move(j));
  } else {  // JSON lines
    size_t line = 0;
    for (size_t at = 0; at < text.size(); ++line) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view row = text.substr(at, end - at);
      if (row.find_first_not_of(" \t\r") != std::string_view::npos) {
        items.push_back(ParseOne(row, "[" + std::to_string(items.size()) + "]"));
      }
      at = end + 1;
    }
  }
  if (items.empty()) throw InputError("plan", "no batches");
  std::vector<PlannedBatch> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = "[" + std::to_string(i) + "]";
    const json& item = items[i];
    if (!item.is_object()) throw InputError(field, "must be an object {\"batch\", \"plan\"}");
    for (auto it = item.begin(); it != item.end(); ++it) {
      if (it.key() != "batch" && it.key() != "plan") {
        throw InputError(field + "." + it.key(), "unknown key (expected batch, plan)");
      }
    }
    if (!item.contains("batch")) throw InputError(field + ".batch", "missing");
    if (!item.contains("plan")) throw InputError(field + ".plan", "missing");
    PlannedBatch pb;
    try {
      pb.batch = ParseBatchJson(item["batch"].dump());
    } catch (const InputError& e) {
      throw InputError(field + ".batch." + e.field(), WhatOf(e));
    }
    pb.plan = ParsePlanJson(item["plan"], pb.batch.request, field + ".plan");
    if (i > 0 && (pb.batch.request.cluster.num_ranks != out[0].batch.request.cluster.num_ranks ||
                  pb.batch.request.cluster.ranks_per_node !=
                      out[0].batch.request.cluster.ranks_per_node)) {
      throw InputError(field + ".batch.cluster", "must be the same cluster as [0].batch.cluster");
    }
    out.push_back(std::move(pb));
  }
  return out;
}

std::string PlannedBatchToJson(const PlanRequest& request, const Plan& plan) {
  json batch;
  batch["cluster"] = {{"ranks", request.cluster.num_ranks},
                      {"ranks_per_node", request.cluster.ranks_per_node}};
  if (request.model && FindModelPreset(request.model->name)) batch["model"] = request.model->name;
  batch["cost_model"] = json::parse(CostModelToJson(request.cost, -1));
  // What the planner ranked by, so that `fcp plan` of the batch makes the plan.
  if (request.grad_sync) {
    batch["grad_sync"] = {{"collective_s", request.grad_sync->collective_s},
                          {"buckets", request.grad_sync->buckets},
                          {"forward_share", request.grad_sync->forward_share}};
  }
  if (request.group_time_sigma > 0) batch["group_time_sigma"] = request.group_time_sigma;
  if (request.communicators) {
    batch["communicators"] = {{"create_s", request.communicators->create_s},
                              {"existing", request.communicators->existing}};
  }
  json seqs = json::array();
  for (const Sequence& s : request.sequences) {
    seqs.push_back(s.eta == 0 ? json(s.length_tokens)
                              : json{{"length", s.length_tokens}, {"eta", s.eta}});
  }
  batch["sequences"] = std::move(seqs);
  json out;
  out["batch"] = std::move(batch);
  out["plan"] = json::parse(PlanToJson(plan, -1));
  return out.dump();
}

ExperimentResult ReplayPlannedBatches(const std::vector<PlannedBatch>& batches,
                                      const ExperimentConfig& config) {
  ExperimentResult result;
  result.config = config;
  ExperimentConfig& cfg = result.config;
  if (batches.empty()) throw InputError("plan", "no batches");
  if (cfg.warmup < 0) throw InputError("warmup", "must be >= 0");
  if (static_cast<size_t>(cfg.warmup) >= batches.size()) {
    throw InputError("warmup", "must be smaller than the number of batches in the plan file (" +
                                   std::to_string(batches.size()) + ")");
  }
  const ModelPreset* model = FindModelPreset(cfg.model);
  if (!model) throw InputError("model", UnknownModelPresetMessage(cfg.model));
  const ClusterPreset* cluster = FindClusterPreset(cfg.cluster);
  if (!cluster) throw InputError("cluster", UnknownClusterPresetMessage(cfg.cluster));
  ClusterPreset cp = *cluster;
  cp.num_ranks = batches[0].batch.request.cluster.num_ranks;
  cp.ranks_per_node = batches[0].batch.request.cluster.ranks_per_node;
  HardwareModel hw = MakeHardwareModel(*model, cp);
  hw.vision_frozen = cfg.vision_frozen;
  hw.recompute = cfg.recompute;
  cfg.ranks = cp.num_ranks;
  cfg.dataset = "plan";
  cfg.strategies = {"plan"};
  cfg.steps = static_cast<int>(batches.size()) - cfg.warmup;

  StrategyResult r;
  r.strategy = "plan";
  std::set<std::vector<int>> cache;
  StepTotals totals;
  double prev_iter_s = 0;
  double bound_sum = 0;
  int64_t gbs = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    const PlannedBatch& pb = batches[i];
    SimOptions so;
    so.overlap_grad_reduce = cfg.overlap_grad_reduce;
    so.noise_rel = cfg.noise_rel;
    so.noise_seed = cfg.seed * 1000003ULL + i;
    so.communicator_cache = &cache;
    const int before = static_cast<int>(cache.size());
    const SimResult sim = SimulatePlan(hw, pb.plan, pb.batch.request.sequences, so);
    if (cfg.progress) {
      cfg.progress("[simulate --plan] batch " + std::to_string(i + 1) + "/" +
                   std::to_string(batches.size()));
    }
    if (sim.oom) {
      r.oom = true;
      r.message = "[" + std::to_string(i) + "]: " + sim.oom_message;
      break;
    }
    const double hide_behind = prev_iter_s;
    prev_iter_s = sim.iter_s;
    if (i < static_cast<size_t>(cfg.warmup)) continue;
    double tokens = 0;
    for (const Sequence& seq : pb.batch.request.sequences) {
      tokens += static_cast<double>(seq.length_tokens);
    }
    totals.Add(pb.plan, sim, hide_behind, static_cast<double>(cache.size()) - before,
               hw.group_create_s, tokens, r);
    bound_sum += PhysicalLowerBoundS(hw, pb.batch.request.sequences, cfg.overlap_grad_reduce, {});
    gbs += static_cast<int64_t>(pb.batch.request.sequences.size());
    for (const auto& mb : pb.plan.micro_batches) {
      for (const auto& g : mb.groups) ++r.degree_histogram[g.degree()];
    }
  }
  if (!r.oom) {
    const double n = static_cast<double>(totals.iter_s.size());
    result.mean_tokens_per_batch = totals.tokens / n;
    result.lower_bound_s = bound_sum / n;
    totals.Finish(result.lower_bound_s, r);
    cfg.global_batch = static_cast<int64_t>(static_cast<double>(gbs) / n + 0.5);
  }
  result.results.push_back(std::move(r));
  return result;
}

}  // namespace fcp::sim
