// Experiments on the simulator: global batches × strategies (fcp simulate,
// fcp eval paper). See include/fcp/experiment.h.
#include "fcp/experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "eval/step_totals.h"
#include "fcp/datasets.h"
#include "fcp/plan_check.h"
#include "fcp/presets.h"
#include "fcp/profiler.h"
#include "fcp/scheduler.h"
#include "fcp/unknown_names.h"

namespace fcp::sim {
namespace {

struct Batch {
  std::vector<Sequence> seqs;
  double tokens = 0;
};

struct Setup {
  HardwareModel hw;
  PlanRequest base;
  std::vector<Batch> batches;
};

bool IsStatic(const Plan& plan) { return plan.notes.count("cp_degree") > 0; }

// The value `cfg` forces for `setting` (0: tune).
int64_t ForcedSetting(const ExperimentConfig& cfg, Setting setting) {
  switch (setting) {
    case Setting::kCpDegree:
      return cfg.cp_degree;
    case Setting::kMaxSeqlenPerRank:
      return cfg.max_seqlen_per_rank;
    case Setting::kCapacityTokens:
      return cfg.capacity_tokens;
    case Setting::kNone:
      break;
  }
  return 0;
}

// Re-packs a static plan into micro-batches of `per_micro_batch` sequences per
// replica (--mbs), keeping each replica's ranks and sequence order. Estimates
// are refreshed by EvaluatePlan.
void RepackStatic(const PlanRequest& req, int per_micro_batch, Plan& plan) {
  std::vector<std::vector<int>> replica_ranks;
  std::vector<std::vector<int>> replica_seqs;
  std::vector<CommKind> replica_comm;
  for (const auto& mb : plan.micro_batches) {
    for (const auto& g : mb.groups) {
      size_t j = 0;
      while (j < replica_ranks.size() && replica_ranks[j] != g.ranks) ++j;
      if (j == replica_ranks.size()) {
        replica_ranks.push_back(g.ranks);
        replica_seqs.emplace_back();
        replica_comm.push_back(g.comm);
      }
      replica_seqs[j].insert(replica_seqs[j].end(), g.sequences.begin(),
                             g.sequences.end());
    }
  }
  size_t num_mb = 0;
  const size_t m = static_cast<size_t>(per_micro_batch);
  for (const auto& seqs : replica_seqs)
    num_mb = std::max(num_mb, (seqs.size() + m - 1) / m);
  plan.micro_batches.assign(num_mb, MicroBatchPlan{});
  for (size_t i = 0; i < num_mb; ++i) {
    for (size_t j = 0; j < replica_ranks.size(); ++j) {
      const auto& seqs = replica_seqs[j];
      if (i * m >= seqs.size()) continue;
      GroupPlan g;
      g.ranks = replica_ranks[j];
      g.comm = replica_comm[j];
      g.sequences.assign(seqs.begin() + static_cast<std::ptrdiff_t>(i * m),
                         seqs.begin() + static_cast<std::ptrdiff_t>(std::min(
                                            seqs.size(), (i + 1) * m)));
      plan.micro_batches[i].groups.push_back(std::move(g));
    }
  }
  plan.notes["micro_batch_sequences"] =
      std::to_string(per_micro_batch) + " (fixed, --mbs)";
  EvaluatePlan(req, plan);
}

std::map<int, int> Histogram(const MicroBatchPlan& mb) {
  std::map<int, int> h;
  for (const auto& g : mb.groups)
    if (!g.sequences.empty()) ++h[g.degree()];
  return h;
}

struct StepRun {
  bool ok = false;
  bool oom = false;
  bool infeasible = false;
  std::string message;
  PlanRequest request;  // what the strategy planned (communicators included)
  Plan plan;
  SimResult sim;
};

// `setting_value` forces the strategy's main setting (`setting`); 0 lets the
// strategy tune it per batch.
// `learnt`: the coefficients learnt from the steps before (ExperimentConfig::
// learn), else null (setup.base's).
StepRun RunStep(const Setup& setup, const ExperimentConfig& cfg,
                const std::string& strategy, Setting setting,
                int64_t setting_value, size_t step,
                std::set<std::vector<int>>* cache,
                const CostModel* learnt = nullptr) {
  StepRun run;
  PlanRequest req = setup.base;
  req.sequences = setup.batches[step].seqs;
  if (learnt) req.cost = *learnt;
  if (cache && cfg.planner_communicators) {
    req.communicators = CommunicatorCache{setup.hw.group_create_s,
                                          {cache->begin(), cache->end()}};
  }
  PlanOptions opt;
  opt.strategy = strategy;
  ForceSetting(opt, setting, setting_value);
  opt.time_limit_s = cfg.time_limit_s;
  opt.seed = cfg.seed + step;
  opt.dealing = cfg.dealing;
  const auto extra = cfg.extra_planners.find(strategy);
  run.plan = extra != cfg.extra_planners.end() ? extra->second(req, step)
                                               : MakePlan(req, opt);
  run.request = req;
  if (run.plan.status != PlanStatus::kOk) {
    run.infeasible = true;
    run.message = run.plan.message;
    return run;
  }
  if (cfg.micro_batch_sequences > 0 && IsStatic(run.plan))
    RepackStatic(req, cfg.micro_batch_sequences, run.plan);
  SimOptions so;
  so.overlap_grad_reduce = cfg.overlap_grad_reduce;
  so.noise_rel = cfg.noise_rel;
  so.noise_seed = cfg.seed * 1000003ULL + step;
  so.communicator_cache = cache;
  run.sim = SimulatePlan(setup.hw, run.plan, req.sequences, so);
  if (run.sim.oom) {
    run.oom = true;
    run.message = run.sim.oom_message;
    return run;
  }
  run.ok = true;
  return run;
}

// Long because: resolves and checks every ExperimentConfig field in order, each
// error naming its field.
Setup MakeSetup(ExperimentConfig& cfg) {
  const ModelPreset* model = FindModelPreset(cfg.model);
  if (!model) throw InputError("model", UnknownModelPresetMessage(cfg.model));
  const ClusterPreset* cluster = FindClusterPreset(cfg.cluster);
  if (!cluster)
    throw InputError("cluster", UnknownClusterPresetMessage(cfg.cluster));
  if (cfg.ranks < 0 || cfg.ranks > (1 << 20))
    throw InputError("ranks", "must be in [1, 2^20]");
  if (cfg.global_batch < 1 || cfg.global_batch > 10000000)
    throw InputError("gbs", "must be in [1, 10^7]");
  // Every batch is drawn up front (about 24 bytes a sequence), so the total is
  // capped: --steps 1e9 grew without bound (issue 18).
  constexpr int kMaxSteps = 1'000'000;
  constexpr int64_t kMaxSequencesDrawn = 20'000'000;
  if (cfg.steps < 1 || cfg.steps > kMaxSteps)
    throw InputError("steps", "must be in [1, 10^6]");
  if (cfg.warmup < 0 || cfg.warmup > kMaxSteps)
    throw InputError("warmup", "must be in [0, 10^6]");
  if ((int64_t{cfg.warmup} + cfg.steps) * cfg.global_batch >
      kMaxSequencesDrawn) {
    throw InputError(
        "steps",
        fmt::format("(warmup + steps) x gbs = {} sequences, at most {} "
                    "(2*10^7: every batch is drawn up front)",
                    (int64_t{cfg.warmup} + cfg.steps) * cfg.global_batch,
                    kMaxSequencesDrawn));
  }
  if (cfg.noise_rel < 0 || !std::isfinite(cfg.noise_rel))
    throw InputError("noise", "must be >= 0");
  const double planner_noise =
      cfg.planner_noise < 0 ? cfg.noise_rel : cfg.planner_noise;
  if (!std::isfinite(cfg.planner_noise) || planner_noise > kMaxGroupTimeSigma) {
    throw InputError(cfg.planner_noise < 0 ? "noise" : "planner_noise",
                     cfg.planner_noise < 0
                         ? "the planners are told it and take a group-time "
                           "sigma in [0, 2]; to "
                           "simulate more noise, tell them less (fcp simulate "
                           "--planner-noise, "
                           "ExperimentConfig::planner_noise)"
                         : "the planners take a group-time sigma in [0, 2]");
  }
  if (cfg.strategies.empty()) throw InputError("strategies", "empty list");
  if (cfg.cp_degree < 0) throw InputError("cp", "must be >= 1 (0 = tune)");
  if (cfg.max_seqlen_per_rank < 0)
    throw InputError("max_seqlen_per_dp_cp_rank",
                     "must be >= 0 tokens (0 = tune)");
  if (cfg.capacity_tokens < 0)
    throw InputError("capacity_tokens", "must be >= 0 tokens (0 = tune)");
  if (cfg.micro_batch_sequences < 0)
    throw InputError("mbs", "must be >= 1 (0 = fill memory)");
  for (const auto& s : cfg.strategies) {
    if (!FindStrategy(s) && !cfg.extra_planners.contains(s))
      throw InputError("strategies", UnknownStrategyMessage(s));
  }
  for (const auto& [name, planner] : cfg.extra_planners) {
    if (FindStrategy(name) || !planner)
      throw InputError("strategies",
                       "extra planner '" + name +
                           "': a registered strategy's name or no function");
  }
  if (cfg.lengths.empty() && !FindDataset(cfg.dataset))
    SampleBatch(cfg.dataset, 0, 0);  // throws InputError("dataset", ...)

  ClusterPreset cp = *cluster;
  if (cfg.ranks > 0) cp.num_ranks = cfg.ranks;
  cp.ranks_per_node = std::max(1, std::min(cp.ranks_per_node, cp.num_ranks));
  cfg.ranks = cp.num_ranks;
  if (cfg.cp_degree > 0 && cp.num_ranks % cfg.cp_degree != 0)
    throw InputError("cp", "degree " + std::to_string(cfg.cp_degree) +
                               " does not divide " +
                               std::to_string(cp.num_ranks) + " ranks");

  // DP x CP replicates bf16 weights and gradients on every rank (4 B/param).
  const double states =
      4.0 * static_cast<double>(model->params() + model->vision_params());
  if (states >= cp.mem_bytes)
    throw InputError(
        "model",
        fmt::format("{}: replicated bf16 weights and gradients need {:.0f} "
                    "GB per rank > {:.0f} GB on {}; this model needs "
                    "tensor/pipeline parallelism or FSDP (out of scope)",
                    cfg.model, states / 1e9, cp.mem_bytes / 1e9, cp.name));
  Setup setup;
  setup.hw = MakeHardwareModel(*model, cp);
  setup.hw.vision_frozen = cfg.vision_frozen;
  setup.hw.recompute = cfg.recompute;
  setup.base.cluster = Cluster{cp.num_ranks, cp.ranks_per_node};
  setup.base.cost = cfg.cost_model
                        ? *cfg.cost_model
                        : DeriveCostModel(*model, cp, cfg.vision_frozen);
  if (!cfg.cost_model) CheckModelFitsOneRank(setup.base.cost, *model, cp);
  if (cfg.calibrate_memory)
    setup.base.cost = CalibrateMemory(setup.hw, setup.base.cost);
  setup.base.model = model->shape;
  if (cfg.overlap_grad_reduce && cfg.planner_grad_sync) {
    setup.base.grad_sync = PlannerGradientSync(setup.hw);
  }
  setup.base.group_time_sigma =
      cfg.planner_noise < 0 ? cfg.noise_rel : cfg.planner_noise;

  DatasetOptions dopt;
  if (model->multimodal && model->vision_tokens_per_tile > 0)
    dopt.vision_tokens_per_tile = model->vision_tokens_per_tile;
  const int total = cfg.warmup + cfg.steps;
  for (int i = 0; i < total; ++i) {
    Batch b;
    const uint64_t seed = cfg.seed + static_cast<uint64_t>(i);
    if (!cfg.lengths.empty()) {
      b.seqs = SampleFromLengths(cfg.lengths, cfg.global_batch, seed);
    } else {
      b.seqs = SampleBatch(cfg.dataset, cfg.global_batch, seed, dopt);
    }
    for (const auto& s : b.seqs)
      b.tokens += static_cast<double>(s.length_tokens);
    setup.batches.push_back(std::move(b));
  }
  return setup;
}

std::string Progress(const ExperimentConfig& cfg, const std::string& what) {
  return fmt::format("[simulate] {} {} N={}: {}",
                     cfg.lengths.empty() ? cfg.dataset : std::string("lengths"),
                     cfg.model, cfg.ranks, what);
}

// Runs `strategy` over every batch with its main setting fixed at `value`
// (0: none) and aggregates the measured steps. `callbacks`: call
// cfg.on_plan / cfg.on_first_measured_step (off while sweeping candidates).
StrategyResult RunFixedSetting(const Setup& setup, const ExperimentConfig& cfg,
                               const std::string& strategy, Setting setting,
                               int64_t value, double lower_bound_s,
                               bool callbacks) {
  StrategyResult r;
  r.strategy = strategy;
  const size_t total = setup.batches.size();
  const size_t first_measured = static_cast<size_t>(cfg.warmup);
  std::set<std::vector<int>> cache;
  StepTotals totals;
  double prev_iter_s =
      0;  // the step before (warmup included): hides the solver
  // cfg.learn: a measured group is no more precise than the spread of
  // group times the planners are told.
  RecalibrationOptions learning;
  learning.model = setup.base.model;
  learning.measurement_sigma =
      std::max(learning.measurement_sigma, setup.base.group_time_sigma);
  CoefficientLearner learner(setup.base.cost, learning);
  for (size_t i = 0; i < total; ++i) {
    const int before = static_cast<int>(cache.size());
    const StepRun run = RunStep(setup, cfg, strategy, setting, value, i, &cache,
                                cfg.learn ? &learner.cost() : nullptr);
    if (callbacks && cfg.on_plan && run.plan.status == PlanStatus::kOk)
      cfg.on_plan(strategy, run.request, run.plan);
    if (!run.ok) {
      r.oom = run.oom;
      r.infeasible = run.infeasible;
      r.message = fmt::format("step {}: {}", i, run.message);
      return r;
    }
    const double hide_behind = prev_iter_s;
    prev_iter_s = run.sim.iter_s;
    if (cfg.learn)
      learner.Learn(run.request, run.plan,
                    MeasuredGroupTimesS(run.plan, run.sim));
    if (i < first_measured) continue;
    if (callbacks && i == first_measured && cfg.on_first_measured_step)
      cfg.on_first_measured_step(run.plan, setup.batches[i].seqs, run.sim,
                                 setup.base.cluster.ranks_per_node);
    totals.Add(run.plan, run.sim, hide_behind,
               static_cast<double>(cache.size()) - before,
               setup.hw.group_create_s, setup.batches[i].tokens, r);
    for (const auto& mb : run.plan.micro_batches)
      for (const auto& [d, n] : Histogram(mb)) r.degree_histogram[d] += n;
    if (i == first_measured && !run.plan.micro_batches.empty())
      r.first_micro_batch_mix =
          DegreeMix(Histogram(run.plan.micro_batches.front()));
  }
  totals.Finish(lower_bound_s, r);
  return r;
}

// Every value of `impl`'s main setting that the strategy itself would try
// on batches [begin, end).
std::set<int64_t> SettingCandidates(const Setup& setup, const Strategy& impl,
                                    size_t begin, size_t end) {
  std::set<int64_t> candidates;
  for (size_t i = begin; i < end; ++i) {
    PlanRequest req = setup.base;
    req.sequences = setup.batches[i].seqs;
    for (int64_t v : impl.SettingCandidates(req)) candidates.insert(v);
  }
  return candidates;
}

struct WarmupPick {
  int64_t value = 0;       // 0: no candidate ran
  std::string candidates;  // "v:mean_s,..."
  std::string message;     // the last failure, when value == 0
};

// The setting a user who sets it once from the warm-up batches picks: every
// candidate simulated on the warm-up batches (the first batch when there are
// none), the fastest.
WarmupPick PickOnWarmup(const Setup& setup, const ExperimentConfig& cfg,
                        const std::string& strategy, const Strategy& impl,
                        Setting setting) {
  WarmupPick pick;
  const size_t tune_end = cfg.warmup > 0 ? static_cast<size_t>(cfg.warmup) : 1;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t v : SettingCandidates(setup, impl, 0, tune_end)) {
    double sum = 0;
    bool ok = true;
    for (size_t i = 0; i < tune_end && ok; ++i) {
      const StepRun run = RunStep(setup, cfg, strategy, setting, v, i, nullptr);
      if (!run.ok)
        ok = false, pick.message = run.message;
      else
        sum += run.sim.iter_s;
    }
    if (!ok) continue;
    if (!pick.candidates.empty()) pick.candidates += ",";
    pick.candidates +=
        fmt::format("{}:{:.3f}s", v, sum / static_cast<double>(tune_end));
    if (sum < best) best = sum, pick.value = v;
  }
  return pick;
}

// The strategy's result with its main setting (static degree, megatron-dcp's
// max_seqlen_per_dp_cp_rank, bytescale's capacity C) forced, picked on the
// warm-up batches, or tuned in hindsight (ExperimentConfig::tune): every
// candidate the strategy would try on any batch run over the whole
// experiment, the fastest on the measured batches kept. The warm-up pick is
// reported beside either way.
StrategyResult RunTunedStrategy(const Setup& setup, const ExperimentConfig& cfg,
                                const std::string& strategy,
                                double lower_bound_s) {
  const Strategy* impl = FindStrategy(strategy);  // null: an extra planner
  const Setting setting = impl ? impl->setting() : Setting::kNone;
  if (setting == Setting::kNone)
    return RunFixedSetting(setup, cfg, strategy, setting, 0, lower_bound_s,
                           true);
  auto run = [&](int64_t value, bool callbacks) {
    StrategyResult r = RunFixedSetting(setup, cfg, strategy, setting, value,
                                       lower_bound_s, callbacks);
    r.setting_name = std::string(SettingName(setting));
    r.setting = value;
    if (setting == Setting::kCpDegree) r.cp_degree = static_cast<int>(value);
    return r;
  };
  if (const int64_t forced = ForcedSetting(cfg, setting); forced > 0) {
    StrategyResult r = run(forced, true);
    r.tuning = "forced";
    r.degree_candidates = fmt::format("forced ({})", SettingFlag(setting));
    return r;
  }
  const WarmupPick warm = PickOnWarmup(setup, cfg, strategy, *impl, setting);
  StrategyResult best;
  best.strategy = strategy;
  best.setting_name = std::string(SettingName(setting));
  best.infeasible = true;
  best.message = fmt::format("no {} runs without OOM/infeasibility: {}",
                             SettingName(setting), warm.message);
  double warm_iter_s = 0;
  std::string tried;
  if (cfg.tune == Tuning::kWarmup) {
    if (warm.value > 0) best = run(warm.value, true);
    tried = warm.candidates;
    warm_iter_s = best.iter_s;
  } else {
    // Without callbacks a candidate's sweep run is the kept result itself.
    const bool sweep_is_final = !cfg.on_plan && !cfg.on_first_measured_step;
    for (int64_t v : SettingCandidates(setup, *impl, 0, setup.batches.size())) {
      StrategyResult r = run(v, sweep_is_final);
      if (r.oom || r.infeasible) {
        if (best.infeasible) best.message = r.message;
        continue;
      }
      if (!tried.empty()) tried += ",";
      tried += fmt::format("{}:{:.3f}s", v, r.iter_s);
      if (v == warm.value) warm_iter_s = r.iter_s;
      if (best.infeasible || r.iter_s < best.iter_s) best = std::move(r);
    }
    // The kept value once more, with the callbacks (plans, traces, plots).
    if (!sweep_is_final && !best.infeasible) best = run(best.setting, true);
  }
  best.tuning = cfg.tune == Tuning::kWarmup ? "warm-up" : "hindsight";
  best.degree_candidates = tried;
  best.warmup_setting = warm.value;
  best.warmup_iter_s = warm_iter_s;
  if (cfg.progress)
    cfg.progress(Progress(
        cfg, fmt::format("{} {} {} tuned {} (warm-up pick {}; candidates {})",
                         strategy, SettingName(setting), best.setting,
                         cfg.tune == Tuning::kWarmup ? "on the warm-up batches"
                                                     : "in hindsight",
                         warm.value, tried)));
  return best;
}

}  // namespace

std::string DegreeMix(const std::map<int, int>& degree_counts) {
  std::string out;
  for (auto it = degree_counts.rbegin(); it != degree_counts.rend(); ++it) {
    if (!out.empty()) out += ", ";
    out += fmt::format("<{}>x{}", it->first, it->second);
  }
  return out;
}

void StepTotals::Add(const Plan& plan, const SimResult& sim,
                     double hide_behind_s, double new_groups,
                     double group_create_s, double tokens, StrategyResult& r) {
  r.overlap.solver_s += plan.solver_ms / 1e3;
  r.overlap.hidden_s += std::min(plan.solver_ms / 1e3, hide_behind_s);
  solver_s.push_back(plan.solver_ms / 1e3);
  iter_s.push_back(sim.iter_s);
  r.solver_max_ms = std::max(r.solver_max_ms, plan.solver_ms);
  compute_s += sim.compute_s;
  grad_sync_s += sim.grad_sync_s;
  schedule_ms += plan.solver_ms + 1e3 * new_groups * group_create_s;
  micro_batches += static_cast<double>(plan.micro_batches.size());
  busy += sim.busy_fraction;
  this->tokens += tokens;
}

void StepTotals::Finish(double lower_bound_s, StrategyResult& r) const {
  const double n = static_cast<double>(iter_s.size());
  double total_iter = 0, total_solver = 0;
  for (double t : iter_s) total_iter += t;
  for (double t : solver_s) total_solver += t;
  r.iter_s = total_iter / n;
  r.tokens_per_s = tokens / total_iter;
  r.compute_s = compute_s / n;
  r.grad_sync_s = grad_sync_s / n;
  r.solver_ms = 1e3 * total_solver / n;
  r.schedule_ms = schedule_ms / n;
  r.micro_batches = micro_batches / n;
  r.busy_fraction = busy / n;
  r.step_iter_s = iter_s;
  r.overlap.exposed_s = r.overlap.solver_s - r.overlap.hidden_s;
  if (lower_bound_s > 0) r.vs_bound = r.iter_s / lower_bound_s;
}

ExperimentResult RunExperiment(const ExperimentConfig& config) {
  ExperimentResult result;
  result.config = config;
  ExperimentConfig& cfg = result.config;
  const Setup setup = MakeSetup(cfg);
  const size_t total = setup.batches.size();
  const size_t first_measured = static_cast<size_t>(cfg.warmup);
  double tokens_sum = 0, bound_sum = 0, ring_bound_sum = 0;
  for (size_t i = first_measured; i < total; ++i) {
    tokens_sum += setup.batches[i].tokens;
    bound_sum += PhysicalLowerBoundS(setup.hw, setup.batches[i].seqs,
                                     cfg.overlap_grad_reduce);
    ring_bound_sum += PhysicalLowerBoundS(setup.hw, setup.batches[i].seqs,
                                          cfg.overlap_grad_reduce,
                                          /*rings_only=*/true);
  }
  result.mean_tokens_per_batch = tokens_sum / cfg.steps;
  result.lower_bound_s = bound_sum / cfg.steps;
  result.ring_lower_bound_s = ring_bound_sum / cfg.steps;

  for (const auto& strategy : cfg.strategies) {
    StrategyResult r =
        RunTunedStrategy(setup, cfg, strategy, result.lower_bound_s);
    if (cfg.progress) {
      cfg.progress(Progress(
          cfg,
          r.oom || r.infeasible
              ? fmt::format("{} {}: {}", strategy, r.oom ? "OOM" : "infeasible",
                            r.message)
              : fmt::format("{} iter {:.3f} s (simulated), solver {:.2f} ms",
                            strategy, r.iter_s, r.solver_ms)));
    }
    result.results.push_back(std::move(r));
  }
  for (auto& r : result.results) {
    if (r.iter_s <= 0) continue;
    for (const auto& o : result.results) {
      if (&o == &r || o.iter_s <= 0) continue;
      if (o.strategy == "megatron" || o.strategy == "deepspeed")
        r.speedup_vs[o.strategy] = o.iter_s / r.iter_s;
    }
  }
  return result;
}

std::string ExperimentToJson(const ExperimentResult& res, int indent) {
  using json = nlohmann::ordered_json;  // keys in the documented order
  const ExperimentConfig& c = res.config;
  json config = {
      {"dataset", c.lengths.empty() ? c.dataset : "lengths"},
      {"model", c.model},
      {"cluster", c.cluster},
      {"ranks", c.ranks},
      {"gbs", c.global_batch},
      {"steps", c.steps},
      {"warmup", c.warmup},
      {"seed", c.seed},
      {"vision_frozen", c.vision_frozen},
      {"noise", c.noise_rel},
      {"planner_noise", c.planner_noise < 0 ? c.noise_rel : c.planner_noise},
      {"recompute", std::string(RecomputeName(c.recompute))},
      {"overlap_grad_reduce", c.overlap_grad_reduce},
      {"planner_grad_sync", c.overlap_grad_reduce && c.planner_grad_sync},
      {"planner_communicators", c.planner_communicators},
      {"learn", c.learn},
      {"cp", c.cp_degree > 0 ? json(c.cp_degree) : json("tuned")},
      {"max_seqlen_per_dp_cp_rank",
       c.max_seqlen_per_rank > 0 ? json(c.max_seqlen_per_rank) : json("tuned")},
      {"capacity_tokens",
       c.capacity_tokens > 0 ? json(c.capacity_tokens) : json("tuned")},
      {"tune", c.tune == Tuning::kWarmup ? "warmup" : "hindsight"},
      {"mbs", c.micro_batch_sequences > 0 ? json(c.micro_batch_sequences)
                                          : json("memory-packed")},
      {"dealing", c.dealing == Dealing::kLoader ? "loader" : "balanced"},
      {"planner_memory",
       c.calibrate_memory ? "calibrated to the simulator" : "as given"},
      {"mean_tokens_per_batch", res.mean_tokens_per_batch},
      {"lower_bound_s", res.lower_bound_s}};
  json results = json::array();
  for (const auto& r : res.results) {
    const bool ok = !r.oom && !r.infeasible;
    json j = {{"strategy", r.strategy},
              {"iter_s", ok ? json(r.iter_s) : json(nullptr)},
              {"tokens_per_s", ok ? json(r.tokens_per_s) : json(nullptr)},
              {"speedup_vs", r.speedup_vs},
              {"vs_bound", ok ? json(r.vs_bound) : json(nullptr)},
              {"oom", r.oom},
              {"infeasible", r.infeasible},
              {"solver_ms", r.solver_ms},
              {"solver_max_ms", r.solver_max_ms},
              {"schedule_ms", r.schedule_ms},
              {"compute_s", r.compute_s},
              {"grad_sync_s", r.grad_sync_s},
              {"micro_batches", r.micro_batches},
              {"busy_fraction", r.busy_fraction},
              {"scheduling_hidden_s", r.overlap.hidden_s},
              {"scheduling_exposed_s", r.overlap.exposed_s},
              {"first_micro_batch_degrees", r.first_micro_batch_mix}};
    json hist = json::object();
    for (const auto& [d, n] : r.degree_histogram) hist[std::to_string(d)] = n;
    j["degree_histogram"] = hist;
    if (r.setting >
        0) {  // cp_degree, max_seqlen_per_dp_cp_rank or capacity_tokens
      j[r.setting_name] = r.setting;
      j[r.setting_name + "_candidates"] = r.degree_candidates;
      j["tuning"] = r.tuning;
      if (r.tuning != "forced") {
        j[r.setting_name + "_warmup_pick"] =
            r.warmup_setting > 0 ? json(r.warmup_setting) : json(nullptr);
        j["warmup_pick_iter_s"] =
            r.warmup_iter_s > 0 ? json(r.warmup_iter_s) : json(nullptr);
      }
    }
    if (!r.message.empty()) j["message"] = r.message;
    results.push_back(j);
  }
  json out = {{"simulated", true}, {"config", config}, {"results", results}};
  return out.dump(indent);
}

// Long because: one fixed-width table: header, a row per strategy, footnotes.
std::string ExperimentToTable(const ExperimentResult& res) {
  const ExperimentConfig& c = res.config;
  std::string out = fmt::format(
      "SIMULATED: {} on {} x {} ({} ranks), gbs {}, {} steps after {} warmup, "
      "seed {}{}\n",
      c.lengths.empty() ? c.dataset : "lengths file", c.model, c.cluster,
      c.ranks, c.global_batch, c.steps, c.warmup, c.seed,
      c.vision_frozen ? ", vision frozen" : "");
  if (c.learn) out += "planners learn from the steps they ran (--learn)\n";
  // Forced dynamic settings are named; tuned ones are the default, left unsaid
  // (the `setting` column gives the tuned values).
  std::string forced;
  if (c.max_seqlen_per_rank > 0)
    forced +=
        fmt::format(", megatron-dcp max_seqlen_per_dp_cp_rank {} (forced)",
                    c.max_seqlen_per_rank);
  if (c.capacity_tokens > 0)
    forced += fmt::format(", bytescale capacity {} tokens (forced)",
                          c.capacity_tokens);
  const char* tuned = c.tune == Tuning::kWarmup ? "tuned on the warm-up batches"
                                                : "tuned in hindsight";
  out += fmt::format(
      "recompute {}, gradient sync {}, static cp {}, static mbs {}{}\n",
      RecomputeName(c.recompute),
      c.overlap_grad_reduce ? "overlapped with backward" : "after compute",
      c.cp_degree > 0 ? std::to_string(c.cp_degree) + " (forced)" : tuned,
      c.micro_batch_sequences > 0 ? std::to_string(c.micro_batch_sequences)
                                  : "memory-packed",
      forced);
  out += fmt::format("mean tokens per global batch: {:.0f}\n",
                     res.mean_tokens_per_batch);
  out += fmt::format(
      "physical lower bound: {:.3f} s per global batch (simulated)\n",
      res.lower_bound_s);
  out += fmt::format(
      "{:<13} {:>9} {:>8} {:>11} {:>8} {:>8} {:>10} {:>10} {:>6} {:>7} {:>17}  "
      "{}\n",
      "strategy", "iter_s", "vs_bound", "ktok/s", "vs_meg", "vs_ds",
      "solver_ms", "hidden_%", "mbs", "setting", "warm-up pick",
      "first micro-batch degrees");
  for (const auto& r : res.results) {
    if (r.oom || r.infeasible) {
      out += fmt::format("{:<13} {}: {}\n", r.strategy,
                         r.oom ? "OOM" : "infeasible", r.message);
      continue;
    }
    auto sp = [&](const char* k) {
      auto it = r.speedup_vs.find(k);
      return it == r.speedup_vs.end() ? std::string("-")
                                      : fmt::format("{:.2f}x", it->second);
    };
    std::string warm = "-";
    if (r.warmup_setting > 0)
      warm =
          r.warmup_iter_s > 0
              ? fmt::format("{} ({:.3f} s)", r.warmup_setting, r.warmup_iter_s)
              : std::to_string(r.warmup_setting);
    out += fmt::format(
        "{:<13} {:>9.3f} {:>7.3f}x {:>11.2f} {:>8} {:>8} {:>10.2f} {:>10.1f} "
        "{:>6.1f} {:>7} {:>17}  {}\n",
        r.strategy, r.iter_s, r.vs_bound, r.tokens_per_s / 1e3, sp("megatron"),
        sp("deepspeed"), r.solver_ms, 100.0 * r.overlap.hidden_fraction(),
        r.micro_batches, r.setting > 0 ? std::to_string(r.setting) : "-", warm,
        r.first_micro_batch_mix);
  }
  out +=
      "iter_s/ktok/s: simulated hardware; vs_bound: iter_s / physical lower "
      "bound; solver_ms: measured planner wall time on this "
      "machine; hidden_%: solver time hidden behind the previous step (async "
      "scheduling); "
      "setting: the static CP degree, megatron-dcp's max_seqlen_per_dp_cp_rank "
      "or bytescale's "
      "capacity C (tokens) unless forced, " +
      std::string(c.tune == Tuning::kWarmup
                      ? "tuned on the warm-up batches by simulated time"
                      : "tuned in hindsight (every candidate run, the fastest "
                        "on the measured "
                        "batches kept)") +
      "; warm-up pick: the value the warm-up batches pick, with its measured "
      "iter_s.\n";
  return out;
}

}  // namespace fcp::sim
