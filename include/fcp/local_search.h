// A long local search in fcp's own cost model (issue 32): a strong reference
// for fcp's plans at sizes where `optimal` cannot run (hundreds of sequences,
// 64-256 ranks). It is NOT the fcp planner and the planner core does not know
// it; `fcp eval search` reports fcp's distance to it.
//
// It starts from other strategies' plans (fcp, the reference heuristics, the
// best balanced static plans) and from one group of all N ranks, and improves
// each by random moves, scored by the same estimate fcp minimises
// (SearchScoreMs: StepMs with the request's gradient sync, else the plan
// estimate, the list-schedule makespan of docs/design.md §2; new
// communicators charged when the request gives the held ones). Its plans keep
// every group on contiguous ranks (idle ranks allowed between groups) and run
// each group ring or all-to-all, whichever the cost model prices cheaper
// (all-to-all only on degrees that divide the query heads). The moves: move or
// swap a sequence between groups (of any micro-batch), grow or shrink a group
// by taking ranks from idle ranks or a neighbour, split a group in two, merge
// two groups, reorder the groups of a micro-batch, move idle ranks, move a
// group to another micro-batch or a sequence to a new one, split a group in
// time (half its sequences to a new micro-batch on the same ranks), and deal
// the sequences of up to four adjacent groups again onto new groups over their
// ranks (ruin and recreate); a quarter of the moves are followed by a second
// before they are scored. Each start is first improved by a descent; the best
// result then continues under late acceptance (a move is kept when it is no
// worse than the current plan or than the plan of L moves ago), which lets it
// cross plateaus of the makespan. Ties in the score go to the plan whose ranks
// finish earlier on (root mean square).
//
// Deterministic for a given seed (and standard library: its distributions)
// as long as `max_iterations`, not the time limit, ends the search.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fcp/scheduler.h"

namespace fcp::baselines {

struct LocalSearchOptions {
  double time_limit_s = 30.0;  // wall clock, the whole search
  int64_t max_iterations = 0;  // moves tried in all; 0 = until the time limit
  uint64_t seed = 1;
  // Groups may run as Ulysses all-to-all (where the request has a model shape
  // whose head counts allow the degree); false: ring only.
  bool all_to_all = true;
  // Most micro-batches a plan may have; 0 = no limit beyond one per sequence.
  int max_micro_batches = 0;
  // The start plans as given compete with the searched ones (a start whose
  // ranks are not contiguous is searched from a contiguous re-layout, which
  // may cost more than the start itself).
  bool keep_starts = true;
};

// A plan to start from and its name ("fcp", "ref-share", ...).
struct SearchStart {
  std::string name;
  Plan plan;
};

struct LocalSearchResult {
  Plan plan;  // the best plan found; evaluated (EvaluatePlan) and valid
  double score_ms = 0;  // its SearchScoreMs
  std::string origin;   // the start it descends from
  // Each start as given and its score (ms), in the order given.
  std::vector<std::pair<std::string, double>> start_scores_ms;
  int64_t iterations = 0;    // moves tried
  int64_t improvements = 0;  // moves that lowered the best score
  double seconds = 0;        // wall clock of the search
};

// The score the search minimises, and fcp ranks its candidates by: StepMs
// with the request's grad_sync, else plan.est_ms; when the request gives
// communicators with a creation time, each group on a rank set they do not
// hold starts that much later (NewCommunicatorDelaysMs, as fcp charges it).
// group_time_sigma is not modelled (fcp's ExpectedStepMs at sigma 0). `plan`
// must be evaluated.
double SearchScoreMs(const PlanRequest& request, const Plan& plan);

// The default starts: fcp, the three reference heuristics (heuristics.h) and
// the balanced static plans of megatron and deepspeed, each as MakePlan
// returns it; infeasible ones are left out.
std::vector<SearchStart> DefaultSearchStarts(const PlanRequest& request);

// Searches from `starts` (plans for `request`; those with more micro-batches
// than options.max_micro_batches are skipped) and from one group of all N
// ranks. Throws InputError for a bad option ("time_limit_s",
// "max_iterations", "max_micro_batches"). When some sequence fits on no
// number of ranks the plan is kInfeasible.
LocalSearchResult LocalSearch(const PlanRequest& request,
                              const std::vector<SearchStart>& starts,
                              const LocalSearchOptions& options = {});

}  // namespace fcp::baselines
