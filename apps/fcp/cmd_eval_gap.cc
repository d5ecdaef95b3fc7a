// `fcp eval gap`: optimality gap of every strategy against `optimal` on
// seeded random small instances. Parses flags, calls the library, prints.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <string>

#include "command.h"
#include "fcp/gap_eval.h"
#include "fcp/scheduler.h"
#include "fcp/types.h"
#include "progress.h"

namespace fcp::cli {
namespace {

// flexsp's MILP may use its whole --time-limit on every instance: say up
// front, even with -q, how long that can take (200 instances: minutes).
void WarnIfLong(const baselines::GapOptions& options,
                const std::string& strategies) {
  const bool flexsp = strategies.empty()
                          ? FindStrategy("flexsp") != nullptr
                          : strategies.find("flexsp") != std::string::npos;
  if (!flexsp) return;
  const double worst_s = options.instances * options.time_limit_s;
  if (worst_s < 60) return;
  std::fprintf(stderr,
               "note: eval gap: flexsp's MILP may use up to %g s on each of %d "
               "instances (up "
               "to %.0f min in all; --time-limit lowers it); progress on "
               "stderr unless -q\n",
               options.time_limit_s, options.instances, worst_s / 60);
  std::fflush(stderr);
}

int RunEvalGap(int argc, char** argv) {
  CLI::App app{
      "Plan seeded random small instances (K <= --max-sequences sequences, N "
      "<= "
      "--max-ranks ranks, random cost coefficients, one micro-batch holds all) "
      "with "
      "every strategy and with `optimal` (exact), and print per strategy the "
      "mean / "
      "p95 / max gap to optimal (planner cost-model estimates) and its solver "
      "time "
      "(wall-clock on this machine).",
      "fcp eval gap"};
  baselines::GapOptions options;
  std::string format = "table";
  std::string strategies;
  app.add_option("--seed", options.seed, "random seed")->capture_default_str();
  app.add_option("--instances", options.instances, "number of random instances")
      ->capture_default_str();
  app.add_option("--max-sequences", options.max_sequences,
                 "K per instance is in [1, this] (<= 12)")
      ->capture_default_str();
  app.add_option("--max-ranks", options.max_ranks,
                 "N per instance is in [1, this] (<= 32)")
      ->capture_default_str();
  app.add_option("--time-limit", options.time_limit_s,
                 "flexsp: wall-clock limit of each planning call, seconds; "
                 "other strategies "
                 "ignore it")
      ->capture_default_str();
  app.add_option(
      "--strategies", strategies,
      "comma-separated strategies (default: every registered one but optimal)");
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "no progress on stderr");
  app.add_option("-f,--format", format, "table or json")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  options.strategies = SplitList(strategies);
  try {
    WarnIfLong(options, strategies);
    Progress progress(!quiet);
    options.progress = progress.Callback();
    const baselines::GapReport report = baselines::EvaluateGap(options);
    progress.Finish();
    const std::string text = format == "json"
                                 ? baselines::GapReportToJson(report) + "\n"
                                 : baselines::GapReportToTable(report);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND("eval gap",
            "optimality gap of every strategy vs optimal on random instances",
            RunEvalGap);

}  // namespace
}  // namespace fcp::cli
