// `fcp eval calibrate`: the simulator checked against measurements others
// published (docs/calibration.md). The published figures are carried as data
// (source, configuration, value); the simulated figure of every row that the
// simulator can express is computed on the spot from the simulator, never
// stored. Thread-safety: pure functions over immutable data.
#pragma once

#include <string>
#include <vector>

namespace fcp::sim {

// One published measurement.
struct PublishedMeasurement {
  std::string id;      // short stable key, e.g. "fa3-fwd-causal-512"
  std::string source;  // URL of the page or paper + table / figure
  std::string config;  // the published configuration, in words
  std::string unit;    // "TFLOPS/s", "tokens/s/GPU", "ratio", ...
  double measured = 0;
  // Empty when the simulator expresses the row; else why it cannot (TP/PP,
  // FP8, another model, ...). Such rows are listed, never simulated.
  std::string not_expressible;
  // Used to fit a simulator constant (its ratio shows the fit, not a
  // prediction); false = held out.
  bool fitted = false;
};

// Every published measurement the project carries, grouped by source.
const std::vector<PublishedMeasurement>& PublishedMeasurements();

struct CalibrationRow {
  PublishedMeasurement published;
  bool expressible = false;
  double simulated =
      0;  // the simulator's figure in the same unit (expressible rows)
  double ratio = 0;  // simulated / measured (expressible rows)
  // Rows not expressible whose nearest simulated configuration still runs:
  // that figure, for reference only (0 = none). Never counted in the summary.
  double approximate = 0;
  // Weak-scaling ratio rows only (0 elsewhere): the lowest the ratio can be
  // when both runs hold the same tokens per GPU and each kernel keeps its
  // efficiency: 1 / (growth of attention pairs per GPU), the limit if
  // attention were all of the time. A published ratio below it needs per-GPU
  // efficiency to fall with length, which no compute term can produce.
  double work_floor = 0;
};

// Simulates every expressible row (a few seconds at most).
std::vector<CalibrationRow> RunCalibration();

// {"rows": [{"source", "config", "measured", "simulated", "ratio", ...}, ...],
//  "summary": {...}}; simulated and ratio are null for rows not expressible.
std::string CalibrationToJson(const std::vector<CalibrationRow>& rows,
                              int indent = 2);
// Fixed-width table (simulated figures labelled as such) with a summary.
std::string CalibrationToTable(const std::vector<CalibrationRow>& rows);

}  // namespace fcp::sim
