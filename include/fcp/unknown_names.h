// The error text for a name that is not a preset or a registered strategy:
// the valid names, so that a typo is fixed from the message alone. Defined
// beside the names they list: src/presets/presets.cc (presets) and
// src/strategies/registry.cc (strategies).
#pragma once

#include <string>
#include <string_view>

namespace fcp {

// "unknown model preset 'x' (known: a, b, ...)", from ModelPresets().
std::string UnknownModelPresetMessage(std::string_view name);
// "unknown cluster preset 'x' (known: a, b, ...)", from ClusterPresets().
std::string UnknownClusterPresetMessage(std::string_view name);
// The known strategies, or why this build has none of that name (flexsp in a
// build without CBC, such as the pip wheel).
std::string UnknownStrategyMessage(std::string_view name);

}  // namespace fcp
