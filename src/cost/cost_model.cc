#include "fcp/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace fcp {
namespace {

constexpr int64_t kDegreeCap = std::numeric_limits<int64_t>::max() / 4;

bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

std::optional<std::string> ValidateCostModel(const CostModel& cm) {
  struct Field {
    const char* name;
    double value;
    bool positive;
  };
  const Field fields[] = {
      {"alpha1", cm.alpha1, false},          {"alpha2", cm.alpha2, false},
      {"beta1", cm.beta1, false},            {"alpha3", cm.alpha3, false},
      {"beta2", cm.beta2, false},            {"bw_intra_node", cm.bw_intra_node, true},
      {"bw_inter_node", cm.bw_inter_node, true}, {"mem_per_token", cm.mem_per_token, false},
      {"mem_static", cm.mem_static, false},  {"mem_capacity", cm.mem_capacity, true},
  };
  for (const Field& f : fields) {
    if (!FiniteNonNegative(f.value) || (f.positive && f.value <= 0)) {
      return std::string("cost_model.") + f.name + ": must be a finite number " +
             (f.positive ? "> 0" : ">= 0");
    }
  }
  if (cm.mem_capacity <= cm.mem_static) {
    return std::string(
        "cost_model.mem_capacity: must exceed cost_model.mem_static (no room for "
        "activations)");
  }
  return std::nullopt;
}

void CheckCostModel(const CostModel& cm) {
  if (auto err = ValidateCostModel(cm)) throw InputError::FromMessage(*err);
}

double GroupTimeS(const CostModel& cm, const GroupLoad& load, int degree,
                  double bw_bytes_per_s) {
  const double d = degree;
  const double attn = cm.alpha1 * load.sum_attn / d;
  const double lin = cm.alpha2 * load.sum_tokens / d;
  const double t_cp = attn + lin + cm.beta1;
  const double t_cm =
      degree == 1 ? 0.0
                  : cm.alpha3 * load.sum_tokens * (d - 1) / d / bw_bytes_per_s + cm.beta2;
  return t_cp + t_cm - std::min(attn, t_cm);
}

bool RangeOnOneNode(const Cluster& cluster, int first, int degree) {
  const int64_t r = cluster.ranks_per_node;
  return first / r == (static_cast<int64_t>(first) + degree - 1) / r;
}

bool OnOneNode(const Cluster& cluster, std::span<const int> ranks) {
  if (ranks.empty()) return true;
  const int node = ranks[0] / cluster.ranks_per_node;
  for (int r : ranks) {
    if (r / cluster.ranks_per_node != node) return false;
  }
  return true;
}

double GroupTimeOnRanksS(const CostModel& cm, const Cluster& cluster,
                         const GroupLoad& load, std::span<const int> ranks) {
  const double bw =
      OnOneNode(cluster, ranks) ? cm.bw_intra_node : cm.bw_inter_node;
  return GroupTimeS(cm, load, static_cast<int>(ranks.size()), bw);
}

double GroupTimeBestS(const CostModel& cm, const Cluster& cluster,
                      const GroupLoad& load, int degree) {
  double bw = cm.bw_inter_node;
  if (degree <= cluster.ranks_per_node) bw = std::max(bw, cm.bw_intra_node);
  return GroupTimeS(cm, load, degree, bw);
}

double GroupMemBytes(const CostModel& cm, const GroupLoad& load, int degree) {
  return cm.mem_static + cm.mem_per_token * load.sum_tokens / degree;
}

int64_t MinDegree(const CostModel& cm, const GroupLoad& load) {
  const double headroom = cm.mem_capacity - cm.mem_static;
  if (!(headroom > 0)) return kDegreeCap;
  const double need = cm.mem_per_token * load.sum_tokens / headroom;
  if (!(need < static_cast<double>(kDegreeCap))) return kDegreeCap;
  int64_t d = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(need)));
  // Guard against rounding in the division: d_min is the smallest d with
  // mem(G, d) <= mem_capacity.
  while (d < kDegreeCap &&
         cm.mem_static + cm.mem_per_token * load.sum_tokens / static_cast<double>(d) >
             cm.mem_capacity) {
    ++d;
  }
  while (d > 1 && cm.mem_static + cm.mem_per_token * load.sum_tokens /
                                      static_cast<double>(d - 1) <=
                      cm.mem_capacity) {
    --d;
  }
  return d;
}

}  // namespace fcp
