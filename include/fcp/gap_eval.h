// `fcp eval gap`: optimality gaps of every strategy against `optimal` on
// seeded random small instances (docs/design.md §4, issue 3). Library side of
// the command; the CLI only parses and prints. Gap of a plan = est_ms / optimal
// est_ms - 1 (estimates of the planner's cost model; all-to-all plans use the
// documented Ulysses term, so their gap can be negative). Times are wall-clock
// on the machine that runs it. Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fcp::baselines {

struct GapOptions {
  uint64_t seed = 1;
  int instances = 200;
  int max_sequences = 12;  // K in [1, max_sequences]; <= kOptimalMaxSequences
  int max_ranks = 16;      // N in [1, max_ranks]; <= kOptimalMaxRanks
  double time_limit_s = 10.0;  // flexsp: wall-clock limit of each planning call
  std::vector<std::string>
      strategies;  // empty: every registered one but optimal
  // Called after each instance ("instance i/I"); may be empty.
  std::function<void(const std::string&)> progress;
};

struct StrategyGap {
  std::string strategy;
  int planned = 0;            // plans with status ok
  int infeasible = 0;         // strategy's own rule could not place a sequence
  int invalid = 0;            // plans failing ValidatePlan (should be 0)
  int multi_micro_batch = 0;  // plans using more than one micro-batch
  int closest = 0;  // instances where it had the smallest gap (ties count)
  double mean_gap = 0, p95_gap = 0, max_gap = 0, min_gap = 0;
  int worst_instance = -1;  // instance index of max_gap
  double mean_solver_ms = 0, max_solver_ms = 0;
  std::vector<double> gaps;  // per instance (NaN when not planned)
  std::vector<std::string> invalid_reasons;  // first few
};

struct GapReport {
  GapOptions options;
  int instances = 0;
  double optimal_mean_solver_ms = 0, optimal_max_solver_ms = 0;
  std::vector<StrategyGap> strategies;
};

// Throws InputError naming the option ("instances", "max_sequences", ...).
GapReport EvaluateGap(const GapOptions& options);

std::string GapReportToJson(const GapReport& report, int indent = 2);
std::string GapReportToTable(const GapReport& report);

}  // namespace fcp::baselines
