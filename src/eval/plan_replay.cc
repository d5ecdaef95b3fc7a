// `fcp simulate --plan FILE`: global batches planned elsewhere, simulated in
// order as one run with the rules RunExperiment applies to strategies (the
// first `warmup` batches run but are not measured, one communicator cache for
// the run, gradient sync per batch, the same noise seeds per step).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/step_totals.h"
#include "fcp/cost_model.h"
#include "fcp/experiment.h"
#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/unknown_names.h"
#include "io/strict_json.h"

namespace fcp::sim {
namespace {

using nlohmann::json;

// The message part of an InputError ("field: what" -> "what").
std::string WhatOf(const InputError& e) {
  const std::string all = e.what();
  return all.size() > e.field().size() + 2 ? all.substr(e.field().size() + 2)
                                           : all;
}

// Values one JSON document of a plan file may hold: a batch of 10^7
// sequences with its plan fits; memory stays bounded by it (issue 30: 60 MB of
// `[` peaked at 4.3 GB before the strict parser's depth cap applied here).
constexpr size_t kMaxPlanFileValues = size_t{1} << 25;

json ParseOne(std::string_view text, const std::string& field) {
  return ParseJsonStrict(text, field, kMaxPlanFileValues);
}

// Item `i` of the file ({"batch", "plan"}) checked and converted.
PlannedBatch ParseItem(const json& item, size_t i, const PlannedBatch* first) {
  const std::string field = "[" + std::to_string(i) + "]";
  if (!item.is_object())
    throw InputError(field, "must be an object {\"batch\", \"plan\"}");
  for (auto it = item.begin(); it != item.end(); ++it) {
    if (it.key() != "batch" && it.key() != "plan") {
      throw InputError(field + "." + it.key(),
                       "unknown key (expected batch, plan)");
    }
  }
  if (!item.contains("batch")) throw InputError(field + ".batch", "missing");
  if (!item.contains("plan")) throw InputError(field + ".plan", "missing");
  PlannedBatch pb;
  try {
    pb.batch = ParseBatchJson(item["batch"].dump());
    // The ranges fcp plan checks (e.g. memory that fits an int64), before the
    // plan's estimates are recomputed from the batch.
    ValidateRequest(pb.batch.request);
  } catch (const InputError& e) {
    throw InputError(field + ".batch." + e.field(), WhatOf(e));
  }
  pb.plan = ParsePlanJson(item["plan"], pb.batch.request, field + ".plan");
  if (first && (pb.batch.request.cluster.num_ranks !=
                    first->batch.request.cluster.num_ranks ||
                pb.batch.request.cluster.ranks_per_node !=
                    first->batch.request.cluster.ranks_per_node)) {
    throw InputError(field + ".batch.cluster",
                     "must be the same cluster as [0].batch.cluster");
  }
  return pb;
}

// Refuses batches whose cluster is not the simulated one and plans with
// all-to-all groups no runtime runs (degree not dividing the query heads).
void CheckPlannedBatches(const std::vector<PlannedBatch>& batches,
                         const ClusterPreset& cp, const ModelPreset& model) {
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::string field = "[" + std::to_string(i) + "]";
    const Cluster& c = batches[i].batch.request.cluster;
    if (c.num_ranks != cp.num_ranks) {
      throw InputError(field + ".batch.cluster.ranks",
                       std::to_string(c.num_ranks) +
                           " ranks, but the simulated cluster (--cluster " +
                           cp.name + ", --ranks) has " +
                           std::to_string(cp.num_ranks));
    }
    if (c.ranks_per_node != cp.ranks_per_node) {
      throw InputError(field + ".batch.cluster.ranks_per_node",
                       std::to_string(c.ranks_per_node) +
                           " ranks per node, but --cluster " + cp.name +
                           " has " + std::to_string(cp.ranks_per_node));
    }
    const std::vector<MicroBatchPlan>& mbs = batches[i].plan.micro_batches;
    for (size_t m = 0; m < mbs.size(); ++m) {
      for (size_t g = 0; g < mbs[m].groups.size(); ++g) {
        const GroupPlan& gp = mbs[m].groups[g];
        if (gp.comm != CommKind::kAllToAll ||
            AllToAllDegreeRuns(model.shape, gp.degree()))
          continue;
        throw InputError(
            fmt::format("{}.plan.micro_batches[{}].groups[{}].comm", field, m,
                        g),
            fmt::format("an all-to-all group of degree {} does not divide "
                        "q_heads = {} of {} "
                        "(no runtime pads heads)",
                        gp.degree(), model.shape.q_heads, model.shape.name));
      }
    }
  }
}

}  // namespace

std::vector<PlannedBatch> ParsePlannedBatches(std::string_view text) {
  std::vector<PlannedBatch> out;
  auto add = [&out](const json& item) {
    out.push_back(ParseItem(item, out.size(), out.empty() ? nullptr : &out[0]));
  };
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) throw InputError("plan", "empty input");
  if (text[first] == '[') {
    json all = ParseOne(text, "plan");
    for (const json& j : all) add(j);
  } else {  // JSON lines, each converted before the next is parsed
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view row = text.substr(at, end - at);
      if (row.find_first_not_of(" \t\r") != std::string_view::npos) {
        add(ParseOne(row, "[" + std::to_string(out.size()) + "]"));
      }
      at = end + 1;
    }
  }
  if (out.empty()) throw InputError("plan", "no batches");
  return out;
}

std::string PlannedBatchToJson(const PlanRequest& request, const Plan& plan) {
  json batch;
  batch["cluster"] = {{"ranks", request.cluster.num_ranks},
                      {"ranks_per_node", request.cluster.ranks_per_node}};
  if (request.model && FindModelPreset(request.model->name))
    batch["model"] = request.model->name;
  batch["cost_model"] = json::parse(CostModelToJson(request.cost, -1));
  // What the planner ranked by, so that `fcp plan` of the batch makes the plan.
  if (request.grad_sync) {
    batch["grad_sync"] = {{"collective_s", request.grad_sync->collective_s},
                          {"buckets", request.grad_sync->buckets},
                          {"forward_share", request.grad_sync->forward_share}};
  }
  if (request.group_time_sigma > 0)
    batch["group_time_sigma"] = request.group_time_sigma;
  if (request.communicators) {
    batch["communicators"] = {{"create_s", request.communicators->create_s},
                              {"existing", request.communicators->existing}};
  }
  json seqs = json::array();
  for (const Sequence& s : request.sequences) {
    if (s.eta == 0 && s.vision_tokens == 0) {
      seqs.push_back(s.length_tokens);
      continue;
    }
    json j = {{"length", s.length_tokens}, {"eta", s.eta}};
    if (s.vision_tokens > 0) j["vision_tokens"] = s.vision_tokens;
    seqs.push_back(std::move(j));
  }
  batch["sequences"] = std::move(seqs);
  json out;
  out["batch"] = std::move(batch);
  out["plan"] = json::parse(PlanToJson(plan, -1));
  return out.dump();
}

// Long because: the step loop of RunExperiment for plan files, by the same
// rules and totals.
ExperimentResult ReplayPlannedBatches(const std::vector<PlannedBatch>& batches,
                                      const ExperimentConfig& config) {
  ExperimentResult result;
  result.config = config;
  ExperimentConfig& cfg = result.config;
  if (batches.empty()) throw InputError("plan", "no batches");
  if (cfg.warmup < 0) throw InputError("warmup", "must be >= 0");
  if (static_cast<size_t>(cfg.warmup) >= batches.size()) {
    throw InputError(
        "warmup",
        "must be smaller than the number of batches in the plan file (" +
            std::to_string(batches.size()) + ")");
  }
  const ModelPreset* model = FindModelPreset(cfg.model);
  if (!model) throw InputError("model", UnknownModelPresetMessage(cfg.model));
  const ClusterPreset* cluster = FindClusterPreset(cfg.cluster);
  if (!cluster)
    throw InputError("cluster", UnknownClusterPresetMessage(cfg.cluster));
  // The topology is the simulated hardware's (--cluster, --ranks), never the
  // batch's claim: a plan cannot buy faster links by declaring more ranks per
  // node. The rank count defaults to the batches'.
  ClusterPreset cp = *cluster;
  cp.num_ranks =
      cfg.ranks > 0 ? cfg.ranks : batches[0].batch.request.cluster.num_ranks;
  cp.ranks_per_node = std::max(1, std::min(cp.ranks_per_node, cp.num_ranks));
  CheckPlannedBatches(batches, cp, *model);
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
    const SimResult sim =
        SimulatePlan(hw, pb.plan, pb.batch.request.sequences, so);
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
    if (i == static_cast<size_t>(cfg.warmup) && cfg.on_first_measured_step)
      cfg.on_first_measured_step(pb.plan, pb.batch.request.sequences, sim,
                                 cp.ranks_per_node);
    double tokens = 0;
    for (const Sequence& seq : pb.batch.request.sequences) {
      tokens += static_cast<double>(seq.length_tokens);
    }
    totals.Add(pb.plan, sim, hide_behind,
               static_cast<double>(cache.size()) - before, hw.group_create_s,
               tokens, r);
    bound_sum += PhysicalLowerBoundS(hw, pb.batch.request.sequences,
                                     cfg.overlap_grad_reduce);
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
