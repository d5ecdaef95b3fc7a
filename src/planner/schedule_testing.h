// Helpers shared by the schedule tests (step_test.cc, noise_test.cc).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fcp/io.h"
#include "fcp/types.h"

namespace fcp::testing {

// A group on `ranks` with this estimate (ms) and one sequence.
inline GroupPlan Group(std::vector<int> ranks, double est_ms) {
  GroupPlan g;
  g.ranks = std::move(ranks);
  g.sequences = {0};
  g.est_ms = est_ms;
  return g;
}

// The plan's groups (JSON), without notes and solver time.
inline std::string GroupsJson(Plan plan) {
  plan.notes.clear();
  plan.solver_ms = 0;
  return PlanToJson(plan, -1);
}

}  // namespace fcp::testing
