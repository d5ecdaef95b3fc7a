// Whole planning call (fcp::MakePlan) on github-like batches, and on the same
// batches with group-time noise (fcp_noise: group_time_sigma 0.3, candidates
// ranked by the expected step over 128 draws; the planning budget is for
// noise-free requests). Verifies every plan with ValidatePlan (a benchmark
// that plans wrongly fails) and reports the plan's estimate and gap to the
// lower bound as counters.
//
//   build/bench/planner_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fcp/datasets.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"

namespace {

fcp::PlanRequest GithubRequest(int64_t num_sequences, int num_ranks,
                               uint64_t seed) {
  fcp::PlanRequest r;
  fcp::ClusterPreset cluster = *fcp::FindClusterPreset("ascend910c-4x16");
  cluster.num_ranks = num_ranks;
  r.cluster = {num_ranks, cluster.ranks_per_node};
  const fcp::ModelPreset& model = *fcp::FindModelPreset("qwen3-8b");
  r.cost = fcp::DeriveCostModel(model, cluster);
  r.model = model.shape;
  r.sequences = fcp::SampleBatch("github", num_sequences, seed);
  return r;
}

void BM_Plan(benchmark::State& state, const std::string& strategy,
             double group_time_sigma = 0) {
  const int64_t k = state.range(0);
  const int n = static_cast<int>(state.range(1));
  // A few different batches so one lucky draw does not decide the figure.
  std::vector<fcp::PlanRequest> requests;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    requests.push_back(GithubRequest(k, n, seed));
    requests.back().group_time_sigma = group_time_sigma;
  }
  fcp::PlanOptions options;
  options.strategy = strategy;
  size_t i = 0;
  double gap_sum = 0, est_sum = 0, mbs = 0;
  int64_t plans = 0;
  for (auto _ : state) {
    const fcp::PlanRequest& req = requests[i++ % requests.size()];
    const fcp::Plan plan = fcp::MakePlan(req, options);
    benchmark::DoNotOptimize(plan.est_ms);
    state.PauseTiming();
    const std::string violation = fcp::ValidatePlan(req, plan);
    if (!violation.empty()) {
      state.SkipWithError(("invalid plan: " + violation).c_str());
      break;
    }
    gap_sum += plan.gap();
    est_sum += plan.est_ms;
    mbs += static_cast<double>(plan.micro_batches.size());
    ++plans;
    state.ResumeTiming();
  }
  if (plans > 0) {
    state.counters["gap_pct"] = 100.0 * gap_sum / plans;
    state.counters["est_ms"] = est_sum / plans;
    state.counters["micro_batches"] = mbs / plans;
  }
}

void Args(benchmark::internal::Benchmark* b) {
  b->Args({512, 64})
      ->Args({8192, 1024})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Plan, fcp, std::string("fcp"))->Apply(Args);
BENCHMARK_CAPTURE(BM_Plan, fcp_noise, std::string("fcp"), 0.3)
    ->Args({512, 64})
    ->Args({512, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Plan, fcp_paper, std::string("fcp-paper"))
    ->Args({512, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
