// `fcp eval study`: where flexible CP pays against the best balanced static CP.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "command.h"
#include "fcp/experiment.h"
#include "fcp/io.h"
#include "fcp/study.h"
#include "fcp/types.h"

namespace fcp::cli {
namespace {

// "mydata (real)" for .../mydata.txt: the tables name the user's data, not
// ours.
std::string LengthsLabel(const std::string& path) {
  return std::filesystem::path(path).stem().string() + " (real)";
}

constexpr const char* kDefaultStudyLengths = "data/go-src-qwen3-lengths.csv";
// --lengths none: no real-lengths cases (an empty value is refused, as for
// every option: ParseFlags).
constexpr const char* kNoLengths = "none";

// Where the default --lengths file is: the repository's data/ seen from the
// working directory, else the data/ folder beside the folder of this
// executable (build/fcp in a checkout, fcp/_bin/fcp in the installed wheel,
// which ships the file as fcp/data/), so that the study runs from anywhere.
// Other paths are taken as given.
std::string ResolveLengthsFile(const std::string& path) {
  namespace fs = std::filesystem;
  if (path != kDefaultStudyLengths || fs::exists(path)) return path;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return path;
  const fs::path beside = exe.parent_path().parent_path() / path;
  if (fs::exists(beside, ec)) return beside.string();
  throw InputError("lengths",
                   std::string(path) +
                       " is in neither the working directory nor " +
                       beside.parent_path().string() +
                       ": run from the repository root, pass --lengths FILE "
                       "(fcp lengths writes one) or --lengths none");
}

// The flags of `fcp eval study`.
struct StudyFlags {
  sim::StudyOptions opt;
  std::string lengths_file = kDefaultStudyLengths, name;
  std::string coefficients = "profiled";
  sim::Tuning tune = sim::Tuning::kHindsight;
};

void AddStudyOptions(CLI::App& app, StudyFlags& f) {
  app.add_option("--out", f.opt.out_dir, "output directory")->required();
  app.add_option("--lengths", f.lengths_file,
                 "real lengths (one integer a line or CSV with a tokens "
                 "column, as `fcp lengths` writes); none = no real-lengths "
                 "cases. The default is found in the working directory, else "
                 "beside the fcp executable's folder (the installed package "
                 "ships it)")
      ->capture_default_str();
  app.add_option(
      "--name", f.name,
      "what the tables call the --lengths data (default: go-src (real) for the "
      "bundled file, else the file's name)");
  app.add_option(
         "--cluster", f.opt.clusters,
         "cluster presets, comma-separated (default: h100-8x8,ascend910c-4x16)")
      ->delimiter(',');
  app.add_option("--model", f.opt.models,
                 "model presets, comma-separated: every case runs on each "
                 "(default: qwen3-8b "
                 "for text, qwen3-vl-8b for video)")
      ->delimiter(',');
  app.add_option("--gbs", f.opt.global_batches,
                 "global batch sizes of the batch-size part at 64 ranks, "
                 "comma-separated "
                 "(default: 16,64,256,1024,2048)")
      ->delimiter(',');
  app.add_option("--ranks", f.opt.ranks,
                 "rank counts of the scale part (gbs = 8 x ranks), "
                 "comma-separated (default: "
                 "8,32,128,512,1024)")
      ->delimiter(',');
  app.add_option("--steps", f.opt.steps, "measured global batches per case")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option(
         "--warmup", f.opt.warmup,
         "warm-up batches per case (the warm-up pick of static degrees)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app.add_option("--seed", f.opt.seed, "batch seed")->capture_default_str();
  app.add_flag("--quick", f.opt.quick,
               "a small grid with one measured batch per case");
  app.add_option("--coefficients", f.coefficients,
                 "planner coefficients of every strategy: profiled (fcp "
                 "profile --target "
                 "sim:CLUSTER --model MODEL, once per cluster and model, as a "
                 "user profiles "
                 "before planning) or preset (derived from the presets' "
                 "hardware figures)")
      ->capture_default_str()
      ->check(CLI::IsMember({"profiled", "preset"}));
  app.add_flag(
      "--learn", f.opt.learn,
      "every strategy learns from the steps it ran (fcp simulate --learn): the "
      "warm-up batches and each measured batch recalibrate the coefficients "
      "for the "
      "next");
  AddTuneOption(app, f.tune);
  app.add_option("--search-s", f.opt.search_s,
                 "the local-search reference (not the fcp planner): time "
                 "limit in seconds per measured batch and kind; > 0 adds the "
                 "columns search (all-to-all allowed) and search-ring (ring "
                 "only), each searched from fcp's plan and the other starts "
                 "with the request fcp plans, simulated as fcp's plans are; 0 "
                 "= off")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--search-iterations", f.opt.search_iterations,
                 "the local search's moves per measured batch and kind (0 = "
                 "until --search-s; set it for deterministic columns)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}));
}

// The flags that are not options as such into the study's options.
void ApplyStudyFlags(StudyFlags& f) {
  sim::StudyOptions& opt = f.opt;
  opt.tune_in_hindsight = f.tune == sim::Tuning::kHindsight;
  opt.profiled_coefficients = f.coefficients == "profiled";
  opt.progress = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
}

int RunEvalStudy(int argc, char** argv) {
  CLI::App app{
      "Where flexible CP pays (SIMULATED): fcp against the best work-balanced "
      "static CP plan "
      "(degree tuned in hindsight by default) "
      "over global batch 16..2,048 (64 ranks), ranks 8..1,024 (gbs = 8 x "
      "ranks), both cluster "
      "presets, every dataset, real lengths and the extreme case (--cluster, "
      "--model, --gbs, "
      "--ranks narrow the grid). Writes study.md and study.csv to --out and "
      "prints the "
      "summary.",
      "fcp eval study"};
  StudyFlags f;
  AddStudyOptions(app, f);
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;
  ApplyStudyFlags(f);
  sim::StudyOptions& opt = f.opt;
  try {
    if (f.lengths_file != kNoLengths) {
      opt.lengths = ReadLengthsFile(ResolveLengthsFile(f.lengths_file));
      opt.lengths_label = !f.name.empty() ? f.name
                          : f.lengths_file == kDefaultStudyLengths
                              ? "go-src (real)"
                              : LengthsLabel(f.lengths_file);
    }
    const sim::StudyResult r = sim::RunStudy(opt);
    std::printf("%s\nwrote %s/study.md, study.csv\n", r.summary.c_str(),
                opt.out_dir.c_str());
    return std::fflush(stdout) == 0 && !std::ferror(stdout)
               ? 0
               : InputErrorExit("stdout: write failed");
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND("eval study",
            "where flexible CP pays vs the best balanced static CP (simulated)",
            RunEvalStudy);

}  // namespace
}  // namespace fcp::cli
