// Registration of the baseline strategies (DESIGN.md §4) into the planner's
// strategy table. Called once by src/planner/registry.cc.
#pragma once

#include <memory>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp {

// Appends one instance of every baseline strategy.
void AppendBaselineStrategies(std::vector<std::unique_ptr<Strategy>>& out);

}  // namespace fcp
