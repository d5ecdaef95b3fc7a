// The strategy table (docs/design.md §4): the one place that knows every strategy,
// FCP's and the baselines'. It sits above src/planner and src/baselines so the
// planner core includes no baseline; MakePlan looks the name up here and hands
// the strategy to the planner core (planner::RunStrategy).
#include <memory>
#include <string>
#include <vector>

#include "baselines/dynamic.h"
#include "baselines/flexsp.h"
#include "baselines/heuristics.h"
#include "baselines/megatron_dcp.h"
#include "baselines/optimal.h"
#include "baselines/static_cp.h"
#include "fcp/scheduler.h"
#include "fcp/types.h"
#include "planner/fcp_strategies.h"
#include "planner/run_strategy.h"

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
    out.push_back(std::make_unique<baselines::FlexSpStrategy>());
    out.push_back(std::make_unique<baselines::ByteScaleStrategy>());
    out.push_back(std::make_unique<baselines::OptimalStrategy>());
    // Reference heuristics (issue 32): yardsticks for fcp's search, not planners.
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

Plan MakePlan(const PlanRequest& request, const PlanOptions& options) {
  const Strategy* strategy = FindStrategy(options.strategy);
  if (!strategy) {
    std::string names;
    for (const auto& n : StrategyNames()) names += (names.empty() ? "" : ", ") + n;
    throw InputError("strategy", "unknown strategy \"" + options.strategy +
                                     "\" (known: " + names + ")");
  }
  return planner::RunStrategy(*strategy, request, options);
}

}  // namespace fcp
