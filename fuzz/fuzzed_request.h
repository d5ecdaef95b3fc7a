// Shared by the fuzz targets: a PlanRequest drawn from fuzzer bytes, the
// documented input rules restated independently, the independent
// infeasibility test (planner, baselines), and a pair of presets (sim, learn).
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"

namespace fcp::fuzz {

// A model preset and a cluster preset resized to [1, max_ranks] ranks (ranks
// per node clipped to N), in this consumption order.
struct Presets {
  const ModelPreset* model;
  ClusterPreset cluster;
};
inline Presets PickPresets(FuzzedDataProvider& fdp, int max_ranks) {
  const auto& models = ModelPresets();
  const auto& clusters = ClusterPresets();
  Presets p{
      &models[fdp.ConsumeIntegralInRange<size_t>(0, models.size() - 1)],
      clusters[fdp.ConsumeIntegralInRange<size_t>(0, clusters.size() - 1)]};
  p.cluster.num_ranks = fdp.ConsumeIntegralInRange<int>(1, max_ranks);
  p.cluster.ranks_per_node =
      std::max(1, std::min(p.cluster.ranks_per_node, p.cluster.num_ranks));
  return p;
}

// A coefficient: mostly realistic magnitudes, sometimes extreme or invalid.
inline double Coefficient(FuzzedDataProvider& fdp, double typical) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      return 0.0;
    case 1:
      return std::numeric_limits<double>::denorm_min();
    case 2:
      return 1e300;
    case 3:
      return std::numeric_limits<double>::max();
    case 4:
      return -typical;
    case 5:
      return std::numeric_limits<double>::quiet_NaN();
    case 6:
      return std::numeric_limits<double>::infinity();
    case 7:
      return typical *
             std::ldexp(1.0, fdp.ConsumeIntegralInRange<int>(-60, 60));
    default:
      return typical * (0.25 + 4 * fdp.ConsumeProbability<double>());
  }
}

inline int64_t Length(FuzzedDataProvider& fdp) {
  const int log2 = fdp.ConsumeIntegralInRange<int>(0, 41);
  if (log2 == 41) return fdp.ConsumeIntegralInRange<int64_t>(-2, 0);  // invalid
  const int64_t lo = int64_t{1} << (log2 > 0 ? log2 - 1 : 0);
  const int64_t hi = int64_t{1} << log2;
  return fdp.ConsumeIntegralInRange<int64_t>(lo, hi);
}

// Cluster (N in [-1, max_ranks], R in [-1, 40]), cost model, up to
// max_sequences sequences. The order of consumption is fixed: the seed
// corpora depend on it.
inline PlanRequest FuzzedRequest(FuzzedDataProvider& fdp, int max_ranks,
                                 int max_sequences) {
  PlanRequest req;
  req.cluster.num_ranks = fdp.ConsumeIntegralInRange<int>(-1, max_ranks);
  req.cluster.ranks_per_node = fdp.ConsumeIntegralInRange<int>(-1, 40);
  CostModel& cm = req.cost;
  cm.alpha1 = Coefficient(fdp, 1e-11);
  cm.alpha2 = Coefficient(fdp, 1e-6);
  cm.beta1 = Coefficient(fdp, 1e-3);
  cm.alpha3 = Coefficient(fdp, 1e5);
  cm.beta2 = Coefficient(fdp, 1e-4);
  cm.bw_intra_node = Coefficient(fdp, 2e11);
  cm.bw_inter_node = Coefficient(fdp, 5e10);
  cm.mem_per_token = Coefficient(fdp, 5e5);
  cm.mem_static = Coefficient(fdp, 2e10);
  cm.mem_capacity = Coefficient(fdp, 6.4e10);
  const int k = fdp.ConsumeIntegralInRange<int>(0, max_sequences);
  for (int i = 0; i < k; ++i) {
    Sequence s;
    s.length_tokens = Length(fdp);
    switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        s.eta = 1.0;
        break;
      case 1:
        s.eta = fdp.ConsumeProbability<double>();
        break;
      case 2:
        s.eta =
            fdp.ConsumeBool() ? -0.5 : std::numeric_limits<double>::quiet_NaN();
        break;
      default:
        s.eta = 0.0;
        break;
    }
    req.sequences.push_back(s);
  }
  return req;
}

// Near-equal memory (issue 18: mem_static = 63999999999.99994 with a 64e9
// capacity made the minimum-degree search step one degree at a time for
// hours): sometimes put mem_static a hair below mem_capacity. Consumed last,
// so older corpus entries keep their meaning.
inline void MaybeNearEqualMemory(FuzzedDataProvider& fdp, PlanRequest& req) {
  if (fdp.remaining_bytes() == 0 || fdp.ConsumeIntegralInRange<int>(0, 3) != 0)
    return;
  CostModel& cm = req.cost;
  if (!(std::isfinite(cm.mem_capacity) && cm.mem_capacity > 0)) return;
  const int bits = fdp.ConsumeIntegralInRange<int>(1, 60);
  cm.mem_static = bits == 60 ? std::nextafter(cm.mem_capacity, 0.0)
                             : cm.mem_capacity * (1 - std::ldexp(1.0, -bits));
}

// Cost model v2 terms (docs/design.md §2), consumed after everything else so
// that older corpus entries keep their meaning (and their paper-model terms).
// ring_tail_steps is sometimes above 1 (invalid).
inline void MaybeV2Terms(FuzzedDataProvider& fdp, PlanRequest& req) {
  if (fdp.remaining_bytes() == 0 || !fdp.ConsumeBool()) return;
  CostModel& cm = req.cost;
  cm.attn_overhead_tokens = Coefficient(fdp, 256);
  cm.gamma_intra = Coefficient(fdp, 1e-4);
  cm.gamma_inter = Coefficient(fdp, 4e-4);
  cm.gamma_serial = Coefficient(fdp, 2e-4);
  cm.ring_tail_steps = fdp.ConsumeBool() ? fdp.ConsumeProbability<double>()
                                         : Coefficient(fdp, 1.0);
}

// A quarter of the inputs plan for group-time noise (group_time_sigma; fcp
// then scores candidates by the expected step over fixed draws), drawn from
// [-0.5, 2.5] so that the range rule is exercised too. Consumed last.
inline void MaybeGroupTimeSigma(FuzzedDataProvider& fdp, PlanRequest& req) {
  if (fdp.remaining_bytes() == 0 || fdp.ConsumeIntegralInRange<int>(0, 3) != 0)
    return;
  req.group_time_sigma = fdp.ConsumeFloatingPointInRange<double>(-0.5, 2.5);
}

// The documented input rules (scheduler.h, types.h), restated
// independently, without the numeric-range rule (NumericRangeField).
inline bool RequestValid(const PlanRequest& req) {
  const CostModel& cm = req.cost;
  auto finite_ge0 = [](double x) { return std::isfinite(x) && x >= 0; };
  bool valid =
      req.cluster.num_ranks >= 1 && req.cluster.ranks_per_node >= 1 &&
      !req.sequences.empty() && finite_ge0(cm.alpha1) &&
      finite_ge0(cm.alpha2) && finite_ge0(cm.beta1) && finite_ge0(cm.alpha3) &&
      finite_ge0(cm.beta2) && finite_ge0(cm.mem_per_token) &&
      finite_ge0(cm.mem_static) && finite_ge0(cm.bw_intra_node) &&
      cm.bw_intra_node > 0 && finite_ge0(cm.bw_inter_node) &&
      cm.bw_inter_node > 0 && std::isfinite(cm.mem_capacity) &&
      cm.mem_capacity > cm.mem_static && finite_ge0(cm.attn_overhead_tokens) &&
      finite_ge0(cm.gamma_intra) && finite_ge0(cm.gamma_inter) &&
      finite_ge0(cm.gamma_serial) && finite_ge0(cm.ring_tail_steps) &&
      cm.ring_tail_steps <= 1 && finite_ge0(req.group_time_sigma) &&
      req.group_time_sigma <= 2;
  for (const Sequence& s : req.sequences) {
    valid &= s.length_tokens >= 1 && s.length_tokens <= (int64_t{1} << 40) &&
             s.eta >= 0 && s.eta <= 1;
  }
  return valid;
}

// Whether an InputError's field is the numeric-range rule's, which depends on
// the whole request: times that would overflow (cost_model), memory above 2^62
// bytes per rank (cost_model.mem_capacity) or for the batch on one rank
// (cost_model.mem_per_token).
inline bool NumericRangeField(const std::string& field) {
  return field == "cost_model" || field == "cost_model.mem_capacity" ||
         field == "cost_model.mem_per_token";
}

// The first sequence that does not fit on all N ranks
// (mem_static + mem_per_token * s / N > mem_capacity), or -1.
inline int FirstInfeasible(const PlanRequest& req) {
  const CostModel& cm = req.cost;
  for (size_t i = 0; i < req.sequences.size(); ++i) {
    const double per_rank =
        cm.mem_static +
        cm.mem_per_token * static_cast<double>(req.sequences[i].length_tokens) /
            req.cluster.num_ranks;
    if (per_rank > cm.mem_capacity) return static_cast<int>(i);
  }
  return -1;
}

// The request as `fcp plan` input, to reproduce a finding (FCP_FUZZ_DUMP=1).
inline void DumpRequest(const PlanRequest& req, const std::string& strategy) {
  std::string seqs;
  char buf[96];
  for (const Sequence& s : req.sequences) {
    std::snprintf(buf, sizeof buf, "%s{\"length\": %lld, \"eta\": %.17g}",
                  seqs.empty() ? "" : ", ",
                  static_cast<long long>(s.length_tokens), s.eta);
    seqs += buf;
  }
  std::fprintf(stderr,
               "{\"cluster\": {\"ranks\": %d, \"ranks_per_node\": %d},\n "
               "\"cost_model\": %s,\n \"group_time_sigma\": %.17g,\n"
               " \"sequences\": [%s]}\nstrategy: %s\n",
               req.cluster.num_ranks, req.cluster.ranks_per_node,
               CostModelToJson(req.cost, -1).c_str(), req.group_time_sigma,
               seqs.c_str(), strategy.c_str());
}

// The plan's JSON without solver_ms (the only field allowed to differ).
inline std::string WithoutSolverMs(const Plan& plan) {
  Plan copy = plan;
  copy.solver_ms = 0;
  return PlanToJson(copy, -1);
}

}  // namespace fcp::fuzz
