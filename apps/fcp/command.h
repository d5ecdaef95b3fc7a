// Subcommand registry of the `fcp` CLI. Each apps/fcp/cmd_*.cc registers its
// subcommands with FCP_COMMAND; main.cc dispatches. Commands only parse flags,
// call the library and print. Exit codes: 0 ok, 2 bad input (one `error:` line
// on stderr naming the field), 3 infeasible, 1 internal failure.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

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

// Parses the flags into `app`. Returns -1 to go on, otherwise the exit code:
// 0 after --help (printed), 2 for a bad flag (one `error:` line).
int ParseFlags(CLI::App& app, int argc, char** argv);

}  // namespace fcp::cli

#define FCP_CLI_CONCAT_INNER(a, b) a##b
#define FCP_CLI_CONCAT(a, b) FCP_CLI_CONCAT_INNER(a, b)
#define FCP_COMMAND(name, summary, fn)                        \
  static ::fcp::cli::CommandRegistrar FCP_CLI_CONCAT(         \
      fcp_command_registrar_, __LINE__)(name, summary, fn)
