// fcp-train: trains the executor's byte-level transformer on text files with
// per-global-batch FCP plans. Run under MPI:
//   mpirun -np N build/fcp-train [--strategy fcp|fcp-paper|megatron]
//       [--data-dir DIR] [--max-len L] [--gbs B] [--steps S] [--seed S]
// Rank 0 prints one line per step and a summary. Exit codes: 0 ok; 2 bad
// input or configuration (one `error:` line on stderr, from rank 0 only,
// found before training starts); 1 runtime failure (every rank prints its
// line with the reason); 3 the watchdog ended a stalled job.
#include <CLI/CLI.hpp>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "exec/communicator_mpi.h"
#include "exec/trainer.h"
#include "exec/watchdog.h"
#include "fcp/io.h"
#include "fcp/scheduler.h"
#include "kernels/gemm.h"

namespace {

struct Flags {
  fcp::exec::TrainOptions train;
  std::string data_dir = "/usr/include";
  std::string cost_model_path;
  std::string lengths_path;
  std::string die_at;   // "RANK:STEP"
  std::string stop_at;  // "RANK:STEP"
  double watchdog_s = 300;
  double mem_mb = 256;
  bool sync_planning = false;
  bool no_calibrate = false;
};

// This process's rank as the launcher states it (before MPI_Init): flag
// errors are printed by rank 0 only. 0 when not launched by mpirun.
int LaunchRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

// "RANK:STEP" of a testing flag.
std::pair<int, int> RankStep(const std::string& flag, const std::string& v) {
  int rank = -1, step = -1;
  char tail = 0;
  if (std::sscanf(v.c_str(), "%d:%d%c", &rank, &step, &tail) != 2 || rank < 0 ||
      step < 0)
    throw fcp::InputError(flag, "expected RANK:STEP (non-negative integers)");
  return {rank, step};
}

// Every flag as given or defaulted ("--seed" -> "1"), in a fixed order.
std::vector<std::pair<std::string, std::string>> FlagValues(
    const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_name() == "--help") continue;
    std::string value;
    if (opt->count() > 0) {
      for (const std::string& r : opt->results()) value += r + '\x1f';
    } else {
      value = "default:" + opt->get_default_str();
    }
    out.emplace_back(opt->get_name(), value);
  }
  return out;
}

// 48-bit FNV-1a: exact in a double, so one AllReduceSum gathers it.
double Hash48(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return static_cast<double>(h >> 16);
}

// Ranks started with different flags fail apart (a hang, message truncation,
// silently wrong training: issue 30), so before anything else every rank's
// flags are compared: one all-gather (an AllReduceSum of per-rank slots) of a
// hash per flag. A difference is InputError naming the first flag that
// differs and the ranks whose value is not rank 0's, on every rank alike.
void CheckSameFlagsOnEveryRank(fcp::exec::Communicator& world,
                               const CLI::App& app) {
  const auto flags = FlagValues(app);
  const size_t k = flags.size();
  const int n = world.size();
  std::vector<double> all(k * static_cast<size_t>(n), 0.0);
  for (size_t f = 0; f < k; ++f)
    all[static_cast<size_t>(world.rank()) * k + f] =
        Hash48(flags[f].first + '=' + flags[f].second);
  world.AllReduceSum(all.data(), all.size());
  for (size_t f = 0; f < k; ++f) {
    std::string differ;
    int count = 0;
    for (int r = 1; r < n; ++r) {
      if (all[static_cast<size_t>(r) * k + f] != all[f]) {
        differ += (differ.empty() ? "" : ", ") + std::to_string(r);
        ++count;
      }
    }
    if (count == 0) continue;
    throw fcp::InputError(
        flags[f].first,
        "not the same on every rank (" +
            std::string(count == 1 ? "rank " : "ranks ") + differ +
            (count == 1 ? " differs" : " differ") +
            " from rank 0); start every rank with the same flags");
  }
}

// A flag that fails to parse on some ranks only (e.g. `--seed -1` on rank 1)
// used to end those ranks before MPI started, silently (only rank 0 prints),
// while the others waited in the flag check. Every rank therefore starts MPI
// and the ranks agree on who failed: the first failing rank prints its error
// once, naming the failing ranks unless all failed, and every rank exits 2.
bool FlagsParsedOnEveryRank(fcp::exec::Communicator& world,
                            const std::string& parse_error) {
  const int n = world.size();
  std::vector<double> failed(static_cast<size_t>(n), 0.0);
  failed[static_cast<size_t>(world.rank())] = parse_error.empty() ? 0.0 : 1.0;
  world.AllReduceSum(failed.data(), failed.size());
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) {
    if (failed[static_cast<size_t>(r)] != 0) ranks.push_back(r);
  }
  if (ranks.empty()) return true;
  if (world.rank() == ranks.front()) {
    std::string which;
    if (static_cast<int>(ranks.size()) < n) {
      for (int r : ranks)
        which += (which.empty() ? "" : ", ") + std::to_string(r);
      which = std::string(ranks.size() == 1 ? " (rank " : " (ranks ") + which +
              " only; start every rank with the same flags)";
    }
    std::fprintf(stderr, "error: %s%s\n", parse_error.c_str(), which.c_str());
    std::fflush(stderr);
  }
  return false;
}

// Long because: every rank runs the same checks, setup and training loop in
// lockstep.
int Run(fcp::exec::Communicator& world, Flags& flags) {
  using namespace fcp::exec;
  TrainOptions& o = flags.train;
  o.async_planning = !flags.sync_planning;
  o.calibrate = !flags.no_calibrate;
  o.mem_capacity_bytes = flags.mem_mb * (1 << 20);
  if (!flags.cost_model_path.empty()) {
    const fcp::CostModel base = CpuCostModel(o.model, o.mem_capacity_bytes);
    o.cost = fcp::ParseCostModelJson(
        fcp::ReadFileOrStdin(flags.cost_model_path), base);
  }
  std::pair<int, int> die{-1, -1}, stop{-1, -1};
  if (!flags.die_at.empty()) die = RankStep("die_at", flags.die_at);
  if (!flags.stop_at.empty()) stop = RankStep("stop_at", flags.stop_at);
  if (!(flags.watchdog_s >= 0) || !std::isfinite(flags.watchdog_s))
    throw fcp::InputError("watchdog_s",
                          "must be a finite number >= 0 (0 = off)");
  o.on_step_start = [die, stop](int rank, int step) {
    if (rank == die.first && step == die.second) {
      std::fprintf(stderr, "rank %d: simulated crash at step %d\n", rank, step);
      std::fflush(stderr);
      std::_Exit(17);  // no MPI_Finalize: a crashed process
    }
    if (rank == stop.first && step == stop.second) {
      std::fprintf(stderr, "rank %d: stopping itself (SIGSTOP) at step %d\n",
                   rank, step);
      std::fflush(stderr);
      std::raise(SIGSTOP);  // every thread stops, as with kill -STOP
    }
  };
  const TextCorpus corpus =
      flags.lengths_path.empty()
          ? ListCorpus(flags.data_dir)
          : LengthsCorpus(fcp::ReadLengthsFile(flags.lengths_path),
                          ListCorpus(flags.data_dir));
  // Every configuration error is found here, identically on every rank and
  // without communication, before any training work.
  if (auto e = PreflightCheck(o, corpus, world.size()))
    throw fcp::InputError::FromMessage(*e);
  std::unique_ptr<Watchdog> watchdog;
  if (flags.watchdog_s > 0) {
    watchdog = StartMpiWatchdog(flags.watchdog_s);
    if (watchdog)
      o.on_progress = [w = watchdog.get()](int step) { w->Mark(step); };
    else if (world.rank() == 0)
      std::fprintf(stderr,
                   "warning: no watchdog: the MPI library does not "
                   "provide MPI_THREAD_MULTIPLE\n");
  }
  Trainer trainer(world, o, corpus);
  const bool print = world.rank() == 0;
  if (print)
    std::printf(
        "fcp-train: %d ranks (%s), strategy %s, %zu files in %s, gbs %d, "
        "max-len %lld, model D=%d L=%d H=%d F=%d (%zu params)\n",
        world.size(), world.kind().c_str(), o.strategy.c_str(),
        corpus.paths.size(), flags.data_dir.c_str(), o.gbs,
        static_cast<long long>(o.max_len), o.model.dim, o.model.layers,
        o.model.heads, o.model.ffn, trainer.params().size());
  if (print)
    std::printf(
        "cost model (%s): alpha1 %.3e s/token^2, alpha2 %.3e s/token, "
        "beta1 %.1e s, beta2 %.1e s, mem %.0f B/token, capacity %.0f MiB\n",
        o.cost        ? "from --cost-model"
        : o.calibrate ? "fitted on rank 0"
                      : "derived",
        trainer.cost().alpha1, trainer.cost().alpha2, trainer.cost().beta1,
        trainer.cost().beta2, trainer.cost().mem_per_token,
        trainer.cost().mem_capacity / (1 << 20));
  double total_s = 0, steady_s = 0, plan_s = 0, hidden_s = 0;
  int64_t tokens = 0, steady_tokens = 0;
  StepReport last;
  for (int s = 0; s < o.steps; ++s) {
    StepReport r = trainer.Step(s);
    // Slowest rank's wall time is the step time.
    std::vector<double> all(world.size(), 0.0);
    all[world.rank()] = r.wall_s;
    world.AllReduceSum(all.data(), all.size());
    double max_wall = 0;
    for (double w : all) max_wall = std::max(max_wall, w);
    total_s += max_wall;
    tokens += r.global_tokens;
    if (s > 0) {
      steady_s += max_wall;
      steady_tokens += r.global_tokens;
    }
    plan_s += r.plan_s;
    hidden_s += r.plan_hidden_s;
    if (print)
      std::printf(
          "step %3d  loss %.4f  wall %.3f s  plan %.1f ms (hidden %.1f / "
          "visible %.1f)  est %.0f ms  groups %s  tokens %lld  cache "
          "hit/miss %lld/%lld\n",
          s, r.loss, max_wall, 1e3 * r.plan_s, 1e3 * r.plan_hidden_s,
          1e3 * r.plan_visible_s, r.est_ms, r.layout.c_str(),
          static_cast<long long>(r.global_tokens),
          static_cast<long long>(r.cache.hits),
          static_cast<long long>(r.cache.misses));
    if (print && r.group_error_rms >= 0)
      std::printf(
          "          learn: group estimates off by %.1f%% RMS (log) under the "
          "coefficients that planned this step; %d groups learnt from\n",
          100 * r.group_error_rms, r.learnt_groups);
    std::fflush(stdout);
    last = r;
  }
  if (print) {
    std::printf(
        "summary: strategy %s, %d ranks, %d steps, %lld tokens in %.2f s: "
        "%.0f tokens/s (steady state, steps 1..%d: %.0f tokens/s, %.3f s/step)"
        "; final loss %.4f; planning %.1f ms total, %.0f%% hidden; comm "
        "cache %lld hits / %lld misses, split %.3f ms mean, hit %.4f ms mean "
        "(rank 0). Measured on this machine (%s).\n",
        o.strategy.c_str(), world.size(), o.steps,
        static_cast<long long>(tokens), total_s, tokens / total_s, o.steps - 1,
        steady_s > 0 ? steady_tokens / steady_s : 0.0,
        o.steps > 1 ? steady_s / (o.steps - 1) : total_s, last.loss,
        1e3 * plan_s, plan_s > 0 ? 100.0 * hidden_s / plan_s : 0.0,
        static_cast<long long>(last.cache.hits),
        static_cast<long long>(last.cache.misses),
        last.cache.splits ? 1e3 * last.cache.create_s / last.cache.splits : 0.0,
        last.cache.hits ? 1e3 * last.cache.hit_s / last.cache.hits : 0.0,
        "see docs/executor.md for the hardware caveat");
  }
  return 0;
}

}  // namespace

// Long because: flag parsing and the error classes every rank must exit with
// identically.
int main(int argc, char** argv) {
  Flags flags;
  fcp::exec::TrainOptions& o = flags.train;
  CLI::App app{"fcp-train: FCP executor on MPI (byte-level transformer)"};
  app.option_defaults()->always_capture_default();
  app.add_option("--strategy", o.strategy,
                 "planner strategy (fcp, fcp-paper, megatron, ...)");
  app.add_option("--data-dir", flags.data_dir,
                 "directory of text files (recursive)");
  app.add_option(
      "--lengths", flags.lengths_path,
      "sequence lengths (one a line, or CSV with a `tokens` column), cut "
      "from the files of --data-dir; default: the files' sizes");
  app.add_option("--max-len", o.max_len, "max tokens (bytes) per sequence");
  app.add_option("--gbs", o.gbs, "sequences per global batch");
  app.add_option("--steps", o.steps, "global batches to train");
  app.add_option("--seed", o.seed, "seed for data order and init")
      ->check(CLI::Validator(
          [](std::string& v) {
            // CLI11 would wrap -1 around to 2^64 - 1.
            return v.find_first_not_of("0123456789") == std::string::npos &&
                           !v.empty()
                       ? std::string()
                       : std::string("must be a non-negative decimal integer");
          },
          "UINT"));
  app.add_option("--dim", o.model.dim, "model width D");
  app.add_option("--layers", o.model.layers, "transformer layers");
  app.add_option("--heads", o.model.heads, "attention heads");
  app.add_option("--ffn", o.model.ffn, "MLP width F");
  app.add_option("--lr", o.adam.lr, "AdamW learning rate");
  app.add_option("--cp-degree", o.cp_degree,
                 "fixed CP degree for megatron (0 = tune)");
  app.add_option("--mem-mb", flags.mem_mb,
                 "per-rank memory capacity the planner assumes (MiB)");
  app.add_option("--cost-model", flags.cost_model_path,
                 "cost_model JSON (e.g. from `fcp profile`)");
  app.add_flag("--no-calibrate", flags.no_calibrate,
               "derive alpha1/alpha2 from FLOPs instead of timing this CPU");
  app.add_flag("--learn", o.learn,
               "learn from measured steps: after each step every group's "
               "measured time refines "
               "the planner's coefficients (with async planning, for the step "
               "after next)");
  app.add_flag("--sync-planning", flags.sync_planning,
               "plan each step in line (no look-ahead)");
  app.add_option("--watchdog-s", flags.watchdog_s,
                 "end the job (exit 3) when a rank makes no progress for this "
                 "many seconds (0 = off)");
  app.add_option("--die-at", flags.die_at,
                 "testing: RANK:STEP crashes that rank at that step");
  app.add_option("--stop-at", flags.stop_at,
                 "testing: RANK:STEP stops that rank (SIGSTOP) at that step");
  std::string parse_error;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return LaunchRank() == 0 ? app.exit(e) : 0;
    parse_error = e.what();
  }
  fcp::kernels::SetBlasThreads(1);  // one core per rank
  auto world = fcp::exec::MpiInit(&argc, &argv);
  int rc = 0;
  try {
    if (!FlagsParsedOnEveryRank(*world, parse_error)) {
      rc = 2;
    } else {
      CheckSameFlagsOnEveryRank(*world, app);
      rc = Run(*world, flags);
    }
  } catch (const fcp::InputError& e) {
    // Input errors are raised identically on every rank before any
    // communication, so every rank exits cleanly with 2.
    if (world->rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    rc = 2;
  } catch (const fcp::exec::CollectiveError& e) {
    // Raised by every rank at the same step with the same reason.
    std::fprintf(stderr, "rank %d: error: %s\n", world->rank(), e.what());
    rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", world->rank(), e.what());
    std::fflush(stderr);
    fcp::exec::MpiAbort(1);
  }
  world.reset();
  fcp::exec::MpiFinalize();
  return rc;
}
