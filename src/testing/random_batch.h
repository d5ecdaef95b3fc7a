// Seeded random FCP instances for tests (test-only entry point). The
// generator lives in fcp_core (src/baselines/random_instances.h) because
// `fcp eval gap` uses it too; this header re-exports it as fcp::testing.
// Thread-safety: reentrant; the caller owns the rng.
#pragma once

#include "baselines/random_instances.h"

namespace fcp::testing {

using baselines::RandomCostModel;
using baselines::RandomInstanceOptions;
using baselines::RandomRequest;

}  // namespace fcp::testing
