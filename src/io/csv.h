// CSV field splitting shared by the length readers (lengths.cc,
// dataset_lengths.cc). Internal to src/io.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fcp {

// Splits one CSV line; double quotes protect commas ("" is a literal quote).
std::vector<std::string> SplitCsv(std::string_view line);

}  // namespace fcp
