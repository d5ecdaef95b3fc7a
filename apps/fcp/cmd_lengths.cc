// `fcp lengths`: sequence lengths from datasets -> a length file for
// `--lengths`, with a histogram. .idx, JSONL token counts, CSV and length
// files are read here; text fields (--tokenizer) and Parquet/Arrow go to the
// Python side (`<python> -m fcp.lengths`, same flags and output), started with
// execvp: no shell. <python> is FCP_PYTHON, which the `fcp` console command and
// `python -m fcp` set to the interpreter the package is installed into, so the
// fallback runs where fcp, pyarrow and tokenizers are; python3 otherwise.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"
#include "fcp/io.h"
#include "fcp/lengths.h"

extern char** environ;

namespace fcp::cli {
namespace {

std::string PythonInterpreter() {
  const char* env = std::getenv("FCP_PYTHON");
  return env && *env ? env : "python3";
}

// Whether `python` can import fcp.lengths (checked before handing over, so
// that a missing package is one clear line rather than a traceback).
bool PythonHasModule(const std::string& python) {
  std::vector<std::string> args = {python, "-c", "import fcp.lengths"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, python.c_str(), &actions, nullptr,
                              argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Parquet, Arrow and --tokenizer: the same command line run by the Python
// package (python -m fcp.lengths); returns only when that cannot start.
int RunPythonLengths(int argc, char** argv) {
  const std::string interpreter = PythonInterpreter();
  if (!PythonHasModule(interpreter)) {
    std::fprintf(stderr,
                 "error: lengths: Parquet/Arrow files and --tokenizer need "
                 "the Python package: "
                 "'%s -c \"import fcp.lengths\"' fails (run `pip install .` "
                 "in the fcp "
                 "source tree and use its `fcp` command, or set FCP_PYTHON "
                 "to an interpreter "
                 "that has the package)\n",
                 EscapeForMessage(interpreter).c_str());
    return 2;
  }
  std::vector<std::string> args = {interpreter, "-m", "fcp.lengths"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> exec_argv;
  for (auto& a : args) exec_argv.push_back(a.data());
  exec_argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(exec_argv[0], exec_argv.data());
  std::fprintf(stderr, "error: lengths: cannot run %s: %s\n",
               EscapeForMessage(interpreter).c_str(), std::strerror(errno));
  return 1;
}

// The non-zero lengths of every input, in order, by each file's format;
// `empty` counts the zero-length sequences left out.
std::vector<int64_t> ReadDatasetLengths(const std::vector<std::string>& inputs,
                                        const std::string& field,
                                        bool per_document, int64_t& empty) {
  std::vector<int64_t> lengths;
  for (const auto& in : inputs) {
    std::vector<int64_t> part;
    switch (DetectDatasetFormat(in)) {
      case DatasetFormat::kMegatronIdx:
        part = ReadMegatronIdxLengths(in, per_document);
        break;
      case DatasetFormat::kJsonl:
        part = ReadJsonlLengths(in, field);
        break;
      case DatasetFormat::kCsv:
        part = ReadCsvLengths(in, field);
        break;
      default:
        part = ReadLengthsFile(in);
        break;
    }
    for (int64_t v : part) {
      if (v == 0)
        ++empty;
      else
        lengths.push_back(v);
    }
  }
  return lengths;
}

int RunLengths(int argc, char** argv) {
  CLI::App app{
      "Read sequence lengths from datasets, print a histogram and summary, and "
      "write the "
      "length file that `fcp simulate --lengths` reads.\n"
      "Formats (by extension): Megatron indexed datasets (.idx, or the .idx "
      "beside a .bin), "
      "JSON lines (.jsonl: an integer token count, token ids, or --tokenizer "
      "for text), "
      "CSV (.csv with a header), Parquet (.parquet) and Arrow (.arrow), other "
      "files: one "
      "length per line. Parquet, Arrow and --tokenizer run the Python package "
      "(python -m fcp.lengths with the interpreter in FCP_PYTHON, which the "
      "pip-installed "
      "`fcp` command sets to its own; python3 otherwise).",
      "fcp lengths"};
  std::vector<std::string> inputs;
  std::string out, field, tokenizer, idx_unit = "document";
  app.add_option("inputs", inputs, "dataset files")->required();
  app.add_option("-o,--out", out, "length file to write")->required();
  app.add_option(
      "--field", field,
      "JSONL/CSV/Parquet/Arrow field: token count, token ids or text "
      "(default: tokens; text with --tokenizer)");
  app.add_option(
      "--tokenizer", tokenizer,
      "Hugging Face tokenizer.json to count the tokens of a text field");
  app.add_option(
         "--idx-unit", idx_unit,
         ".idx: one length per document (sum of its sequences) or per sequence")
      ->check(CLI::IsMember({"document", "sequence"}));
  if (const int rc = ParseFlags(app, argc, argv); rc >= 0) return rc;

  try {
    // Before reading what may be gigabytes of dataset.
    CheckOutputDirectory(out, "out");
    bool python = !tokenizer.empty();
    for (const auto& in : inputs) {
      struct stat st;
      if (::stat(in.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        return InputErrorExit(
            EscapeForMessage(in) +
            ": is a directory (give the files inside, e.g. DIR/*.arrow)");
      python |= NeedsPython(DetectDatasetFormat(in));
    }
    if (python) return RunPythonLengths(argc, argv);
    if (field.empty()) field = "tokens";
    int64_t empty = 0;
    const std::vector<int64_t> lengths =
        ReadDatasetLengths(inputs, field, idx_unit == "document", empty);
    if (lengths.empty())
      return InputErrorExit("inputs: no non-empty sequences found");
    WriteFileAtomically(out, LengthFileText(lengths), "out");
    const std::string report = LengthReport(lengths, empty);
    std::fwrite(report.data(), 1, report.size(), stdout);
    std::fprintf(stdout, "wrote %s\n", EscapeForMessage(out).c_str());
    return 0;
  } catch (const InputError& e) {
    return InputErrorExit(e.what());
  }
}

FCP_COMMAND(
    "lengths",
    "sequence lengths from datasets (.idx, JSONL, CSV, Parquet) + histogram",
    RunLengths);

}  // namespace
}  // namespace fcp::cli
