// Seeded random FCP instances for tests (test-only entry point). The
// generator lives in fcp_core (src/baselines/random_instances.h) because
// `fcp eval gap` uses it too; this header re-exports it as fcp::testing.
// Thread-safety: reentrant; the caller owns the rng.
#pragma once

#include <cstdint>
#include <random>

#include "baselines/random_instances.h"
#include "fcp/scheduler.h"

namespace fcp::testing {

using baselines::RandomCostModel;
using baselines::RandomInstanceOptions;
using baselines::RandomRequest;

// A random request (up to `max_sequences` sequences on 32 ranks), every other
// one needing several micro-batches, every third with a gradient sync of half
// the lower bound (scored by step time). `salt` keeps tests' streams apart.
inline PlanRequest RandomRequestMaybeSync(uint64_t seed, uint64_t salt,
                                          int max_sequences) {
  std::mt19937_64 rng(seed * salt);
  RandomInstanceOptions opt;
  opt.max_sequences = max_sequences;
  opt.max_ranks = 32;
  opt.one_micro_batch_feasible = seed % 2 == 0;
  PlanRequest req = RandomRequest(rng, opt);
  if (seed % 3 == 0) {
    req.grad_sync =
        GradientSync{.collective_s = LowerBoundMs(req) / 2000.0, .buckets = 4};
  }
  return req;
}

}  // namespace fcp::testing
