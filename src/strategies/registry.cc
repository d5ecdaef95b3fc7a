// The strategy table (docs/design.md §4): the one place that knows every
// strategy, FCP's and the baselines'. It sits above src/planner and
// src/baselines so the planner core includes no baseline; MakePlan
// (src/planner/scheduler.cc) looks the name up here and hands the strategy to
// the planner core (planner::RunStrategy).
#include <memory>
#include <string>
#include <vector>

#include "baselines/dynamic.h"
#if FCP_HAVE_CBC
#include "baselines/flexsp.h"
#endif
#include "baselines/heuristics.h"
#include "baselines/megatron_dcp.h"
#include "baselines/optimal.h"
#include "baselines/static_cp.h"
#include "fcp/scheduler.h"
#include "fcp/types.h"
#include "fcp/unknown_names.h"
#include "planner/fcp_strategies.h"

namespace fcp {
namespace {

const std::vector<std::unique_ptr<Strategy>>& Registry() {
  static const std::vector<std::unique_ptr<Strategy>> strategies = [] {
    std::vector<std::unique_ptr<Strategy>> out;
    planner::AppendFcpStrategies(out);  // "fcp" first: the default
    out.push_back(std::make_unique<baselines::MegatronStrategy>());
    out.push_back(std::make_unique<baselines::DeepSpeedStrategy>());
    out.push_back(std::make_unique<baselines::MegatronDcpStrategy>());
    out.push_back(std::make_unique<baselines::MegatronDcpDevStrategy>());
#if FCP_HAVE_CBC  // FlexSP's MILP needs CBC; builds without it (the wheel)
                  // leave it out.
    out.push_back(std::make_unique<baselines::FlexSpStrategy>());
#endif
    out.push_back(std::make_unique<baselines::ByteScaleStrategy>());
    out.push_back(std::make_unique<baselines::OptimalStrategy>());
    // Reference heuristics (issue 32): yardsticks for fcp's search, not
    // planners.
    out.push_back(std::make_unique<baselines::RefShareStrategy>());
    out.push_back(std::make_unique<baselines::RefBisectStrategy>());
    out.push_back(std::make_unique<baselines::RefGrowStrategy>());
    return out;
  }();
  return strategies;
}

}  // namespace

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& s : Registry()) names.emplace_back(s->name());
  return names;
}

const Strategy* FindStrategy(std::string_view name) {
  for (const auto& s : Registry()) {
    if (s->name() == name) return s.get();
  }
  return nullptr;
}

std::string UnknownStrategyMessage(std::string_view name) {
#if !FCP_HAVE_CBC
  if (name == "flexsp") {
    return "flexsp needs the CBC MILP solver, which this build of fcp leaves "
           "out (the pip "
           "wheel does): build fcp from source with coinor-libcbc-dev "
           "installed";
  }
#endif
  std::string names;
  for (const auto& n : StrategyNames())
    names += (names.empty() ? "" : ", ") + n;
  return "unknown strategy \"" + std::string(name) + "\" (known: " + names +
         ")";
}

}  // namespace fcp
