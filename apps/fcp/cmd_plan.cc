// `fcp plan`: read a batch, plan it, print JSON or a table.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "command.h"
#include "fcp/io.h"
#include "fcp/plot.h"
#include "fcp/scheduler.h"

namespace fcp::cli {
namespace {

std::string RankRange(const std::vector<int>& ranks) {
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i)
    contiguous &= ranks[i] == ranks[i - 1] + 1;
  if (ranks.size() == 1) return std::to_string(ranks[0]);
  if (contiguous) return fmt::format("{}-{}", ranks.front(), ranks.back());
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::string PlanTable(const Plan& plan, const PlanRequest& request) {
  std::string out = fmt::format(
      "strategy {}  ranks {}  micro-batches {}  solver {:.3f} ms\n",
      plan.strategy, plan.num_ranks, plan.micro_batches.size(), plan.solver_ms);
  for (const auto& [k, v] : plan.notes)
    out += fmt::format("  note {}: {}\n", k, v);
  out += fmt::format("{:>4} {:>5} {:>6} {:>15} {:>6} {:>10} {:>12} {:>10}\n",
                     "mb", "group", "degree", "ranks", "seqs", "tokens",
                     "est_ms", "mem_GB");
  for (size_t m = 0; m < plan.micro_batches.size(); ++m) {
    const auto& mb = plan.micro_batches[m];
    for (size_t g = 0; g < mb.groups.size(); ++g) {
      const auto& grp = mb.groups[g];
      int64_t tokens = 0;
      for (int s : grp.sequences) tokens += request.sequences[s].length_tokens;
      out += fmt::format(
          "{:>4} {:>5} {:>6} {:>15} {:>6} {:>10} {:>12.3f} {:>10.2f}{}\n", m, g,
          grp.degree(), RankRange(grp.ranks), grp.sequences.size(), tokens,
          grp.est_ms, grp.mem_bytes / 1e9,
          grp.comm == CommKind::kAllToAll ? "  a2a" : "");
    }
    out += fmt::format("{:>4} micro-batch est {:.3f} ms\n", m, mb.est_ms);
  }
  out +=
      fmt::format("total est {:.3f} ms   lower bound {:.3f} ms   gap {:.2f}%\n",
                  plan.est_ms, plan.lower_bound_ms, 100.0 * plan.gap());
  return out;
}

// `fcp plan --help`: the input format and what the output means.
constexpr const char* kPlanHelp =
    "Plan context-parallel groups for one global batch.\n"
    "Input JSON (file or stdin): {\"cluster\": \"ascend910c-4x16\" | "
    "{\"ranks\": N, "
    "\"ranks_per_node\": R}, \"model\": \"qwen3-8b\", \"cost_model\": {...}, "
    "\"grad_sync\": {\"collective_s\": S, \"buckets\": 1, \"forward_share\": "
    "0.25}, "
    "\"group_time_sigma\": 0, \"communicators\": {\"create_s\": S, "
    "\"existing\": [[0, 1], ...]}, "
    "\"sequences\": [131072, {\"length\": 2048, \"attention\": \"full\"}, "
    "{\"length\": 3100, \"eta\": 0.1, \"vision_tokens\": 3072}, ...]} "
    "(vision_tokens: an MLLM sample's image or frame tokens, in [0, length]).\n"
    "grad_sync (optional): the step's data-parallel gradient sync (one "
    "reduce-scatter's "
    "time in seconds, its buckets, the forward share of a group's time); "
    "with it fcp ranks "
    "its candidate plans by step time (note step_ms) instead of makespan.\n"
    "group_time_sigma (optional, default 0, at most 2): how far a group's "
    "real time strays "
    "from its estimate (each group's time times an independent log-normal "
    "factor of this "
    "sigma, mean 1); above 0 fcp ranks its candidates by the expected step "
    "over fixed draws "
    "(note expected_step_ms), which favours fewer groups.\n"
    "communicators (optional): what creating a communicator costs the "
    "runtime (seconds) and "
    "the rank sets it already holds; fcp charges groups on new rank sets "
    "when ranking its "
    "candidates.\n"
    "Times in the output are milliseconds; memory in bytes (JSON) or GB "
    "(table).\n"
    "lower_bound_ms: no ring plan of the batch is faster; all-to-all plans "
    "(deepspeed, "
    "flexsp) can be, so theirs is computed with the cheaper of ring and "
    "all-to-all at "
    "each degree (a bound for both kinds). `optimal` is "
    "an exact enumeration/DP over one micro-batch of ring groups (<= 12 "
    "sequences, <= 32 "
    "ranks), not a MILP.";

// The flags of `fcp plan`.
struct PlanFlags {
  std::string input = "-";
  std::string strategy = "fcp";
  std::string format = "json";
  std::string cost_model_file;
  std::string plot_file;
  std::string trace_file;
  PlanOptions options;
};

void AddPlanOptions(CLI::App& app, PlanFlags& f) {
  app.add_option("input,-i,--input", f.input,
                 "batch JSON file (also as the first argument), or - for stdin")
      ->capture_default_str();
  std::string strategies;
  for (const auto& n : StrategyNames())
    strategies += (strategies.empty() ? "" : ", ") + n;
  app.add_option("-s,--strategy", f.strategy, "one of: " + strategies)
      ->capture_default_str();
  app.add_option("-f,--format", f.format, "json or table")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
  app.add_option(
      "--cost-model", f.cost_model_file,
      "cost_model JSON (e.g. from fcp profile); its keys override the input's");
  AddSettingOptions(app, f.options.cp_degree, f.options.max_seqlen_per_rank,
                    f.options.capacity_tokens,
                    "per batch, the best by the strategy's own estimate");
  AddDealingOption(app, f.options.dealing);
  app.add_option("--time-limit", f.options.time_limit_s,
                 "flexsp: wall-clock limit of the whole planning (set-up "
                 "included), seconds; "
                 "other strategies ignore it")
      ->capture_default_str();
  app.add_option("--seed", f.options.seed,
                 "seed for strategies with randomness")
      ->capture_default_str();
  app.add_option(
      "--plot", f.plot_file,
      "also draw the plan's timeline (planner estimate) to this .png or .svg");
  app.add_option(
      "--trace", f.trace_file,
      "also write the timeline as Chrome trace JSON (open in ui.perfetto.dev)");
}

// --plot / --trace: the plan's timeline as the planner estimates it.
void WritePlanTimeline(const PlanFlags& f, const Plan& plan,
                       const PlanRequest& request) {
  if (f.plot_file.empty() && f.trace_file.empty()) return;
  const plot::Timeline timeline = plot::PlanTimeline(
      plan, request.sequences, request.cluster.ranks_per_node);
  if (!f.plot_file.empty()) plot::WriteGantt(f.plot_file, {&timeline, 1});
  if (!f.trace_file.empty()) plot::WriteTrace(f.trace_file, {&timeline, 1});
}

int RunPlan(int argc, char** argv) {
  CLI::App app{kPlanHelp, "fcp plan"};
  PlanFlags f;
  AddPlanOptions(app, f);
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  if (f.input == "-" && ::isatty(STDIN_FILENO)) {
    // Nothing piped in: waiting for a batch typed at the terminal helps no one.
    std::fprintf(
        stderr,
        "%s\nerror: input: no batch given (use --input FILE or pipe JSON in)\n",
        app.help().c_str());
    return 2;
  }
  f.options.strategy = f.strategy;
  try {
    plot::CheckOutputPaths(f.plot_file, f.trace_file);
    BatchInput batch = ReadBatchJson(f.input);
    if (!f.cost_model_file.empty()) {
      batch.request.cost = ReadCostModelJson(
          f.cost_model_file, batch.request.cost, &batch.cost_sources);
    }
    Plan plan = MakePlan(batch.request, f.options);
    // Where each coefficient came from: input, fcp profile, preset or 0.
    if (plan.status == PlanStatus::kOk)
      plan.notes["cost_model"] = CostSourcesNote(batch.cost_sources);
    if (plan.status == PlanStatus::kInfeasible) {
      std::fprintf(stderr, "error: %s\n",
                   EscapeForMessage(plan.message).c_str());
      return 3;
    }
    WritePlanTimeline(f, plan, batch.request);
    const std::string text = f.format == "json"
                                 ? PlanToJson(plan, 2) + "\n"
                                 : PlanTable(plan, batch.request);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  } catch (const plot::PlotError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

FCP_COMMAND("plan", "plan CP groups for a batch (JSON in, JSON or table out)",
            RunPlan);

}  // namespace
}  // namespace fcp::cli
