// `fcp eval study`: where flexible CP pays against the best work-balanced
// static plan (include/fcp/study.h). Every figure is simulated.
#include "fcp/study.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "fcp/experiment.h"
#include "fcp/io.h"
#include "fcp/local_search.h"
#include "fcp/presets.h"
#include "fcp/profiler.h"
#include "fcp/types.h"
#include "fcp/unknown_names.h"

namespace fcp::sim {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string part, cluster, dataset, model;
  int ranks;
  int64_t gbs;
};

// Text datasets run on an LLM, video datasets on an MLLM of the same size.
std::string ModelFor(const std::string& dataset) {
  if (dataset == "msrvtt" || dataset == "internvid" || dataset == "openvid")
    return "qwen3-vl-8b";
  return "qwen3-8b";
}

template <class T>
std::vector<T> OrDefault(const std::vector<T>& given, std::vector<T> fallback) {
  return given.empty() ? fallback : given;
}

// Bad axis values as InputError naming the flag's field.
void CheckAxes(const StudyOptions& o) {
  for (const auto& c : o.clusters)
    if (!FindClusterPreset(c))
      throw InputError("cluster", UnknownClusterPresetMessage(c));
  for (const auto& m : o.models)
    if (!FindModelPreset(m))
      throw InputError("model", UnknownModelPresetMessage(m));
  for (int64_t b : o.global_batches)
    if (b < 1 || b > 1'000'000)
      throw InputError("gbs",
                       fmt::format("must be in [1, 1000000], got {}", b));
  for (int n : o.ranks)
    if (n < 1 || n > 65536)
      throw InputError("ranks",
                       fmt::format("must be in [1, 65536], got {}", n));
}

std::vector<Case> Grid(const StudyOptions& o) {
  const std::vector<std::string> clusters =
      OrDefault(o.clusters, {"h100-8x8", "ascend910c-4x16"});
  auto models_for = [&](const std::string& dataset) {
    return o.models.empty() ? std::vector<std::string>{ModelFor(dataset)}
                            : o.models;
  };
  std::vector<std::string> datasets =
      o.quick ? std::vector<std::string>{"github", "commoncrawl"}
              : std::vector<std::string>{"github", "commoncrawl", "wikipedia",
                                         "msrvtt", "internvid",   "openvid"};
  if (!o.lengths.empty()) datasets.push_back(o.lengths_label);
  const std::vector<int64_t> batches =
      OrDefault(o.global_batches,
                o.quick ? std::vector<int64_t>{16, 256}
                        : std::vector<int64_t>{16, 64, 256, 1024, 2048});
  const std::vector<int> scale_ranks =
      OrDefault(o.ranks, o.quick ? std::vector<int>{16, 128}
                                 : std::vector<int>{8, 32, 128, 512, 1024});
  std::vector<std::string> scale_sets = {"github"};
  if (!o.lengths.empty()) scale_sets.push_back(o.lengths_label);

  std::vector<Case> cases;
  for (const auto& c : clusters)
    for (const auto& d : datasets)
      for (const auto& m : models_for(d))
        for (int64_t b : batches)
          cases.push_back({"batch size", c, d, m, 64, b});
  for (const auto& c : clusters)
    for (const auto& d : scale_sets)
      for (const auto& m : models_for(d))
        for (int n : scale_ranks)
          cases.push_back(
              {"scale", c, d, m, n, std::max<int64_t>(16, 8LL * n)});
  for (const auto& c : clusters)
    for (const auto& m :
         o.models.empty() ? std::vector<std::string>{"qwen3-8b"} : o.models)
      cases.push_back({"extreme", c, "extreme", m, 64, 128});
  return cases;
}

// The reference heuristics (src/baselines/heuristics.h), each tuned in
// hindsight on the batch it plans; the study reports the best of them.
const char* const kReferenceHeuristics[] = {"ref-share", "ref-bisect",
                                            "ref-grow"};

const StrategyResult* Find(const ExperimentResult& r, const std::string& name) {
  for (const auto& s : r.results)
    if (s.strategy == name) return &s;
  return nullptr;
}

bool Ok(const StrategyResult* s) {
  return s && !s->oom && !s->infeasible && s->iter_s > 0;
}

// The better of megatron and deepspeed in `r`; nullptr when neither ran.
const StrategyResult* BestStatic(const ExperimentResult& r) {
  const StrategyResult* best = nullptr;
  for (const char* name : {"megatron", "deepspeed"}) {
    const StrategyResult* s = Find(r, name);
    if (Ok(s) && (!best || s->iter_s < best->iter_s)) best = s;
  }
  return best;
}

std::string Cell(double v, const char* f = "{:.3f}") {
  return v > 0 ? fmt::format(fmt::runtime(f), v) : std::string("–");
}

double GeoMean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

// The summary figures of one ratio over the cases where it exists (> 0).
struct RatioStats {
  double geomean = 0, min = 0, max = 0;
  int below_one = 0;  // by more than rounding (RunStudy's summary)
  size_t cases = 0;
};

template <class Ratio>
RatioStats Stats(const std::vector<StudyRow>& rows, Ratio ratio) {
  std::vector<double> v;
  RatioStats s;
  for (const StudyRow& r : rows) {
    const double x = ratio(r);
    if (x <= 0) continue;
    v.push_back(x);
    if (x < 1.0 - 1e-9) ++s.below_one;
  }
  s.geomean = GeoMean(v);
  if (!v.empty()) {
    s.min = *std::min_element(v.begin(), v.end());
    s.max = *std::max_element(v.begin(), v.end());
  }
  s.cases = v.size();
  return s;
}

std::string CaseName(const StudyRow& r) {
  return fmt::format("{} {} {} N={} gbs={}", r.part, r.cluster, r.dataset,
                     r.ranks, r.global_batch);
}

ExperimentConfig CaseConfig(const StudyOptions& o, const Case& k,
                            const std::optional<CostModel>& coefficients) {
  ExperimentConfig cfg;
  cfg.cost_model = coefficients;
  cfg.cluster = k.cluster;
  cfg.model = k.model;
  cfg.ranks = k.ranks;
  cfg.global_batch = k.gbs;
  cfg.steps = o.quick ? 1 : o.steps;
  cfg.warmup = o.quick ? 1 : o.warmup;
  cfg.seed = o.seed;
  cfg.learn = o.learn;
  cfg.tune = o.tune_in_hindsight ? Tuning::kHindsight : Tuning::kWarmup;
  if (k.dataset == o.lengths_label && !o.lengths.empty()) {
    cfg.lengths = o.lengths;
  } else {
    cfg.dataset = k.dataset;
  }
  return cfg;
}

// fcp, fcp-ring, the best reference heuristic and the best static plan (and
// its warm-up pick) from the run with balanced dealing.
void FillFromBalanced(const ExperimentResult& balanced, StudyRow& row) {
  row.bound_s = balanced.lower_bound_s;
  row.ring_bound_s = balanced.ring_lower_bound_s;
  if (const StrategyResult* f = Find(balanced, "fcp"); Ok(f)) {
    row.fcp_s = f->iter_s;
  } else {
    row.failure = "fcp: " + (f ? f->message : std::string("not run"));
  }
  if (const StrategyResult* f = Find(balanced, "fcp-ring"); Ok(f))
    row.fcp_ring_s = f->iter_s;
  if (const StrategyResult* m = Find(balanced, "megatron"); Ok(m))
    row.ring_static_s = m->iter_s;
  for (const char* name : kReferenceHeuristics) {
    const StrategyResult* h = Find(balanced, name);
    if (Ok(h) && (row.ref_s == 0 || h->iter_s < row.ref_s)) {
      row.ref_s = h->iter_s;
      row.ref_name = name;
    }
  }
  if (const StrategyResult* s = BestStatic(balanced)) {
    row.static_s = s->iter_s;
    row.static_name = fmt::format("{} c={}", s->strategy, s->cp_degree);
  } else if (row.failure.empty()) {
    row.failure = "no static degree fits";
  }
  for (const char* name : {"megatron", "deepspeed"}) {
    const StrategyResult* s = Find(balanced, name);
    if (!s || s->warmup_iter_s <= 0) continue;
    if (row.static_warmup_s > 0 && s->warmup_iter_s >= row.static_warmup_s)
      continue;
    row.static_warmup_s = s->warmup_iter_s;
    row.static_warmup_name =
        fmt::format("{} c={}", s->strategy, s->warmup_setting);
  }
}

// The local-search reference's two columns (StudyOptions::search_s), run
// and simulated as fcp is, with a communicator cache of their own.
void AddSearch(const StudyOptions& o, ExperimentConfig cfg, StudyRow& row) {
  SearchTally all, ring;
  cfg.strategies = {"search", "search-ring"};
  cfg.extra_planners = {
      {"search", StudySearchPlanner(o, cfg.warmup, false, &all)},
      {"search-ring", StudySearchPlanner(o, cfg.warmup, true, &ring)}};
  const ExperimentResult searched = RunExperiment(cfg);
  if (const StrategyResult* s = Find(searched, "search"); Ok(s))
    row.search_s = s->iter_s;
  if (const StrategyResult* s = Find(searched, "search-ring"); Ok(s))
    row.search_ring_s = s->iter_s;
  row.search_time_limited = all.time_limited + ring.time_limited;
  row.search_model_gain = all.model_gain();
  row.search_ring_model_gain = ring.model_gain();
}

StudyRow RunCase(const StudyOptions& o, const Case& k, ExperimentConfig cfg) {
  StudyRow row;
  row.part = k.part;
  row.cluster = k.cluster;
  row.dataset = k.dataset;
  row.model = k.model;
  row.ranks = k.ranks;
  row.global_batch = k.gbs;
  cfg.strategies = {"fcp", "megatron", "deepspeed", "fcp-ring"};
  cfg.strategies.insert(cfg.strategies.end(), std::begin(kReferenceHeuristics),
                        std::end(kReferenceHeuristics));
  cfg.dealing = Dealing::kBalanced;
  FillFromBalanced(RunExperiment(cfg), row);
  if (o.search_s > 0) AddSearch(o, cfg, row);
  cfg.strategies = {"megatron", "deepspeed"};
  cfg.dealing = Dealing::kLoader;
  const ExperimentResult loader = RunExperiment(cfg);
  if (const StrategyResult* s = BestStatic(loader)) row.loader_s = s->iter_s;
  return row;
}

// The search's simulated step more than 0.5 % shorter than fcp's (ring:
// search-ring's than fcp-ring's).
bool SearchAhead(const StudyRow& r, bool ring) {
  const double search = ring ? r.search_ring_s : r.search_s;
  const double fcp = ring ? r.fcp_ring_s : r.fcp_s;
  return search > 0 && fcp > 0 && search < fcp / 1.005;
}

// The summary lines of the local-search reference beside fcp's.
std::string SearchSummary(const StudyOptions& o,
                          const std::vector<StudyRow>& rows) {
  auto line = [](const char* name, const RatioStats& s) {
    return fmt::format(
        "  {:<11} / static: geometric mean {:.3f}x, min {:.3f}x, cases < "
        "1.00x: {} of {}\n",
        name, s.geomean, s.min, s.below_one, s.cases);
  };
  const RatioStats gain =
      Stats(rows, [](const StudyRow& r) { return r.search_model_gain; });
  const RatioStats ring_gain =
      Stats(rows, [](const StudyRow& r) { return r.search_ring_model_gain; });
  int ahead = 0, ring_ahead = 0, limited = 0;
  for (const StudyRow& r : rows) {
    ahead += SearchAhead(r, false);
    ring_ahead += SearchAhead(r, true);
    limited += r.search_time_limited;
  }
  return fmt::format(
             "reference local search (not the fcp planner; {} s, {} "
             "iterations per measured batch, {} searches ended by the time "
             "limit):\n",
             o.search_s,
             o.search_iterations > 0 ? std::to_string(o.search_iterations)
                                     : std::string("unlimited"),
             limited) +
         line("fcp",
              Stats(rows, [](const StudyRow& r) { return r.speedup(); })) +
         line("search",
              Stats(rows,
                    [](const StudyRow& r) { return r.search_speedup(); })) +
         line("fcp-ring",
              Stats(rows, [](const StudyRow& r) { return r.ring_speedup(); })) +
         line("search-ring", Stats(rows,
                                   [](const StudyRow& r) {
                                     return r.search_ring_speedup();
                                   })) +
         fmt::format(
             "  search ahead of fcp by > 0.5 %: {} cases; search-ring ahead "
             "of fcp-ring by > 0.5 %: {} cases\n"
             "  in fcp's own model (step estimate), fcp / search: geometric "
             "mean {:.4f}x, max {:.4f}x; fcp-ring / search-ring: {:.4f}x, max "
             "{:.4f}x\n",
             ahead, ring_ahead, gain.geomean, gain.max, ring_gain.geomean,
             ring_gain.max);
}

// StudyResult::summary: fcp against the static plan, fcp-ring and the
// reference heuristics, then the search's lines when it ran.
std::string Summary(const StudyOptions& o, const std::vector<StudyRow>& rows) {
  std::vector<double> ratios;
  const StudyRow* worst = nullptr;
  const StudyRow* best = nullptr;
  int wins20 = 0, losses = 0, near_bound = 0, failed = 0;
  for (const StudyRow& r : rows) {
    const double x = r.speedup();
    if (x <= 0) {
      ++failed;
      continue;
    }
    ratios.push_back(x);
    if (!worst || x < worst->speedup()) worst = &r;
    if (!best || x > best->speedup()) best = &r;
    if (x >= 1.2) ++wins20;
    // Below 1 by rounding only (the same plan, its times summed in another
    // order, e.g. 1 - 1e-16) is a tie, not a loss.
    if (x < 1.0 - 1e-9) ++losses;
    if (r.bound_s > 0 && r.fcp_s <= 1.05 * r.bound_s) ++near_bound;
  }
  const RatioStats ring =
      Stats(rows, [](const StudyRow& r) { return r.ring_speedup(); });
  // Of fcp-ring's cases below 1.00x, those where no ring plan reaches the
  // static plan (its rings-only bound above it).
  int ring_out_of_reach = 0;
  for (const StudyRow& r : rows) {
    const double x = r.ring_speedup();
    ring_out_of_reach +=
        x > 0 && x < 1.0 - 1e-9 && r.ring_bound_s > r.static_s * (1 + 1e-9);
  }
  const RatioStats ring_vs_ring =
      Stats(rows, [](const StudyRow& r) { return r.ring_vs_ring_static(); });
  const RatioStats ref =
      Stats(rows, [](const StudyRow& r) { return r.vs_ref(); });
  auto name = [](const StudyRow* r) {
    return r ? fmt::format("{} ({:.3f}x)", CaseName(*r), r->speedup())
             : std::string("–");
  };
  return fmt::format(
             "cases {} (both ran: {}, failed: {})\n"
             "fcp / best balanced static ({}): geometric mean {:.3f}x, worst "
             "{}, best {}\n"
             "cases >= 1.20x: {}; cases < 1.00x: {}; fcp within 5 % of the "
             "physical bound: {}\n"
             "fcp-ring / best balanced static: geometric mean {:.3f}x, min "
             "{:.3f}x, cases < 1.00x: {} (where no ring plan reaches the "
             "static plan: {}); / best ring static (megatron): "
             "geometric mean {:.3f}x, min {:.3f}x, cases < 1.00x: {}\n"
             "fcp / best reference heuristic: geometric mean {:.3f}x, min "
             "{:.3f}x\n",
             rows.size(), ratios.size(), failed,
             o.tune_in_hindsight ? "tuned in hindsight"
                                 : "tuned on warm-up batches",
             GeoMean(ratios), name(worst), name(best), wins20, losses,
             near_bound, ring.geomean, ring.min, ring.below_one,
             ring_out_of_reach, ring_vs_ring.geomean, ring_vs_ring.min,
             ring_vs_ring.below_one, ref.geomean, ref.min) +
         (o.search_s > 0 ? SearchSummary(o, rows) : std::string()) +
         fmt::format("(simulated; planner coefficients: {}{})",
                     o.profiled_coefficients
                         ? "profiled on the simulated cluster"
                         : "presets",
                     o.learn ? ", learnt from the steps run" : "");
}

// study.md's opening paragraph: what each column is.
std::string Intro(const StudyOptions& o) {
  return "# Where flexible CP pays (simulated)\n\n"
         "Generated by `fcp eval study`. Every time is *simulated* on fcp's "
         "calibrated hardware "
         "model (docs/simulator.md, docs/calibration.md), seconds per global "
         "batch, mean over the "
         "measured batches. `static` is the best work-balanced static plan "
         "(megatron or "
         "deepspeed, sequences dealt to replicas longest first onto the "
         "least-loaded replica), its "
         "degree " +
         std::string(
             o.tune_in_hindsight
                 ? "tuned in hindsight: every degree run on the measured "
                   "batches, the "
                   "fastest kept, as a user who sweeps it on their workload "
                   "would"
                 : "tuned on the warm-up batches (`--tune warmup`)") +
         "; `warm-up pick` is the better static plan with each degree picked "
         "on the warm-up "
         "batches, timed on the measured ones; `loader` is the best static "
         "plan in data-loader order "
         "(stock framework behaviour), shown for reference only. `bound` is "
         "the physical lower "
         "bound (every token's work spread over all ranks at the best "
         "efficiencies, or each long sequence alone on its fastest group, "
         "whichever is higher, plus the gradient sync no schedule can hide; "
         "docs/simulator.md). `fcp-ring` is fcp with ring groups only; "
         "`ring bound` is the same bound for plans of ring groups only: where "
         "it is above `static`, no ring plan reaches the static plan. `ref` "
         "is "
         "the best of three simple reference heuristics (ref-share, "
         "ref-bisect, ref-grow; "
         "docs/planner/reference-heuristics.md), each with its one setting "
         "tuned in hindsight on the "
         "batch. " +
         (o.search_s > 0
              ? std::string(
                    "`search` and `search-ring` are a long local search in "
                    "fcp's cost model "
                    "(docs/planner/reference-search.md; not the fcp planner) "
                    "from fcp's plan and the "
                    "other starts, all-to-all allowed and ring only, run on "
                    "each measured batch with the "
                    "request fcp plans (`--search-s`, `--search-iterations`). ")
              : std::string()) +
         "Every strategy plans with the same coefficients: " +
         (o.profiled_coefficients
              ? std::string(
                    "fitted by `fcp profile --target sim:CLUSTER --model "
                    "MODEL` (its "
                    "defaults: 2 % measurement noise, seed 1), once per "
                    "cluster and model, as "
                    "a user profiles their cluster before planning")
              : std::string("the presets', derived from hardware figures "
                            "(`--coefficients preset`)")) +
         (o.learn ? "; each strategy then learns from the steps it ran "
                    "(`--learn`: after every "
                    "step the coefficients are recalibrated from the group "
                    "times measured so far)"
                  : "") +
         ".\n";
}

std::string TableRow(const StudyRow& r, bool search) {
  std::string md = fmt::format(
      "| {} | {} | {} | {} | {} | {} | {} | {} {} | {} | {} | {} {} | {} | "
      "{} | {} | {} | {} {} | {} |",
      r.cluster, r.dataset, r.model, r.ranks, r.global_batch, Cell(r.bound_s),
      Cell(r.fcp_s), Cell(r.static_s), r.static_name,
      r.speedup() > 0 ? fmt::format("**{:.3f}x**", r.speedup()) : r.failure,
      r.fcp_s > 0 && r.bound_s > 0 ? fmt::format("{:.3f}", r.fcp_s / r.bound_s)
                                   : "–",
      Cell(r.static_warmup_s), r.static_warmup_name, Cell(r.loader_s),
      Cell(r.fcp_ring_s), Cell(r.ring_speedup(), "{:.3f}x"),
      Cell(r.ring_bound_s), Cell(r.ref_s), r.ref_name,
      Cell(r.vs_ref(), "{:.3f}x"));
  if (search)
    md += fmt::format(" {} | {} |", Cell(r.search_speedup(), "{:.3f}x"),
                      Cell(r.search_ring_speedup(), "{:.3f}x"));
  return md + "\n";
}

// The search's cases ahead of fcp (or fcp-ring) by more than 0.5 %.
std::string SearchAheadSection(const std::vector<StudyRow>& rows) {
  std::string md =
      "\n## Where the reference search is ahead by > 0.5 %\n\n"
      "| case | fcp / static | search / static | fcp-ring / static | "
      "search-ring / static |\n|---|---|---|---|---|\n";
  for (const StudyRow& r : rows) {
    if (!SearchAhead(r, false) && !SearchAhead(r, true)) continue;
    md += fmt::format("| {} | {} | {} | {} | {} |\n", CaseName(r),
                      Cell(r.speedup(), "{:.3f}x"),
                      Cell(r.search_speedup(), "{:.3f}x"),
                      Cell(r.ring_speedup(), "{:.3f}x"),
                      Cell(r.search_ring_speedup(), "{:.3f}x"));
  }
  return md;
}

std::string Markdown(const StudyOptions& o, const StudyResult& result) {
  const bool search = o.search_s > 0;
  std::string md =
      Intro(o) + "\n## Summary\n\n```text\n" + result.summary + "\n```\n";
  std::string part;
  for (const StudyRow& r : result.rows) {
    if (r.part != part) {
      part = r.part;
      md += fmt::format(
          "\n## {}\n\n| cluster | dataset | model | ranks | gbs | bound s | "
          "fcp s | static s "
          "(best balanced) | fcp / static | fcp / bound | warm-up pick s | "
          "loader-order static s | "
          "fcp-ring s | fcp-ring / static | ring bound s | ref s (best "
          "heuristic) | ref / fcp |{}\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
          "---|{}\n",
          part, search ? " search / static | search-ring / static |" : "",
          search ? "---|---|" : "");
    }
    md += TableRow(r, search);
  }
  return search ? md + SearchAheadSection(result.rows) : md;
}

std::string Csv(const StudyOptions& o, const std::vector<StudyRow>& rows) {
  const bool search = o.search_s > 0;
  std::string csv =
      "part,cluster,dataset,model,ranks,global_batch,bound_s,fcp_s,static_s,"
      "static,loader_s,"
      "speedup,fcp_vs_bound,fcp_ring_s,ring_speedup,ring_static_s,"
      "ring_vs_ring_static,ref_s,ref,fcp_vs_ref,"
      "static_warmup_s,"
      "static_warmup,ring_bound_s,failure";
  csv += search
             ? ",search_s,search_speedup,search_ring_s,search_ring_speedup,"
               "search_time_limited,search_model_gain,search_ring_model_gain\n"
             : "\n";
  for (const StudyRow& r : rows) {
    csv += fmt::format(
        "{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{},{:.6f},{:.6f},{:.6f},{:.6f},"
        "{:.6f},{:.6f},{:.6f},{:.6f},{},"
        "{:.6f},{:.6f},{},{:.6f},\"{}\"",
        r.part, r.cluster, r.dataset, r.model, r.ranks, r.global_batch,
        r.bound_s, r.fcp_s, r.static_s, r.static_name, r.loader_s, r.speedup(),
        r.bound_s > 0 ? r.fcp_s / r.bound_s : 0.0, r.fcp_ring_s,
        r.ring_speedup(), r.ring_static_s, r.ring_vs_ring_static(), r.ref_s,
        r.ref_name, r.vs_ref(), r.static_warmup_s, r.static_warmup_name,
        r.ring_bound_s, r.failure);
    csv += search
               ? fmt::format(",{:.6f},{:.6f},{:.6f},{:.6f},{},{:.6f},{:.6f}\n",
                             r.search_s, r.search_speedup(), r.search_ring_s,
                             r.search_ring_speedup(), r.search_time_limited,
                             r.search_model_gain, r.search_ring_model_gain)
               : "\n";
  }
  return csv;
}

// fcp-ring's plan and every default start with its groups turned ring.
std::vector<baselines::SearchStart> RingStarts(const PlanRequest& request) {
  std::vector<baselines::SearchStart> starts;
  PlanOptions ring;
  ring.strategy = "fcp-ring";
  if (Plan p = MakePlan(request, ring); p.status == PlanStatus::kOk)
    starts.push_back({"fcp-ring", std::move(p)});
  for (baselines::SearchStart& s : baselines::DefaultSearchStarts(request)) {
    for (MicroBatchPlan& mb : s.plan.micro_batches)
      for (GroupPlan& g : mb.groups) g.comm = CommKind::kRing;
    EvaluatePlan(request, s.plan);
    starts.push_back({s.name + " as ring", std::move(s.plan)});
  }
  return starts;
}

}  // namespace

std::function<Plan(const PlanRequest&, size_t)> StudySearchPlanner(
    const StudyOptions& o, int warmup, bool ring, SearchTally* tally) {
  baselines::LocalSearchOptions search;
  search.time_limit_s = o.search_s;
  search.max_iterations = o.search_iterations;
  search.all_to_all = !ring;
  const std::string fcp = ring ? "fcp-ring" : "fcp";
  return [=](const PlanRequest& request, size_t step) {
    if (step < static_cast<size_t>(warmup)) {
      PlanOptions options;
      options.strategy = fcp;
      return MakePlan(request, options);
    }
    baselines::LocalSearchOptions options = search;
    options.seed = 1 + step;
    const baselines::LocalSearchResult found = baselines::LocalSearch(
        request,
        ring ? RingStarts(request) : baselines::DefaultSearchStarts(request),
        options);
    if (tally && found.plan.status == PlanStatus::kOk) {
      ++tally->searches;
      if (options.max_iterations == 0 ||
          found.iterations < options.max_iterations)
        ++tally->time_limited;
      for (const auto& [name, ms] : found.start_scores_ms)
        if (name == fcp) tally->log_model_gain += std::log(ms / found.score_ms);
    }
    return found.plan;
  };
}

StudyResult RunStudy(const StudyOptions& o) {
  if (o.steps < 1) throw InputError("steps", "must be >= 1");
  if (o.warmup < 0) throw InputError("warmup", "must be >= 0");
  if (o.search_s < 0 || !std::isfinite(o.search_s))
    throw InputError("search_s", "must be a finite number >= 0 (0 = off)");
  if (o.search_iterations < 0)
    throw InputError("search_iterations",
                     "must be >= 0 (0 = until the time limit)");
  CheckAxes(o);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir))
    throw InputError(
        "out", "cannot create directory: " + (ec ? ec.message() : o.out_dir));

  const std::vector<Case> cases = Grid(o);
  // One profile per (cluster, model); memory fields are the simulator's for
  // each case's N either way (ExperimentConfig::calibrate_memory).
  std::map<std::pair<std::string, std::string>, CostModel> profiled;
  auto coefficients = [&](const Case& k) -> std::optional<CostModel> {
    if (!o.profiled_coefficients) return std::nullopt;
    auto [it, inserted] = profiled.try_emplace({k.cluster, k.model});
    if (inserted) {
      if (o.progress)
        o.progress(fmt::format(
            "[eval study] profiling {} on sim:{} (fcp profile, simulated)",
            k.model, k.cluster));
      ProfileOptions p;
      p.target = "sim:" + k.cluster;
      p.model = k.model;
      it->second = RunProfile(p).cost_model;
    }
    return it->second;
  };
  StudyResult result;
  for (const Case& k : cases) {
    const StudyRow& row = result.rows.emplace_back(
        RunCase(o, k, CaseConfig(o, k, coefficients(k))));
    if (!o.progress) continue;
    o.progress(fmt::format(
        "[eval study] {}/{} {} {} {} N={} gbs={}: fcp {} s, balanced static "
        "{} s ({:.2f}x), bound {} s{} (simulated)",
        result.rows.size(), cases.size(), k.part, k.cluster, k.dataset, k.ranks,
        k.gbs, Cell(row.fcp_s), Cell(row.static_s), row.speedup(),
        Cell(row.bound_s),
        o.search_s > 0
            ? fmt::format(", search {} s, search-ring {} s", Cell(row.search_s),
                          Cell(row.search_ring_s))
            : std::string()));
  }
  result.summary = Summary(o, result.rows);
  result.markdown = Markdown(o, result);
  const std::string csv = Csv(o, result.rows);
  for (const auto& [file, text] :
       {std::pair<const char*, const std::string*>{"study.md",
                                                   &result.markdown},
        std::pair<const char*, const std::string*>{"study.csv", &csv}}) {
    // The one output policy (io.h): a regular file replaced atomically, a
    // device or FIFO written in place, an error on any failed write.
    WriteFileAtomically((fs::path(o.out_dir) / file).string(), *text, "out");
  }
  return result;
}

}  // namespace fcp::sim
