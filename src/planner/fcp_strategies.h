// Registration of the FCP strategies (`fcp`, `fcp-paper`).
#pragma once

#include <memory>
#include <vector>

#include "fcp/check.h"
#include "fcp/scheduler.h"

namespace fcp::planner {

void AppendFcpStrategies(std::vector<std::unique_ptr<Strategy>>& out);

}  // namespace fcp::planner
