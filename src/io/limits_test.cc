// Hostile-input regressions of the JSON reader (issue 8): every bad input is
// an InputError, never another exception (which the CLI reports as an
// internal error, exit 1).
#include <gtest/gtest.h>

#include <string>

#include "fcp/io.h"
#include "fcp/presets.h"

namespace fcp {
namespace {

// The field of the InputError `fn` throws; "" if it throws nothing.
template <typename Fn>
std::string InputErrorField(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.field();
  }
  return "";
}

TEST(IoLimitsTest, NumberOverflowIsAnInputError) {
  // Found by fuzz/batch_json_fuzz: nlohmann throws out_of_range.406 here.
  for (const char* text :
       {R"({"sequences": [1e400]})", R"({"sequences": [-1e400]})",
        R"({"cost_model": {"alpha1": 2e308}, "sequences": [3]})"}) {
    EXPECT_EQ(InputErrorField([&] { ParseBatchJson(text); }), "input") << text;
  }
  EXPECT_EQ(InputErrorField([] {
              ParseCostModelJson(R"({"alpha1": 1e999})", CostModel{});
            }),
            "cost_model");
}

TEST(IoLimitsTest, DepthDuplicatesAndBytes) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(InputErrorField([&] { ParseBatchJson(deep); }), "input");
  EXPECT_EQ(InputErrorField([] {
              ParseBatchJson(R"({"sequences": [1], "sequences": [2]})");
            }),
            "input");
  EXPECT_EQ(
      InputErrorField([] { ParseBatchJson("{\"sequences\": [1, \xff]}"); }),
      "input");
  EXPECT_EQ(InputErrorField([] {
              ParseBatchJson("{\"model\": \"\xc3\x28\", \"sequences\": [1]}");
            }),
            "input");
  EXPECT_EQ(InputErrorField([] { ParseBatchJson(""); }), "input");
}

}  // namespace
}  // namespace fcp
