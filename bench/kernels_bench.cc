// Attention (forward/backward) and GEMM throughput on this CPU, with the
// fraction of theoretical peak (derivation printed at start, see
// src/profile/cpu_info.h). Every benchmark verifies its output against the
// naive reference (sampled rows for long sequences), nccl-tests style: a wrong
// result is reported as an error, not a number.
//
//   build/bench/kernels_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "profile/cpu_info.h"

namespace {

using namespace fcp::kernels;

const fcp::profile::CpuInfo& Cpu() {
  static const fcp::profile::CpuInfo info = fcp::profile::ReadCpuInfo();
  return info;
}

std::vector<float> Random(size_t n, uint32_t seed, float amp = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> x(n);
  for (auto& e : x) e = u(rng);
  return x;
}

int64_t VisiblePairs(int64_t n, bool causal) {
  return causal ? n * (n + 1) / 2 : n * n;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Register-only FMA loop on one core: 12 independent 8-lane chains. Returns
// FLOP/s per core-second of CPU time: the peak at the clock the core really
// runs (turbo, or a throttled VM), as opposed to the nominal cpuinfo MHz.
__attribute__((target("avx2,fma"))) double FmaLoopFlopsPerCore(int64_t outer) {
  constexpr int kChains = 12, kInner = 4096;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * c);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  const double t0 = ProcessCpuSeconds();
  for (int64_t o = 0; o < outer; ++o)
    for (int i = 0; i < kInner; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  const double cpu_s = ProcessCpuSeconds() - t0;
  float sink[8];
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  _mm256_storeu_ps(sink, total);
  benchmark::DoNotOptimize(sink);
  return 2.0 * 8 * kChains * kInner * static_cast<double>(outer) / cpu_s;
}

// The FMA peak from repeated measurement: kPeakReps runs of ~10 ms each; the
// median is the peak (one start-up run was 25% low: a cold or preempted
// core made every kernel look faster than peak). min/max show the spread.
struct PeakMeasurement {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};
const PeakMeasurement& MeasuredPeak() {
  static const PeakMeasurement peak = [] {
    PeakMeasurement p;
    if (!__builtin_cpu_supports("fma")) return p;
    constexpr int kPeakReps = 21;
    std::vector<double> runs;
    FmaLoopFlopsPerCore(200);  // warm-up: wake the core to its clock
    for (int i = 0; i < kPeakReps; ++i)
      runs.push_back(FmaLoopFlopsPerCore(400));
    std::sort(runs.begin(), runs.end());
    p.median = runs[runs.size() / 2];
    p.min = runs.front();
    p.max = runs.back();
    p.reps = kPeakReps;
    return p;
  }();
  return peak;
}
double MeasuredPeakPerCore() { return MeasuredPeak().median; }
// FLOP per cycle the FMA loop can reach: 8 AVX2 lanes x 2 (FMA) x 2 FMA pipes.
// Its own width, not the CPU's widest (AVX-512 would double the nominal
// figure), so measured peak / this is the clock the core runs at.
constexpr double kFmaLoopFlopsPerCycle = 8 * 2 * 2;

// Rates per core-second of process CPU time (robust when other jobs share the
// machine): GFLOPs_per_core, and frac_peak = that / nominal per-core peak;
// GFLOPs = per-core rate x threads.
void SetRateCounters(benchmark::State& state, double flops_per_iter,
                     int threads, double cpu_s) {
  const double per_core = flops_per_iter * state.iterations() / cpu_s;
  state.counters["GFLOPs"] = per_core * threads * 1e-9;
  state.counters["GFLOPs_per_core"] = per_core * 1e-9;
  state.counters["frac_peak"] = per_core / Cpu().peak_flops_per_core;
  if (MeasuredPeakPerCore() > 0)
    state.counters["frac_fma_peak"] = per_core / MeasuredPeakPerCore();
}

// args: length, head_dim, causal
void BM_AttentionForward(benchmark::State& state) {
  const int n = state.range(0), dh = state.range(1);
  const bool causal = state.range(2) != 0;
  const auto q = Random(size_t(n) * dh, 1, 2.f), k = Random(size_t(n) * dh, 2),
             v = Random(size_t(n) * dh, 3);
  std::vector<int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> out(size_t(n) * dh), lse(n);
  const float scale = 1.0f / std::sqrt(float(dh));
  const double t0 = ProcessCpuSeconds();
  for (auto _ : state) {
    AttentionForward(q.data(), k.data(), v.data(), n, n, dh, pos.data(),
                     pos.data(), causal, scale, out.data(), lse.data());
    benchmark::DoNotOptimize(out.data());
  }
  const double cpu_s = ProcessCpuSeconds() - t0;
  // Verify 8 sampled rows (each row against all keys).
  std::vector<float> ro(dh), rl(1);
  for (int t = 0; t < 8; ++t) {
    const int i = (int64_t(t) * 7919 + n - 1) % n;
    ReferenceAttentionForward(q.data() + size_t(i) * dh, k.data(), v.data(), 1,
                              n, dh, &pos[i], pos.data(), causal, scale,
                              ro.data(), rl.data());
    float err = std::fabs(rl[0] - lse[i]);
    for (int c = 0; c < dh; ++c)
      err = std::max(err, std::fabs(ro[c] - out[size_t(i) * dh + c]));
    if (!(err <= 1e-4f)) {
      state.SkipWithError("forward output does not match the reference");
      return;
    }
  }
  SetRateCounters(state, AttentionForwardFlops(VisiblePairs(n, causal), dh), 1,
                  cpu_s);
}

void BM_AttentionBackward(benchmark::State& state) {
  const int n = state.range(0), dh = state.range(1);
  const bool causal = state.range(2) != 0;
  const auto q = Random(size_t(n) * dh, 1, 2.f), k = Random(size_t(n) * dh, 2),
             v = Random(size_t(n) * dh, 3), g = Random(size_t(n) * dh, 4);
  std::vector<int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> out(size_t(n) * dh), lse(n);
  const float scale = 1.0f / std::sqrt(float(dh));
  AttentionForward(q.data(), k.data(), v.data(), n, n, dh, pos.data(),
                   pos.data(), causal, scale, out.data(), lse.data());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  const double t0 = ProcessCpuSeconds();
  for (auto _ : state) {
    std::fill(dq.begin(), dq.end(), 0.f);
    std::fill(dk.begin(), dk.end(), 0.f);
    std::fill(dv.begin(), dv.end(), 0.f);
    AttentionBackward(q.data(), k.data(), v.data(), out.data(), g.data(),
                      lse.data(), n, n, dh, pos.data(), pos.data(), causal,
                      scale, dq.data(), dk.data(), dv.data());
    benchmark::DoNotOptimize(dq.data());
  }
  const double cpu_s = ProcessCpuSeconds() - t0;
  // Verify: dq of 4 sampled rows (a query row's dq depends only on that row).
  for (int t = 0; t < 4; ++t) {
    const int i = (int64_t(t) * 7919 + n - 1) % n;
    std::vector<float> rdq(dh, 0.f), rdk(size_t(n) * dh, 0.f),
        rdv(size_t(n) * dh, 0.f);
    ReferenceAttentionBackward(q.data() + size_t(i) * dh, k.data(), v.data(),
                               out.data() + size_t(i) * dh,
                               g.data() + size_t(i) * dh, &lse[i], 1, n, dh,
                               &pos[i], pos.data(), causal, scale, rdq.data(),
                               rdk.data(), rdv.data());
    float err = 0;
    for (int c = 0; c < dh; ++c)
      err = std::max(err, std::fabs(rdq[c] - dq[size_t(i) * dh + c]));
    if (!(err <= 1e-3f)) {
      state.SkipWithError("backward dq does not match the reference");
      return;
    }
  }
  SetRateCounters(state, AttentionBackwardFlops(VisiblePairs(n, causal), dh), 1,
                  cpu_s);
}

// args: m (tokens), n (out features), k (in features), blas threads
void BM_GemmLinear(benchmark::State& state) {
  const int m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = state.range(3);
  SetBlasThreads(threads);
  const auto x = Random(size_t(m) * k, 5), w = Random(size_t(n) * k, 6);
  std::vector<float> y(size_t(m) * n);
  const double t0 = ProcessCpuSeconds();
  for (auto _ : state) {
    Linear(x.data(), w.data(), m, n, k, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double cpu_s = ProcessCpuSeconds() - t0;
  for (int t = 0; t < 16; ++t) {
    const int i = (t * 7919) % m, j = (t * 104729) % n;
    double s = 0;
    for (int p = 0; p < k; ++p)
      s += double(x[size_t(i) * k + p]) * w[size_t(j) * k + p];
    if (!(std::fabs(s - y[size_t(i) * n + j]) <= 1e-3 * std::sqrt(double(k)))) {
      state.SkipWithError("GEMM output does not match the naive dot product");
      return;
    }
  }
  SetRateCounters(state, GemmFlops(m, n, k), threads, cpu_s);
  SetBlasThreads(1);
}

// Measured single-core FMA peak: 12 independent 8-lane FMA chains in
// registers (no memory traffic). Tells the nominal-clock derivation apart
// from the clock the core actually runs at (turbo, or a throttled VM).
__attribute__((target("avx2,fma"))) void BM_FmaPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("fma")) {
    state.SkipWithError("no FMA on this CPU");
    return;
  }
  constexpr int kChains = 12, kInner = 4096;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * c);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  const double t0 = ProcessCpuSeconds();
  for (auto _ : state) {
    for (int i = 0; i < kInner; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  const double cpu_s = ProcessCpuSeconds() - t0;
  float sink[8];
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  _mm256_storeu_ps(sink, total);
  benchmark::DoNotOptimize(sink);
  SetRateCounters(state, 2.0 * 8 * kChains * kInner, 1, cpu_s);
}
BENCHMARK(BM_FmaPeak);

BENCHMARK(BM_AttentionForward)
    ->ArgNames({"len", "dh", "causal"})
    ->ArgsProduct({{512, 2048, 4096}, {64, 128}, {1}})
    ->Args({2048, 128, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBackward)
    ->ArgNames({"len", "dh", "causal"})
    ->ArgsProduct({{512, 2048, 4096}, {128}, {1}})
    ->Args({2048, 128, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemmLinear)
    ->ArgNames({"m", "n", "k", "threads"})
    ->Args({2048, 1024, 1024, 1})
    ->Args({2048, 4096, 1024, 1})
    ->Args({2048, 1024, 4096, 1})
    ->Args({2048, 4096, 1024, 2})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  const auto& cpu = Cpu();
  std::printf("CPU: %s; attention %s path; peak: %s\n", cpu.model_name.c_str(),
              AttentionUsesAvx2() ? "AVX2+FMA" : "baseline-ISA",
              cpu.derivation.c_str());
  std::printf(
      "frac_peak: of the nominal per-core peak above; frac_fma_peak: of the "
      "measured\n"
      "register-only FMA loop, median of %d runs %.1f GFLOP/s per core (min "
      "%.1f, max\n"
      "%.1f; effective clock %.2f GHz).\n"
      "Rates are per core-second of process CPU time (robust on a shared "
      "machine);\n"
      "attention runs on 1 core.\n",
      MeasuredPeak().reps, MeasuredPeakPerCore() / 1e9,
      MeasuredPeak().min / 1e9, MeasuredPeak().max / 1e9,
      MeasuredPeakPerCore() / 1e9 / kFmaLoopFlopsPerCycle);
  SetBlasThreads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
