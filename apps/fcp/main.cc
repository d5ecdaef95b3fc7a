// fcp: Flexible Context Parallelism planner CLI. Dispatches to subcommands.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>

#include "command.h"
#include "fcp/experiment.h"
#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/types.h"
#include "fcp/unknown_names.h"
#include "fcp/version.h"

namespace fcp::cli {

std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}

int InputErrorExit(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", fcp::EscapeForMessage(message).c_str());
  return 2;
}

CostModel ReadCostModelOverPresets(const std::string& path,
                                   const std::string& model,
                                   const std::string& cluster) {
  const ModelPreset* m = FindModelPreset(model);
  const ClusterPreset* c = FindClusterPreset(cluster);
  if (!m) throw InputError("model", UnknownModelPresetMessage(model));
  if (!c) throw InputError("cluster", UnknownClusterPresetMessage(cluster));
  return ReadCostModelJson(path, DeriveCostModel(*m, *c));
}

void AddDealingOption(CLI::App& app, Dealing& dealing) {
  const std::map<std::string, Dealing> names = {
      {"balanced", Dealing::kBalanced}, {"loader", Dealing::kLoader}};
  app.add_option("--dealing", dealing,
                 "megatron/deepspeed: deal sequences to DP replicas by work "
                 "(balanced, the "
                 "yardstick) or in data-loader order (loader, stock framework "
                 "behaviour)")
      ->transform(CLI::CheckedTransformer(names).description(""))
      ->type_name("balanced|loader")
      ->default_str(dealing == Dealing::kLoader ? "loader" : "balanced");
}

void AddSettingOptions(CLI::App& app, int& cp_degree,
                       int64_t& max_seqlen_per_rank, int64_t& capacity_tokens,
                       const std::string& tuned_how) {
  app.add_option("--cp", cp_degree,
                 "megatron/deepspeed: force this CP degree (0 = tune it " +
                     tuned_how + ")")
      ->capture_default_str();
  app.add_option(
         "--max-seqlen", max_seqlen_per_rank,
         "megatron-dcp: force max_seqlen_per_dp_cp_rank, tokens (0 = tune it " +
             tuned_how + ")")
      ->capture_default_str();
  app.add_option("--capacity", capacity_tokens,
                 "bytescale: force the per-rank token capacity C, tokens (0 = "
                 "tune it " +
                     tuned_how + ")")
      ->capture_default_str();
}

void AddTuneOption(CLI::App& app, sim::Tuning& tune) {
  const std::map<std::string, sim::Tuning> names = {
      {"hindsight", sim::Tuning::kHindsight}, {"warmup", sim::Tuning::kWarmup}};
  app.add_option("--tune", tune,
                 "baselines' main setting (static CP degree, megatron-dcp's "
                 "max_seqlen_per_dp_cp_rank, bytescale's C) unless forced: "
                 "hindsight (every "
                 "candidate run on the measured batches, the fastest kept: the "
                 "yardstick) or "
                 "warmup (the fastest on the warm-up batches, fixed); the "
                 "warm-up pick is "
                 "shown beside either way")
      ->transform(CLI::CheckedTransformer(names).description(""))
      ->type_name("hindsight|warmup")
      ->default_str(tune == sim::Tuning::kWarmup ? "warmup" : "hindsight");
}

int ParseFlags(CLI::App& app, int argc, char** argv) {
  RequireDecimalIntegers(app);
  // Every option shows its default in --help: the bound variables still hold
  // their defaults here. Flags (no value) and options without a default
  // (empty strings) show nothing.
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_min() > 0 && opt->get_default_str().empty())
      opt->capture_default_str();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return InputErrorExit(e.what());
  }
  // An empty value (--trace '', --dataset '') is a mistake, never "not given".
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_min() == 0 || opt->count() == 0) continue;
    for (const std::string& value : opt->results()) {
      if (value.empty())
        return InputErrorExit(opt->get_name() + ": must not be empty");
    }
  }
  return -1;
}

}  // namespace fcp::cli

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(
      out,
      "fcp - Flexible Context Parallelism: plan context-parallel groups "
      "per micro-batch (version %s)\n\nUsage: fcp <command> [options]   "
      "(fcp <command> --help for details)\n\nCommands:\n",
      FCP_VERSION_STRING);
  auto commands = fcp::cli::Commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : commands) {
    std::fprintf(out, "  %-16s %s\n", c.name.c_str(), c.summary.c_str());
  }
  std::fprintf(
      out,
      "\nfcp --version prints the version.\n"
      "Exit codes: 0 ok, 1 internal error, 2 bad input or output that could "
      "not be written, 3 infeasible batch.\n");
}

}  // namespace

int main(int argc, char** argv) {
  fcp::cli::ReserveStandardStreams();
  // Past a file-size limit a write fails with EFBIG, reported like any other
  // write error, instead of the default SIGXFSZ killing the process midway
  // (which left partial output behind).
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc >= 2 &&
      (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V") ||
       !std::strcmp(argv[1], "version"))) {
    std::printf("fcp %s\n", FCP_VERSION_STRING);
    return 0;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return fcp::cli::FinishStdout(argc < 2 ? 2 : 0);
  }
  const auto& commands = fcp::cli::Commands();
  // Two-word commands ("eval gap") take precedence over one-word ones.
  for (int words = 2; words >= 1; --words) {
    if (argc < 1 + words) continue;
    std::string name = argv[1];
    if (words == 2) name += std::string(" ") + argv[2];
    for (const auto& c : commands) {
      if (c.name != name) continue;
      // Pass argv so that argv[0] is the full command name.
      std::string full = "fcp " + name;
      std::vector<char*> args;
      args.push_back(full.data());
      for (int i = 1 + words; i < argc; ++i) args.push_back(argv[i]);
      int exit_code = 1;
      try {
        exit_code = c.run(static_cast<int>(args.size()), args.data());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: internal: %s\n",
                     fcp::EscapeForMessage(e.what()).c_str());
      }
      return fcp::cli::FinishStdout(exit_code);
    }
  }
  // A group with subcommands ("eval") given without or with a wrong one.
  std::string prefix = std::string(argv[1]) + " ";
  bool is_group = false;
  for (const auto& c : commands) is_group |= c.name.rfind(prefix, 0) == 0;
  if (is_group) {
    std::fprintf(stderr, "error: %s: expected one of:",
                 fcp::EscapeForMessage(argv[1]).c_str());
    for (const auto& c : commands)
      if (c.name.rfind(prefix, 0) == 0)
        std::fprintf(stderr, " '%s'", c.name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::fprintf(stderr, "error: unknown command '%s' (try fcp --help)\n",
               fcp::EscapeForMessage(argv[1]).c_str());
  return 2;
}
