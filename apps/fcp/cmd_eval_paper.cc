// `fcp eval paper`: the paper's evaluation re-run on the simulator.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "command.h"
#include "fcp/eval.h"
#include "progress.h"

namespace fcp::cli {
namespace {

int RunEvalPaper(int argc, char** argv) {
  CLI::App app{
      "Re-run the paper's evaluation (Figures 3-6, Tables 1, 2, 6, extreme "
      "case) on the "
      "SIMULATED cluster; writes report.md (paper numbers beside ours), CSV "
      "and PNG files.",
      "fcp eval paper"};
  sim::PaperEvalOptions opt;
  bool no_plots = false;
  app.add_option("--out", opt.out_dir, "output directory")->required();
  app.add_flag("--quick", opt.quick, "reduced sweep (about a minute)");
  app.add_option("--seed", opt.seed, "batch seed")->capture_default_str();
  app.add_flag("--no-plots", no_plots, "skip PNG figures");
  AddDealingOption(app, opt.dealing);
  AddTuneOption(app, opt.tune);

  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  opt.plots = !no_plots;
  Progress progress(true);
  opt.progress = progress.Callback();
  try {
    sim::RunPaperEval(opt);
    progress.Finish();
    std::printf("wrote %s/report.md (simulated results)\n",
                opt.out_dir.c_str());
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND("eval paper",
            "re-run the paper's evaluation on the simulator (md/csv/png)",
            RunEvalPaper);

}  // namespace
}  // namespace fcp::cli
