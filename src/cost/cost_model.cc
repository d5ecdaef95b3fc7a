#include "fcp/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "fcp/cost_coefficients.h"

namespace fcp {
namespace {

constexpr int64_t kDegreeCap = std::numeric_limits<int64_t>::max() / 4;

bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

CostModel PaperTerms(CostModel cm) {
  for (const CostCoefficient& c : kCostCoefficients)
    if (c.v2) cm.*(c.member) = 0;
  return cm;
}

std::optional<std::string> ValidateCostModel(const CostModel& cm) {
  for (const CostCoefficient& c : kCostCoefficients) {
    const double value = cm.*(c.member);
    if (!FiniteNonNegative(value) || (c.positive && value <= 0)) {
      return "cost_model." + std::string(c.name) +
             ": must be a finite number " + (c.positive ? "> 0" : ">= 0");
    }
  }
  if (cm.ring_tail_steps > 1) {
    return std::string(
        "cost_model.ring_tail_steps: must be in [0, 1] (a ring of d steps has "
        "d - 1 "
        "transfers to hide)");
  }
  if (cm.mem_capacity <= cm.mem_static) {
    return std::string(
        "cost_model.mem_capacity: must exceed cost_model.mem_static (no room "
        "for "
        "activations)");
  }
  return std::nullopt;
}

void CheckCostModel(const CostModel& cm) {
  if (auto err = ValidateCostModel(cm)) throw InputError::FromMessage(*err);
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
  return GroupTimeS(
      cm, load, static_cast<int>(ranks.size()),
      OnOneNode(cluster, ranks) ? Link::kIntraNode : Link::kInterNode);
}

double GroupMemBytes(const CostModel& cm, const GroupLoad& load, int degree) {
  return cm.mem_static + cm.mem_per_token * load.sum_tokens / degree;
}

int64_t MinDegree(const CostModel& cm, const GroupLoad& load) {
  const double headroom = cm.mem_capacity - cm.mem_static;
  if (!(headroom > 0)) return kDegreeCap;
  const double need = cm.mem_per_token * load.sum_tokens / headroom;
  if (!(need < static_cast<double>(kDegreeCap))) return kDegreeCap;
  // d_min is the smallest d with mem(G, d) <= mem_capacity as GroupMemBytes
  // computes it. The closed form can be off when mem_static is so close to
  // mem_capacity that the headroom is a few ulps of mem_static (issue 18: a
  // one-degree-at-a-time correction then took hours). `fits` is monotone in d,
  // so gallop from the closed form and bisect: O(log d) evaluations.
  auto fits = [&](int64_t d) {
    return cm.mem_static +
               cm.mem_per_token * load.sum_tokens / static_cast<double>(d) <=
           cm.mem_capacity;
  };
  const int64_t guess =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(need)));
  int64_t lo, hi;  // invariant: !fits(lo) (or lo == 0), fits(hi)
  if (fits(guess)) {
    hi = guess;
    int64_t step = 1;
    lo = guess - 1;
    while (lo >= 1 && fits(lo)) {
      hi = lo;
      step *= 2;
      lo = std::max<int64_t>(0, hi - step);
    }
  } else {
    lo = guess;
    int64_t step = 1;
    hi = guess;
    while (!fits(hi)) {
      lo = hi;
      if (hi >= kDegreeCap) return kDegreeCap;
      step *= 2;
      hi = std::min(kDegreeCap, hi + step);
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return std::max<int64_t>(1, hi);
}

}  // namespace fcp
