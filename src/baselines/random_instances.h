// Seeded random FCP instances for `fcp eval gap` and the tests (lives in
// fcp_core so the CLI can use it; src/testing/random_batch.h re-exports it).
// Deterministic for a given rng state and platform (std::mt19937_64 and the
// standard distributions used are implementation-defined only in
// uniform_real_distribution's algorithm; libstdc++ here).
// Thread-safety: functions are reentrant; the caller owns the rng.
#pragma once

#include <cstdint>
#include <random>

#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp::baselines {

struct RandomInstanceOptions {
  int min_sequences = 1;
  int max_sequences = 8;
  int min_ranks = 1;
  int max_ranks = 16;
  int64_t min_length_tokens = 64;
  int64_t max_length_tokens = 65536;
  // Probability that a sequence gets a non-causal mask factor eta in (0, 1].
  double mixed_mask_probability = 0.25;
  // Resample until Σ_k d_min({s_k}) <= N, so that one micro-batch holding all
  // sequences exists (the setting of `optimal` and the brute force).
  bool one_micro_batch_feasible = true;
  // Attach a ModelShape with random power-of-two-ish head counts.
  bool with_model = true;
  // Probability that a sequence is multimodal: vision_tokens uniform in
  // [0, length], with a random alpha2_vision. Drawn after everything else
  // (0: no draws, so the other options' instances stay as they were).
  double vision_probability = 0;
};

// A cost model around the qwen3-8b-on-Ascend magnitudes with every
// coefficient scaled by a random factor (compute-, communication- and
// memory-bound regimes all occur). Per-rank token capacity is in [2k, 64k].
CostModel RandomCostModel(std::mt19937_64& rng);

// A random request (cluster, cost model, sequences, optionally a model shape).
PlanRequest RandomRequest(std::mt19937_64& rng,
                          const RandomInstanceOptions& options = {});

}  // namespace fcp::baselines
