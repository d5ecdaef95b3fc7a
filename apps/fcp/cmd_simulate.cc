// `fcp simulate`: run strategies over simulated global batches.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "command.h"
#include "fcp/datasets.h"
#include "fcp/experiment.h"
#include "fcp/io.h"
#include "fcp/plot.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/unknown_names.h"
#include "progress.h"

namespace fcp::cli {
namespace {

// The flags of `fcp simulate`.
struct SimulateFlags {
  sim::ExperimentConfig cfg;
  std::string dataset, lengths_file,
      strategies = "fcp,fcp-paper,megatron,deepspeed";
  std::string format = "table", cost_model_file;
  std::string recompute = "full";
  bool serial_grad_sync = false;
  bool makespan_only = false;
  std::string plot_file, trace_file;
  bool quiet = false;
  std::string plan_file, save_plans_file;
};

// Long because: the option table, one CLI11 entry per flag with its help.
void AddSimulateOptions(CLI::App& app, SimulateFlags& f) {
  std::string names;
  for (const auto& n : DatasetNames()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--dataset", f.dataset,
                 "synthetic dataset: " + names +
                     " (default: github, unless "
                     "--lengths is given)");
  app.add_option(
      "--lengths", f.lengths_file,
      "real lengths: one integer per line, or CSV with a `tokens` column");
  app.add_option("--model", f.cfg.model, "model preset")->capture_default_str();
  app.add_option("--cluster", f.cfg.cluster, "cluster preset")
      ->capture_default_str();
  app.add_option("--ranks", f.cfg.ranks, "ranks N (0 = the cluster preset's)");
  app.add_option("--gbs", f.cfg.global_batch, "sequences per global batch")
      ->capture_default_str();
  app.add_option("--steps", f.cfg.steps, "measured global batches")
      ->capture_default_str();
  app.add_option("--warmup", f.cfg.warmup,
                 "warmup batches (unmeasured: the warm-up pick of settings, "
                 "warm caches)")
      ->capture_default_str();
  app.add_option("--seed", f.cfg.seed, "batch i uses seed + i")
      ->capture_default_str();
  std::string all;
  for (const auto& n : StrategyNames()) all += (all.empty() ? "" : ",") + n;
  app.add_option("--strategies", f.strategies, "comma list of: " + all)
      ->capture_default_str();
  app.add_option("--format", f.format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_flag("--frozen-vision", f.cfg.vision_frozen,
               "MLLMs: freeze the vision encoder");
  app.add_option("--noise", f.cfg.noise_rel,
                 "simulator noise: every group's time times exp(sigma*Z - "
                 "sigma^2/2), this sigma "
                 "(0 = none)")
      ->capture_default_str();
  app.add_option("--planner-noise", f.cfg.planner_noise,
                 "the group-time sigma fcp plans for (it ranks its candidates "
                 "by the expected "
                 "step under it), in [0, 2]; default: --noise's")
      ->check(CLI::Range(0.0, 2.0))
      ->default_str("--noise");  // not the unset marker, -1
  AddDealingOption(app, f.cfg.dealing);
  app.add_option("--time-limit", f.cfg.time_limit_s,
                 "flexsp: wall-clock limit of each planning call, seconds; "
                 "other strategies "
                 "ignore it")
      ->capture_default_str();
  app.add_option("--cost-model", f.cost_model_file,
                 "planner coefficients JSON (e.g. from fcp profile) instead of "
                 "the preset's");
  AddSettingOptions(app, f.cfg.cp_degree, f.cfg.max_seqlen_per_rank,
                    f.cfg.capacity_tokens,
                    "by simulated time per --tune, then fixed");
  AddTuneOption(app, f.cfg.tune);
  app.add_option("--mbs", f.cfg.micro_batch_sequences,
                 "static strategies: sequences per micro-batch per replica (0 "
                 "= as many as fit "
                 "in memory)")
      ->capture_default_str();
  app.add_option("--recompute", f.recompute,
                 "activation recompute: full | selective (core attention "
                 "only) | none")
      ->capture_default_str();
  app.add_flag(
      "--no-overlap-grad-reduce", f.serial_grad_sync,
      "run the gradient sync after compute instead of overlapping it with the "
      "backward (Megatron --overlap-grad-reduce, default on)");
  app.add_flag("--makespan-only", f.makespan_only,
               "fcp ranks its candidate plans by makespan alone; by default, "
               "with the gradient "
               "sync overlapped, it ranks them by step time (makespan + the "
               "sync's exposed part + "
               "the creation of communicators the run does not hold yet) and, "
               "with --noise, by "
               "its expectation");
  app.add_flag(
      "--learn", f.cfg.learn,
      "every strategy learns from the steps it ran: after each step (warm-up "
      "included) its coefficients are recalibrated from the group times the "
      "simulator "
      "measured, and the next step plans with them");
  app.add_option("--plot", f.plot_file,
                 "draw the first measured batch of every strategy (simulated "
                 "timelines, one "
                 "panel each, shared time axis) to this .png or .svg");
  app.add_option("--trace", f.trace_file,
                 "write the same timelines as Chrome trace JSON (open in "
                 "ui.perfetto.dev)");
  app.add_flag("-q,--quiet", f.quiet, "no progress on stderr");
  app.add_option(
      "--plan", f.plan_file,
      "simulate plans made elsewhere instead of --strategies: FILE (or - for "
      "stdin) is a JSON array or JSON lines of {\"batch\": <fcp plan input>, "
      "\"plan\": <fcp plan --format json output>}, simulated in order "
      "(--warmup first ones unmeasured); hardware and topology = --model on "
      "--cluster "
      "(--ranks: the batches'); a batch whose cluster differs is refused");
  app.add_option(
      "--save-plans", f.save_plans_file,
      "write every step's {batch, plan} as JSON lines to FILE (one strategy "
      "only): the input format of --plan");
}

// --plan FILE: the batches and plans come from the file, so the flags that
// would choose them are refused.
sim::ExperimentResult ReplayPlanFile(const CLI::App& app,
                                     const SimulateFlags& f) {
  if (!f.dataset.empty() || !f.lengths_file.empty())
    throw InputError("--plan",
                     "the batches come from the plan file; drop "
                     "--dataset/--lengths");
  // The plan file fixes the cluster and the number of steps.
  for (const char* flag :
       {"--ranks", "--steps", "--gbs", "--strategies", "--save-plans"}) {
    if (app.count(flag) > 0)
      throw InputError(flag,
                       "not used with --plan (the plan file "
                       "gives the batches, ranks and steps); drop it");
  }
  const std::vector<sim::PlannedBatch> batches =
      sim::ParsePlannedBatches(ReadFileOrStdin(f.plan_file));
  return sim::ReplayPlannedBatches(batches, f.cfg);
}

// The strategies over batches drawn from --dataset or --lengths; --save-plans
// writes every step's plan.
sim::ExperimentResult RunStrategies(SimulateFlags& f) {
  sim::ExperimentConfig& cfg = f.cfg;
  if (!f.dataset.empty() && !f.lengths_file.empty())
    throw InputError("--dataset/--lengths", "give one, not both");
  cfg.dataset =
      f.dataset.empty() && f.lengths_file.empty() ? "github" : f.dataset;
  if (!f.lengths_file.empty()) cfg.lengths = ReadLengthsFile(f.lengths_file);
  cfg.strategies = SplitList(f.strategies);
  if (!f.cost_model_file.empty()) {
    cfg.cost_model =
        ReadCostModelOverPresets(f.cost_model_file, cfg.model, cfg.cluster);
  }
  std::string saved;
  if (!f.save_plans_file.empty()) {
    if (cfg.strategies.size() != 1)
      throw InputError("save-plans",
                       "needs exactly one strategy in --strategies");
    cfg.on_plan = [&saved](const std::string&, const PlanRequest& req,
                           const Plan& plan) {
      saved += sim::PlannedBatchToJson(req, plan) + "\n";
    };
  }
  sim::ExperimentResult res = sim::RunExperiment(cfg);
  if (!f.save_plans_file.empty())
    WriteFileAtomically(f.save_plans_file, saved, "save-plans");
  return res;
}

// The recipe flags into the experiment's configuration.
void ApplyRecipeFlags(SimulateFlags& f) {
  sim::ExperimentConfig& cfg = f.cfg;
  cfg.recompute = sim::ParseRecompute(f.recompute);
  cfg.overlap_grad_reduce = !f.serial_grad_sync;
  cfg.planner_grad_sync = !f.makespan_only;
  if (f.makespan_only) cfg.planner_noise = 0, cfg.planner_communicators = false;
}

int RunSimulate(int argc, char** argv) {
  CLI::App app{
      "Plan and run global batches on the SIMULATED cluster (docs/design.md "
      "§5) with several "
      "strategies; baselines get their main setting (static degree, "
      "megatron-dcp's "
      "max_seqlen_per_dp_cp_rank, bytescale's C) tuned in hindsight (--tune). "
      "Times are "
      "simulated; solver_ms is measured on this machine.",
      "fcp simulate"};
  SimulateFlags f;
  AddSimulateOptions(app, f);
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  try {
    Progress progress(!f.quiet);
    if (!f.quiet) f.cfg.progress = progress.Callback();
    ApplyRecipeFlags(f);
    plot::CheckOutputPaths(f.plot_file, f.trace_file);
    if (!f.save_plans_file.empty())
      CheckOutputDirectory(f.save_plans_file, "save-plans");
    std::vector<plot::Timeline> timelines;
    if (!f.plot_file.empty() || !f.trace_file.empty()) {
      f.cfg.on_first_measured_step =
          [&](const Plan& plan, std::span<const Sequence> batch,
              const sim::SimResult& sim, int ranks_per_node) {
            timelines.push_back(
                plot::SimulatedTimeline(plan, batch, sim, ranks_per_node));
          };
    }
    const sim::ExperimentResult res =
        f.plan_file.empty() ? RunStrategies(f) : ReplayPlanFile(app, f);
    progress.Finish();
    if (!f.plot_file.empty() || !f.trace_file.empty()) {
      if (timelines.empty())
        return InputErrorExit(
            "plot: no strategy produced a plan that runs (all OOM/infeasible)");
      if (!f.plot_file.empty()) plot::WriteGantt(f.plot_file, timelines);
      if (!f.trace_file.empty()) plot::WriteTrace(f.trace_file, timelines);
    }
    const std::string text = f.format == "json"
                                 ? sim::ExperimentToJson(res, 2) + "\n"
                                 : sim::ExperimentToTable(res);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  } catch (const plot::PlotError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

FCP_COMMAND("simulate",
            "run strategies over global batches on the simulated cluster",
            RunSimulate);

}  // namespace
}  // namespace fcp::cli
