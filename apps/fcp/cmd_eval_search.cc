// `fcp eval search`: fcp's distance to a long local search in its own cost
// model, at realistic sizes. Parses flags, calls the library, prints.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "fcp/io.h"
#include "fcp/search_eval.h"
#include "progress.h"

namespace fcp::cli {
namespace {

int RunEvalSearch(int argc, char** argv) {
  CLI::App app{
      "Plan batches of --sequences sequences (a dataset or real lengths) on "
      "each cluster preset and rank count with fcp, the reference heuristics "
      "and the balanced static plans, then improve every plan by a long local "
      "search in fcp's own cost model (move, swap, resize, split, merge and "
      "reorder groups, move them between micro-batches; ring or all-to-all, "
      "whichever is cheaper). Prints per instance fcp's plan estimate, the "
      "search's best (the reference) and their ratio. Planner cost-model "
      "estimates, not simulated. Takes about (clusters x ranks x batches) x "
      "--time-limit-s unless --iterations ends each search first: 6 x 30 s = "
      "3 min with the defaults.",
      "fcp eval search"};
  baselines::SearchEvalOptions options;
  std::string lengths_file, format = "table";
  bool quiet = false;
  app.add_option("--sequences,--seqs", options.sequences, "sequences per batch")
      ->capture_default_str();
  app.add_option("--ranks", options.ranks, "comma-separated rank counts")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--clusters", options.clusters,
                 "comma-separated cluster presets")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-m,--model", options.model, "model preset")
      ->capture_default_str();
  app.add_option("--dataset", options.dataset, "dataset the batches come from")
      ->capture_default_str();
  app.add_option("--lengths", lengths_file,
                 "real lengths to sample batches from instead (one integer "
                 "per line, or CSV with a `tokens` column)");
  app.add_option("--batches", options.batches,
                 "batches per cluster and rank count (seeds --seed, "
                 "--seed + 1, ...)")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed of the first batch")
      ->capture_default_str();
  app.add_option("--search-seed", options.search.seed,
                 "seed of the local search's moves")
      ->capture_default_str();
  app.add_option("--time-limit-s", options.search.time_limit_s,
                 "wall-clock limit of each instance's search, seconds")
      ->capture_default_str();
  app.add_option("--iterations", options.search.max_iterations,
                 "moves each search tries at most (0 = until the time limit); "
                 "a search that the iterations end is the same on every run")
      ->capture_default_str();
  app.add_option("--starts", options.starts,
                 "comma-separated plans the search starts from besides one "
                 "group of all ranks (none: that group alone)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "no progress on stderr");
  app.add_option("-f,--format", format, "table or json")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  try {
    if (!lengths_file.empty()) {
      if (app.count("--dataset") > 0)
        return InputErrorExit("--dataset/--lengths: give one, not both");
      options.lengths = ReadLengthsFile(lengths_file);
      options.lengths_name = lengths_file;
    }
    if (options.starts == std::vector<std::string>{"none"}) options.starts = {};
    Progress progress(!quiet);
    options.progress = progress.Callback();
    const baselines::SearchEvalReport report =
        baselines::EvaluateSearch(options);
    progress.Finish();
    const std::string text = format == "json"
                                 ? baselines::SearchReportToJson(report) + "\n"
                                 : baselines::SearchReportToTable(report);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND("eval search",
            "fcp's distance to a long local search in its own cost model",
            RunEvalSearch);

}  // namespace
}  // namespace fcp::cli
