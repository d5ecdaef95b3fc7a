// Time bound of the planner at scale (issues 8, 18): planning K sequences on
// N = 4,096 ranks (256 nodes of 16) for K = 10^4 ... 2·10^5 (and 10^6 for the
// baselines), every strategy but `optimal` (exact, <= 12 sequences). The
// fitted complexity (Google Benchmark's BigO over K) shows whether run time
// grows near-linearly (N log N) or quadratically in K. flexsp runs with
// --time-limit 2 s: its counter limit_ratio = planning time / limit must stay
// within 1 ± 0.1 (set-up included). WideCluster plans 10^5 sequences on
// N = 2^20 ranks (issue 18's bytescale/megatron-dcp case).
// Lengths: github-like (log-normal μ = 6.6, σ = 1.75, capped at 128k, seeded);
// cost model: qwen3-8b on the Ascend preset sized to N.
//
//   build/bench/limits_bench                      # all sizes, both strategies
//   build/bench/limits_bench --benchmark_filter=fcp/   # only fcp
//   build/bench/limits_bench
//   --benchmark_filter='PlanAt4096/(flexsp|bytescale)/1000000'
//   build/bench/limits_bench --benchmark_filter=PlanWideCluster
//   build/bench/limits_bench --benchmark_filter='PlanAt32|PlanRanksPerNode'   #
//   issue 30 (PlanAt32Sync, PlanAt32Noise, PlanAt32Comm: fcp ranking by step
//   time)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fcp/presets.h"
#include "fcp/scheduler.h"

namespace {

constexpr int kRanks = 4096;
constexpr int kRanksPerNode = 16;

fcp::PlanRequest GithubBatch(int num_sequences, uint64_t seed,
                             int ranks = kRanks,
                             int ranks_per_node = kRanksPerNode) {
  fcp::PlanRequest req;
  req.cluster = {ranks, ranks_per_node};
  fcp::ClusterPreset cluster = *fcp::FindClusterPreset("ascend910c-4x16");
  cluster.num_ranks = ranks;
  req.cost = fcp::DeriveCostModel(*fcp::FindModelPreset("qwen3-8b"), cluster);
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> lengths(6.6, 1.75);
  req.model =
      fcp::FindModelPreset("qwen3-8b")->shape;  // head counts for Ulysses
  req.sequences.reserve(num_sequences);
  for (int i = 0; i < num_sequences; ++i) {
    const double len = std::clamp(std::round(lengths(rng)), 1.0, 131072.0);
    req.sequences.push_back({static_cast<int64_t>(len), 0.0});
  }
  return req;
}

constexpr double kFlexSpLimitS = 2.0;

void PlanAtScale(benchmark::State& state, const char* strategy, int ranks,
                 int ranks_per_node = kRanksPerNode,
                 std::optional<fcp::GradientSync> sync = std::nullopt,
                 double group_time_sigma = 0, double create_s = 0) {
  const int k = static_cast<int>(state.range(0));
  fcp::PlanRequest req = GithubBatch(k, 42, ranks, ranks_per_node);
  req.grad_sync = sync;
  req.group_time_sigma = group_time_sigma;
  if (create_s > 0) req.communicators = fcp::CommunicatorCache{create_s, {}};
  fcp::PlanOptions options;
  options.strategy = strategy;
  options.time_limit_s = kFlexSpLimitS;
  size_t micro_batches = 0;
  double est_ms = 0, gap = 0, plan_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const fcp::Plan plan = fcp::MakePlan(req, options);
    plan_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
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
  if (std::string(strategy) == "flexsp")
    state.counters["limit_ratio"] = plan_s / kFlexSpLimitS;
}

void PlanAt4096(benchmark::State& state, const char* strategy) {
  PlanAtScale(state, strategy, kRanks);
}
void PlanWideCluster(benchmark::State& state, const char* strategy) {
  PlanAtScale(state, strategy, 1 << 20);
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->Arg(10'000)->Arg(20'000)->Arg(30'000)->Arg(50'000)->Arg(100'000)->Arg(
      200'000);
  b->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(1);
  b->Complexity();  // best fit among O(1), O(N), O(N log N), O(N^2), O(N^3)
}

void BaselineSizes(benchmark::internal::Benchmark* b) {
  Sizes(b);
  b->Arg(1'000'000);
}

// Issue 30: planning time near-linear in K on a small cluster (N = 32, R =
// 16: many micro-batches; fcp took 14 s for 400k sequences, megatron 55 s for
// 10^6), and in ranks_per_node (N = R up to 10^6, three sequences: the
// all-to-all bound scanned every on-node count per degree).
void PlanAt32(benchmark::State& state, const char* strategy) {
  PlanAtScale(state, strategy, 32, 16);
}
// fcp ranking its candidates by step time (issue 30): a gradient sync of
// 0.5 s per collective in 4 buckets, group-time noise of sigma 0.3 (the
// expected makespan over 128 draws), or communicators at 0.2 s each, so that
// the micro-batch shifts score layouts by StepMs or ExpectedStepMs
// (rescoring the whole plan per layout was O(C^2 N^2 / R)).
void PlanAt32Sync(benchmark::State& state, const char* strategy) {
  PlanAtScale(state, strategy, 32, 16,
              fcp::GradientSync{
                  .collective_s = 0.5, .buckets = 4, .forward_share = 0.25});
}
void PlanAt32Noise(benchmark::State& state, const char* strategy) {
  PlanAtScale(state, strategy, 32, 16, std::nullopt, 0.3);
}
void PlanAt32Comm(benchmark::State& state, const char* strategy) {
  PlanAtScale(state, strategy, 32, 16, std::nullopt, 0, 0.2);
}
void Sizes32(benchmark::internal::Benchmark* b) {
  b->Arg(10'000)->Arg(30'000)->Arg(100'000)->Arg(300'000)->Arg(1'000'000);
  b->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(1);
  b->Complexity();
}
void PlanRanksPerNode(benchmark::State& state, const char* strategy) {
  const int ranks = static_cast<int>(state.range(0));
  fcp::PlanRequest req = GithubBatch(0, 42, ranks, ranks);
  req.sequences = {{4096, 0.0}, {1024, 0.0}, {100, 0.0}};
  fcp::PlanOptions options;
  options.strategy = strategy;
  options.time_limit_s = 1.0;
  double plan_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const fcp::Plan plan = fcp::MakePlan(req, options);
    plan_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (plan.status != fcp::PlanStatus::kOk) {
      state.SkipWithError("plan not ok");
      return;
    }
    benchmark::DoNotOptimize(plan.est_ms);
  }
  state.SetComplexityN(ranks);
  if (std::string(strategy) == "flexsp")
    state.counters["limit_ratio"] = plan_s / 1.0;
}
void RanksPerNode(benchmark::internal::Benchmark* b) {
  b->Arg(1'000)->Arg(10'000)->Arg(100'000)->Arg(1'000'000);
  b->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(1);
  b->Complexity();
}

// Every registered strategy but `optimal` (K <= 12, N <= 32 by design).
#define FCP_EVERY_STRATEGY(family, sizes)                                \
  BENCHMARK_CAPTURE(family, fcp, "fcp")->Apply(sizes);                   \
  BENCHMARK_CAPTURE(family, fcp_paper, "fcp-paper")->Apply(sizes);       \
  BENCHMARK_CAPTURE(family, fcp_ring, "fcp-ring")->Apply(sizes);         \
  BENCHMARK_CAPTURE(family, megatron, "megatron")->Apply(sizes);         \
  BENCHMARK_CAPTURE(family, deepspeed, "deepspeed")->Apply(sizes);       \
  BENCHMARK_CAPTURE(family, megatron_dcp, "megatron-dcp")->Apply(sizes); \
  BENCHMARK_CAPTURE(family, megatron_dcp_dev, "megatron-dcp-dev")        \
      ->Apply(sizes);                                                    \
  BENCHMARK_CAPTURE(family, bytescale, "bytescale")->Apply(sizes);       \
  BENCHMARK_CAPTURE(family, flexsp, "flexsp")->Apply(sizes);             \
  BENCHMARK_CAPTURE(family, ref_share, "ref-share")->Apply(sizes);       \
  BENCHMARK_CAPTURE(family, ref_bisect, "ref-bisect")->Apply(sizes);     \
  BENCHMARK_CAPTURE(family, ref_grow, "ref-grow")->Apply(sizes)

FCP_EVERY_STRATEGY(PlanAt32, Sizes32);
FCP_EVERY_STRATEGY(PlanRanksPerNode, RanksPerNode);
BENCHMARK_CAPTURE(PlanAt32Sync, fcp_grad_sync, "fcp")->Apply(Sizes32);
BENCHMARK_CAPTURE(PlanAt32Noise, fcp_noise, "fcp")->Apply(Sizes32);
BENCHMARK_CAPTURE(PlanAt32Comm, fcp_communicators, "fcp")->Apply(Sizes32);
BENCHMARK_CAPTURE(PlanAt4096, fcp, "fcp")->Apply(Sizes);
BENCHMARK_CAPTURE(PlanAt4096, fcp_paper, "fcp-paper")->Apply(Sizes);
BENCHMARK_CAPTURE(PlanAt4096, megatron, "megatron")->Apply(BaselineSizes);
BENCHMARK_CAPTURE(PlanAt4096, deepspeed, "deepspeed")->Apply(BaselineSizes);
BENCHMARK_CAPTURE(PlanAt4096, megatron_dcp, "megatron-dcp")
    ->Apply(BaselineSizes);
BENCHMARK_CAPTURE(PlanAt4096, bytescale, "bytescale")->Apply(BaselineSizes);
BENCHMARK_CAPTURE(PlanAt4096, flexsp, "flexsp")->Apply(BaselineSizes);
BENCHMARK_CAPTURE(PlanWideCluster, bytescale, "bytescale")
    ->Arg(100'000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(PlanWideCluster, megatron_dcp, "megatron-dcp")
    ->Arg(100'000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
