#include "baselines/common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fcp/check.h"
#include "fcp/cost_model.h"
#include "fcp/presets.h"

namespace fcp::baselines {

std::vector<int> RankRange(int first, int degree) {
  std::vector<int> r(degree);
  for (int i = 0; i < degree; ++i) r[i] = first + i;
  return r;
}

bool FitsOnLoad(const CostModel& cm, double sum_tokens, int degree) {
  GroupLoad load;
  load.sum_tokens = sum_tokens;
  return GroupMemBytes(cm, load, degree) <= cm.mem_capacity;
}

bool FitsOn(const PlanRequest& request, const std::vector<int>& members,
            int degree) {
  double sum = 0;
  for (int k : members)
    sum += static_cast<double>(request.sequences[k].length_tokens);
  return FitsOnLoad(request.cost, sum, degree);
}

int FirstNotFitting(const PlanRequest& request, int64_t degree) {
  for (size_t k = 0; k < request.sequences.size(); ++k) {
    if (MinDegree(request.cost, GroupLoad::Of(request.sequences[k])) > degree) {
      return static_cast<int>(k);
    }
  }
  return -1;
}

Plan InfeasiblePlan(std::string_view strategy, const PlanRequest& request,
                    int sequence, const std::string& message) {
  Plan plan;
  plan.strategy = std::string(strategy);
  plan.num_ranks = request.cluster.num_ranks;
  plan.status = PlanStatus::kInfeasible;
  plan.infeasible_sequence = sequence;
  plan.message = message;
  return plan;
}

int64_t NextPowerOfTwo(int64_t x) {
  int64_t p = 1;
  while (p < x && p < (int64_t{1} << 62)) p <<= 1;
  return p;
}

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

ModelShape ShapeOrDefault(const PlanRequest& request, bool* fallback) {
  if (request.model && request.model->q_heads > 0 &&
      request.model->kv_heads > 0) {
    if (fallback) *fallback = false;
    return *request.model;
  }
  if (fallback) *fallback = true;
  if (const ModelPreset* p = FindModelPreset(kDefaultModel)) return p->shape;
  ModelShape s;
  s.name = "qwen3-8b";
  s.q_heads = 32;
  s.kv_heads = 8;
  return s;
}

double EstimateMs(const PlanRequest& request, const Plan& plan) {
  std::vector<MicroBatchPlan> copy = plan.micro_batches;
  return EstimateMicroBatches(request, copy);
}

Plan StaticDataParallelPlan(const PlanRequest& request, int cp, CommKind comm) {
  const int n = request.cluster.num_ranks;
  FCP_CHECK(cp >= 1 && n % cp == 0);
  const int dp = n / cp;
  const int k = static_cast<int>(request.sequences.size());
  std::vector<std::vector<std::vector<int>>> per_replica(dp);  // [replica][mb]
  size_t num_mb = 0;
  int next = 0;
  for (int j = 0; j < dp; ++j) {
    const int share = k / dp + (j < k % dp ? 1 : 0);
    std::vector<std::vector<int>>& mbs = per_replica[j];
    double tokens = 0;
    for (int i = 0; i < share; ++i, ++next) {
      const double len =
          static_cast<double>(request.sequences[next].length_tokens);
      if (mbs.empty() || !FitsOnLoad(request.cost, tokens + len, cp)) {
        mbs.emplace_back();
        tokens = 0;
      }
      mbs.back().push_back(next);
      tokens += len;
    }
    num_mb = std::max(num_mb, mbs.size());
  }
  Plan plan;
  plan.num_ranks = n;
  plan.micro_batches.resize(num_mb);
  for (size_t i = 0; i < num_mb; ++i) {
    for (int j = 0; j < dp; ++j) {
      if (i >= per_replica[j].size()) continue;
      GroupPlan g;
      g.ranks = RankRange(j * cp, cp);
      g.sequences = per_replica[j][i];
      g.comm = comm;
      plan.micro_batches[i].groups.push_back(std::move(g));
    }
  }
  return plan;
}

std::string FormatDouble(double x, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", precision, x);
  return buf;
}

}  // namespace fcp::baselines
