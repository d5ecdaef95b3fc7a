#include "baselines/register.h"

#include "baselines/dynamic.h"
#include "baselines/flexsp.h"
#include "baselines/optimal.h"
#include "baselines/static_cp.h"

namespace fcp {

void AppendBaselineStrategies(std::vector<std::unique_ptr<Strategy>>& out) {
  out.push_back(std::make_unique<baselines::MegatronStrategy>());
  out.push_back(std::make_unique<baselines::DeepSpeedStrategy>());
  out.push_back(std::make_unique<baselines::MegatronDcpStrategy>());
  out.push_back(std::make_unique<baselines::FlexSpStrategy>());
  out.push_back(std::make_unique<baselines::ByteScaleStrategy>());
  out.push_back(std::make_unique<baselines::OptimalStrategy>());
}

}  // namespace fcp
