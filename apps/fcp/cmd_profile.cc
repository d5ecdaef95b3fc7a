// `fcp profile`: sample a target (this CPU's kernels, or a simulated cluster),
// fit the cost coefficients, print the fit report, write the cost_model JSON.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "fcp/io.h"
#include "fcp/profiler.h"
#include "progress.h"

#if FCP_HAVE_MPI
#include <cstdlib>
#include <memory>

#include "exec/communicator_mpi.h"
#include "exec/profile_transport.h"
#endif

namespace fcp::cli {
namespace {

#if FCP_HAVE_MPI
// Ranks of the mpirun job this process belongs to (OpenMPI sets
// OMPI_COMM_WORLD_SIZE); 1 when not launched by mpirun.
int MpirunWorldSize() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!v) return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end != v && *end == '\0' && n > 1 && n < 1000000)
             ? static_cast<int>(n)
             : 1;
}

// MPI_Init on construction, MPI_Finalize on destruction (after the world).
struct MpiSession {
  std::unique_ptr<exec::Communicator> world = exec::MpiInit(nullptr, nullptr);
  ~MpiSession() {
    world.reset();
    exec::MpiFinalize();
  }
};
#endif

// `fcp profile --help`: what it fits and how each target measures.
constexpr const char* kProfileHelp =
    "Measure one CP rank's step time over lengths x degrees, fit alpha1, "
    "alpha2, beta1 "
    "(Eq. 8), alpha3, beta2 (Eq. 9) and the v2 terms (h, gamma_intra, "
    "gamma_inter, "
    "gamma_serial; ring_tail_steps = 1) by least squares, report standard "
    "errors and "
    "held-out relative error, and write the cost_model JSON (fcp plan "
    "--cost-model).\n"
    "Targets: cpu (real fp32 kernels on this machine, measured) or "
    "sim:CLUSTER "
    "(the simulator's hardware with noise, simulated).\n"
    "cpu: the ring's KV/dKV traffic is measured over MPI when launched under "
    "mpirun "
    "(e.g. mpirun -np 2 fcp profile --target cpu; every rank runs the same "
    "grid in "
    "lockstep, rank 0 reports; a degree d larger than the number of ranks P "
    "folds the "
    "ring: each step still exchanges d's message sizes with the two real "
    "neighbours), "
    "otherwise as in-process copies on a helper thread. The report names the "
    "transport.";

// The flags of `fcp profile`.
struct ProfileFlags {
  ProfileOptions o;
  std::string lengths, degrees, models, out_file, format = "table";
};

void AddProfileOptions(CLI::App& app, ProfileFlags& f) {
  app.add_option("-t,--target", f.o.target,
                 "cpu or sim:<cluster preset> (torch: python -m fcp)")
      ->capture_default_str();
  app.add_option(
      "-m,--model", f.models,
      "model preset (sim; comma list for one report per model, table only) or "
      "cpu-tiny (cpu); default qwen3-8b / cpu-tiny");
  app.add_option("--lengths", f.lengths,
                 "comma list of sequence lengths (tokens)");
  app.add_option("--degrees", f.degrees,
                 "comma list of CP degrees (any positive integers)");
  app.add_option("-r,--repeats", f.o.repeats, "measurements per grid point")
      ->capture_default_str();
  app.add_option("--noise", f.o.noise_rel,
                 "sim: log-normal noise sigma per measurement")
      ->capture_default_str();
  app.add_option("--heldout", f.o.heldout_fraction,
                 "fraction of samples held out")
      ->capture_default_str();
  app.add_option("--seed", f.o.seed, "seed of the noise and the held-out split")
      ->capture_default_str();
  app.add_option(
         "--min-chunk", f.o.min_tokens_per_rank,
         "skip grid points with fewer than this many tokens per rank (s/d)")
      ->capture_default_str();
  app.add_flag("!--no-packed", f.o.packed_groups,
               "do not sample packed groups (4 sequences, mixed masks)");
  app.add_option("-o,--out", f.out_file,
                 "write the report (with its cost_model) to this file");
  app.add_option("-f,--format", f.format, "table or json")
      ->check(CLI::IsMember({"json", "table"}))
      ->capture_default_str();
}

// The grid lists into the options; returns the models to profile ("" = the
// target's default).
std::vector<std::string> ApplyProfileLists(ProfileFlags& f) {
  // Only the type's range here (no wrap-around: 4294967298 was read as 2);
  // RunProfile applies the real bounds, naming the element.
  f.o.lengths = ParseIntegerList(f.lengths, "lengths",
                                 std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max());
  for (int64_t d :
       ParseIntegerList(f.degrees, "degrees", std::numeric_limits<int>::min(),
                        std::numeric_limits<int>::max())) {
    f.o.degrees.push_back(static_cast<int>(d));
  }
  std::vector<std::string> model_list = SplitList(f.models);
  if (model_list.empty()) model_list.push_back("");
  if (model_list.size() > 1 && (f.format == "json" || !f.out_file.empty()))
    throw InputError("model",
                     "several models need --format table and no --out");
  return model_list;
}

// The held-out error of every model profiled, one line each (`rows`).
std::string ProfileSummary(const std::string& target, const std::string& rows) {
  return fmt::format(
      "summary (paper Table 3 layout): held-out relative error of T(G, d), "
      "target {}\n"
      "{:<20} {:>8} {:>8} {:>7}\n{}",
      target, "model", "mean", "max", "points", rows);
}

int RunProfileCmd(int argc, char** argv) {
  CLI::App app{kProfileHelp, "fcp profile"};
  ProfileFlags f;
  AddProfileOptions(app, f);
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  ProfileOptions& o = f.o;
  const std::string &format = f.format, &out_file = f.out_file;
  if (o.target == "torch") {
    // The PyTorch profiler is Python (python/fcp/profile_torch.py).
    return InputErrorExit(
        "--target torch runs in Python: torchrun --nproc-per-node P -m fcp "
        "profile --target "
        "torch --model MODEL --out cost_model.json (one process: python -m fcp "
        "profile "
        "--target torch ...)");
  }
  try {
    if (!out_file.empty()) CheckOutputDirectory(out_file, "out");
    const std::vector<std::string> model_list = ApplyProfileLists(f);
    // Under mpirun (cpu target): every rank measures in lockstep over MPI and
    // only rank 0 prints or writes. Without mpirun, no MPI at all.
    bool print = true;
#if FCP_HAVE_MPI
    std::unique_ptr<MpiSession> mpi;
    if (MpirunWorldSize() > 1) {
      mpi = std::make_unique<MpiSession>();
      print = mpi->world->rank() == 0;
    }
    // sim targets need no peers: only rank 0 profiles.
    if (mpi && !print && o.target != "cpu") return 0;
#endif
    std::string summary;
    Progress progress(print);
    o.progress = progress.Callback();
    for (const std::string& m : model_list) {
      o.model = m;
#if FCP_HAVE_MPI
      const ProfileReport rep = mpi && o.target == "cpu"
                                    ? exec::RunProfileOnRing(o, *mpi->world)
                                    : RunProfile(o);
#else
      const ProfileReport rep = RunProfile(o);
#endif
      progress.Finish();
      if (!print) continue;
      summary +=
          fmt::format("{:<20} {:>7.2f}% {:>7.2f}% {:>7}\n", rep.model,
                      100 * rep.heldout.overall.mean,
                      100 * rep.heldout.overall.max, rep.heldout.overall.count);
      const std::string json = ProfileReportToJson(rep, 2) + "\n";
      if (!out_file.empty()) WriteTextFile(out_file, json);
      const std::string text =
          format == "json" ? json : ProfileReportToTable(rep) + "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    if (print && model_list.size() > 1) {
      const std::string text = ProfileSummary(o.target, summary);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return 0;
  } catch (const InputError& e) {
#if FCP_HAVE_MPI
    // Every rank of an mpirun job fails alike; one error line, from rank 0.
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (MpirunWorldSize() > 1 && rank && std::string(rank) != "0") return 2;
#endif
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND("profile",
            "fit the cost model from measured (cpu) or simulated samples",
            RunProfileCmd);

}  // namespace
}  // namespace fcp::cli
