// `fcp eval calibrate`: published H100 measurements beside the simulator's
// prediction. Parses flags, calls the library, prints.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "command.h"
#include "fcp/calibration.h"

namespace fcp::cli {
namespace {

int RunEvalCalibrate(int argc, char** argv) {
  CLI::App app{
      "Print published measurements (FlashAttention-3 kernels, TorchTitan H100 "
      "runs, "
      "Llama 3, Megatron-Bridge, NeMo) with their source, configuration and "
      "value beside "
      "the SIMULATED figure for the same configuration and the ratio simulated "
      "/ "
      "measured. Rows the simulator cannot express (TP/PP, FP8, ...) are "
      "listed with the "
      "reason. docs/calibration.md explains every row.",
      "fcp eval calibrate"};
  std::string format = "table";
  app.add_option("-f,--format", format, "table or json")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  const auto rows = sim::RunCalibration();
  const std::string text = format == "json"
                               ? sim::CalibrationToJson(rows) + "\n"
                               : sim::CalibrationToTable(rows);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

FCP_COMMAND(
    "eval calibrate",
    "published H100 measurements beside the simulator's prediction (ratios)",
    RunEvalCalibrate);

}  // namespace
}  // namespace fcp::cli
