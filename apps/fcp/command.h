// Subcommand registry of the `fcp` CLI. Each apps/fcp/cmd_*.cc registers its
// subcommands with FCP_COMMAND; main.cc dispatches. Commands only parse flags,
// call the library and print. Exit codes: 0 ok, 2 bad input or output that
// could not be written (one `error:` line on stderr naming the field, or
// "stdout"), 3 infeasible, 1 internal failure.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::sim {
enum class Tuning;  // fcp/experiment.h
}  // namespace fcp::sim

namespace fcp::cli {

// argv[0] is the subcommand's full name ("plan", "eval gap").
using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name;     // "plan" or two words: "eval gap"
  std::string summary;  // one line for `fcp --help`
  CommandFn run;
};

std::vector<Command>& Commands();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string summary, CommandFn fn) {
    Commands().push_back({std::move(name), std::move(summary), std::move(fn)});
  }
};

// Prints "error: <message>" to stderr and returns 2.
int InputErrorExit(const std::string& message);

// --dealing balanced|loader (megatron/deepspeed: deal sequences to DP replicas
// by work, the yardstick, or in data-loader order), bound to `dealing`.
void AddDealingOption(CLI::App& app, Dealing& dealing);
// --cp, --max-seqlen, --capacity: the strategies' main settings forced (0 =
// tuned, as `tuned_how` says, e.g. "on the warmup batches").
void AddSettingOptions(CLI::App& app, int& cp_degree,
                       int64_t& max_seqlen_per_rank, int64_t& capacity_tokens,
                       const std::string& tuned_how);

// --tune hindsight|warmup: how baselines' unforced settings are tuned
// (sim::ExperimentConfig::tune), bound to `tune`.
void AddTuneOption(CLI::App& app, sim::Tuning& tune);

// Parses the flags into `app`. Returns -1 to go on, otherwise the exit code:
// 0 after --help (printed), 2 for a bad flag (one `error:` line). Integer
// flags must be decimal integers within their type (RequireDecimalIntegers).
int ParseFlags(CLI::App& app, int argc, char** argv);

// --- apps/fcp/output.cc ---------------------------------------------------

// Makes sure descriptors 0-2 are open before anything else is (a closed
// stdout is replaced by /dev/full, so writing to it is an error, not a loss).
void ReserveStandardStreams();
// Flushes stdout. On a write error prints "error: stdout: output lost: ..."
// and returns 2 (or `exit_code` if that already reports a failure).
int FinishStdout(int exit_code);
// Every INT/UINT option of `app` accepts only decimal integers (no octal,
// hex, exponent or saturation on overflow); CLI11 then checks the width.
void RequireDecimalIntegers(CLI::App& app);
// A decimal integer in [lo, hi]; InputError(field, ...) otherwise.
int64_t ParseInteger(std::string_view text, const std::string& field,
                     int64_t lo, int64_t hi);
// The items of a comma-separated flag value ("a, b,,c" -> a, b, c): spaces
// around items trimmed, empty items skipped. Every list flag goes through it.
std::vector<std::string> SplitList(std::string_view text);
// A comma-separated list of such integers (SplitList's items).
std::vector<int64_t> ParseIntegerList(const std::string& text,
                                      const std::string& field, int64_t lo,
                                      int64_t hi);
// A comma-separated list of decimal numbers (SplitList's items); InputError
// (field, "'x' is not a number") otherwise.
std::vector<double> ParseNumberList(const std::string& text,
                                    const std::string& field);

// --- apps/fcp/main.cc -----------------------------------------------------

// `--cost-model FILE` over the coefficients the presets derive for `model` on
// `cluster` (ReadCostModelJson). InputError("model"|"cluster") for an unknown
// preset.
CostModel ReadCostModelOverPresets(const std::string& path,
                                   const std::string& model,
                                   const std::string& cluster);

}  // namespace fcp::cli

// Registers a command. Named by __COUNTER__, not __LINE__: the unity build
// (CI, the wheel) puts several command files in one translation unit, where
// two registrars on the same line of their files collided.
#define FCP_CLI_CONCAT_INNER(a, b) a##b
#define FCP_CLI_CONCAT(a, b) FCP_CLI_CONCAT_INNER(a, b)
#define FCP_COMMAND(name, summary, fn)                \
  static ::fcp::cli::CommandRegistrar FCP_CLI_CONCAT( \
      fcp_command_registrar_, __COUNTER__)(name, summary, fn)
