// Time bound of the planner at scale (issue 8): planning K sequences on
// N = 4,096 ranks (256 nodes of 16) for K = 10^4, 3·10^4, 10^5, strategies fcp
// and fcp-paper. The fitted complexity (Google Benchmark's BigO over K) shows
// whether run time grows near-linearly (N log N) or quadratically in K.
// Lengths: github-like (log-normal μ = 6.6, σ = 1.75, capped at 128k, seeded);
// cost model: qwen3-8b on the Ascend preset sized to N.
//
//   build/bench/limits_bench                      # all sizes, both strategies
//   build/bench/limits_bench --benchmark_filter=fcp/   # only fcp
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "fcp/presets.h"
#include "fcp/scheduler.h"

namespace {

constexpr int kRanks = 4096;
constexpr int kRanksPerNode = 16;

fcp::PlanRequest GithubBatch(int num_sequences, uint64_t seed) {
  fcp::PlanRequest req;
  req.cluster = {kRanks, kRanksPerNode};
  fcp::ClusterPreset cluster = *fcp::FindClusterPreset("ascend910c-4x16");
  cluster.num_ranks = kRanks;
  req.cost = fcp::DeriveCostModel(*fcp::FindModelPreset("qwen3-8b"), cluster);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> lengths(6.6, 1.75);
  req.sequences.reserve(num_sequences);
  for (int i = 0; i < num_sequences; ++i) {
    const double len = std::clamp(std::round(lengths(rng)), 1.0, 131072.0);
    req.sequences.push_back({static_cast<int64_t>(len), 0.0});
  }
  return req;
}

void PlanAtScale(benchmark::State& state, const char* strategy) {
  const int k = static_cast<int>(state.range(0));
  const fcp::PlanRequest req = GithubBatch(k, 42);
  fcp::PlanOptions options;
  options.strategy = strategy;
  size_t micro_batches = 0;
  double est_ms = 0, gap = 0, plan_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const fcp::Plan plan = fcp::MakePlan(req, options);
    plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (plan.status != fcp::PlanStatus::kOk) {
      state.SkipWithError("plan not ok");
      return;
    }
    micro_batches = plan.micro_batches.size();
    est_ms = plan.est_ms;
    gap = plan.gap();
    benchmark::DoNotOptimize(plan.est_ms);
  }
  state.SetComplexityN(k);
  state.counters["micro_batches"] = static_cast<double>(micro_batches);
  state.counters["est_ms"] = est_ms;
  state.counters["gap_pct"] = 100 * gap;
  state.counters["us_per_seq"] = 1e6 * plan_s / static_cast<double>(k);
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->Arg(10'000)->Arg(20'000)->Arg(30'000)->Arg(50'000)->Arg(100'000)->Arg(200'000);
  b->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(1);
  b->Complexity();  // best fit among O(1), O(N), O(N log N), O(N^2), O(N^3)
}

BENCHMARK_CAPTURE(PlanAtScale, fcp, "fcp")->Apply(Sizes);
BENCHMARK_CAPTURE(PlanAtScale, fcp_paper, "fcp-paper")->Apply(Sizes);

}  // namespace

BENCHMARK_MAIN();
