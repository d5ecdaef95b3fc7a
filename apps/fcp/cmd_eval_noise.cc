// `fcp eval noise`: robustness of plans to cost-coefficient error (paper
// Tables 4-5), on the simulated cluster.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <string>

#include "command.h"
#include "fcp/eval.h"
#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/profiler.h"
#include "fcp/unknown_names.h"

namespace fcp::cli {
namespace {

// The flags of `fcp eval noise`: the options, and the lists and file the
// command parses into them.
struct NoiseFlags {
  NoiseEvalOptions o;
  std::string ranks = "32,64", noise = "5,10,20,30,50", cost_model_file,
              format = "table";
  std::string perturb = "all";
};

void AddNoiseOptions(CLI::App& app, NoiseFlags& f) {
  app.add_option("--cluster", f.o.cluster, "cluster preset")
      ->capture_default_str();
  app.add_option("-m,--model", f.o.model, "model preset")
      ->capture_default_str();
  app.add_option("-d,--dataset", f.o.dataset, "dataset of the batches")
      ->capture_default_str();
  app.add_option(
         "--batch", f.o.batch_sequences,
         "sequences per global batch (at most 10^7, as `fcp plan`'s input)")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  app.add_option("--batches", f.o.batches, "global batches per rank count")
      ->capture_default_str();
  app.add_option("--trials", f.o.trials,
                 "perturbation draws per batch and level")
      ->capture_default_str();
  app.add_option("--ranks", f.ranks, "comma list of rank counts")
      ->capture_default_str();
  app.add_option("--noise", f.noise, "comma list of noise levels in percent")
      ->capture_default_str();
  app.add_option("-s,--strategy", f.o.strategy, "planner strategy")
      ->capture_default_str();
  app.add_option(
         "--perturb", f.perturb,
         fmt::format(
             "comma list of the timing coefficients to perturb ({}), or all; "
             "the same draws whatever the list, for ablations",
             fmt::join(kNoiseCoefficients, ", ")))
      ->capture_default_str();
  app.add_flag(
      "--common-factor", f.o.common_factor,
      "one common factor for every perturbed coefficient instead of one each");
  app.add_option(
         "--group-time-sigma", f.o.group_time_sigma,
         "plan every batch for this group-time spread (fcp ranks its "
         "candidates by the "
         "expected step under log-normal noise of this sigma), in [0, 2]")
      ->capture_default_str();
  app.add_option(
         "--feedback-steps", f.o.feedback_steps,
         "before each plan, learn from this many other batches: plan them, "
         "time "
         "their groups in the simulator, recalibrate the coefficients (0..64)")
      ->capture_default_str();
  app.add_option("--prior-sigma", f.o.recalibration.prior_sigma,
                 "with --feedback-steps: how far (log-normal sigma) the "
                 "planner's coefficients "
                 "are believed to be off, in (0, 2]")
      ->capture_default_str();
  app.add_option("--seed", f.o.seed, "seed")->capture_default_str();
  app.add_option("--mem-headroom", f.o.mem_headroom,
                 "plan against this fraction less memory (planner vs simulator "
                 "memory model)")
      ->capture_default_str();
  app.add_option("--cost-model", f.cost_model_file,
                 "base coefficients (e.g. from fcp profile); default: fit on "
                 "sim:<cluster>");
  app.add_option("-f,--format", f.format, "table or json")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
}

// The list flags and --cost-model into the options.
void ApplyNoiseLists(NoiseFlags& f) {
  NoiseEvalOptions& o = f.o;
  o.rank_counts.clear();
  for (int64_t r : ParseIntegerList(f.ranks, "ranks", 1, 1 << 20)) {
    o.rank_counts.push_back(static_cast<int>(r));
  }
  o.noise_levels.clear();
  for (double p : ParseNumberList(f.noise, "noise"))
    o.noise_levels.push_back(p / 100.0);
  if (f.perturb != "all") {
    o.perturb = SplitList(f.perturb);
    if (o.perturb.empty())
      throw InputError("perturb", "empty list (use all or names)");
  }
  if (!f.cost_model_file.empty())
    o.base = ReadCostModelOverPresets(f.cost_model_file, o.model, o.cluster);
}

int RunEvalNoise(int argc, char** argv) {
  CLI::App app{
      "Perturb the fitted cost coefficients by +-p (uniform, seeded), re-plan "
      "the same "
      "batches and report how often the CP-degree multiset is unchanged and "
      "the change in "
      "SIMULATED step time, beside the paper's Tables 4-5.",
      "fcp eval noise"};
  NoiseFlags f;
  AddNoiseOptions(app, f);
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  try {
    ApplyNoiseLists(f);
    const NoiseEvalReport rep = RunNoiseEval(f.o);
    const std::string text = f.format == "json" ? NoiseEvalToJson(rep, 2) + "\n"
                                                : NoiseEvalToTable(rep);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND(
    "eval noise",
    "paper Tables 4-5: plan robustness to cost-coefficient noise (simulated)",
    RunEvalNoise);

}  // namespace
}  // namespace fcp::cli
