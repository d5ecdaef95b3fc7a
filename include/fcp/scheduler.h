// The planner entry point.
//
//   Plan MakePlan(const PlanRequest&, const PlanOptions&)
//
// Inputs: a batch of sequences (tokens), a cluster (ranks), cost coefficients
// (SI units, docs/design.md §2) and a strategy name. Output: a Plan whose times
// are in milliseconds and memory in bytes, with est_ms (the list-schedule
// makespan of its micro-batches: ListScheduleMs below), lower_bound_ms and
// solver_ms filled in and every group's estimate computed from its actual
// ranks. Errors: invalid input (empty batch, length <= 0, eta outside [0,1],
// bad coefficients, mem_capacity > 2^62 bytes, coefficients so large that times
// would overflow or positive ones so small (< 1e-280) that they underflow, a
// bad grad_sync, group_time_sigma or communicators, N < 1, R < 1, unknown
// strategy or bad option) throws InputError naming the field. A batch in
// which some sequence cannot fit even on all N ranks is not an error: the
// Plan has status kInfeasible and names it.
// Thread-safety: MakePlan is reentrant; concurrent calls share nothing.
//
// Defined in src/planner/scheduler.cc (MakePlan, validation, estimates) and
// src/strategies/registry.cc (the strategy table: StrategyNames,
// FindStrategy).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/types.h"

namespace fcp {

// The data-parallel gradient sync that ends a training step, for a planner
// that ranks plans by step time rather than makespan (fcp; the other
// strategies ignore it). As in Megatron-Core's DistributedDataParallel with
// --overlap-grad-reduce and the distributed optimizer's parameter all-gather
// overlapped with the next forward: the gradients' reduce-scatter runs in
// `buckets` pieces behind the backward of the last group on the last rank to
// finish, the all-gather behind the shortest first forward of any rank, and
// at least one bucket of each is exposed. Without overlap the sync is a
// constant that no plan changes: leave grad_sync unset.
struct GradientSync {
  double collective_s =
      0;            // one reduce-scatter (= one all-gather) over all N ranks, s
  int buckets = 1;  // gradient buckets (>= 1)
  double forward_share =
      0.25;  // forward part of a group's time, [0, 1] (full recompute: 1/4)
};

// Communicators a runtime already holds, and what a new one costs. A group of
// d > 1 ranks needs a communicator for its rank set; runtimes create one on
// first use and keep it (the executor's CommCache, fcp.megatron's
// CPGroupCache, the simulator's cache), so a group on a new rank set starts
// create_s later, once per rank set. fcp charges it when ranking candidates.
struct CommunicatorCache {
  double create_s = 0;                     // creating one communicator, s
  std::vector<std::vector<int>> existing;  // rank sets (any order within a set)
};

struct PlanRequest {
  Cluster cluster;
  CostModel cost;
  std::vector<Sequence> sequences;
  // Model shape when known (DeepSpeed needs head counts; else ignored).
  std::optional<ModelShape> model;
  // The step's gradient sync when known (fcp ranks its candidates by
  // StepMs with it; else ignored).
  std::optional<GradientSync> grad_sync;
  // How far a group's real time strays from its estimate: each group's time
  // times an independent log-normal factor exp(sigma·Z - sigma²/2) (mean 1),
  // as `fcp simulate --noise` draws it. With sigma > 0 fcp ranks its
  // candidates by the expected step (ExpectedStepMs), where the max over many
  // near-tied groups grows with their number; 0 = exact estimates. [0, 2].
  double group_time_sigma = 0;
  // The runtime's communicators when known (fcp adds the creation of new ones
  // to its candidates' scores; else ignored).
  std::optional<CommunicatorCache> communicators;
};

inline constexpr double kMaxGroupTimeSigma = 2.0;

// How the static baselines (megatron, deepspeed) take their share of the
// global batch: dealt by work (LPT onto the least-loaded replica, the
// yardstick) or in data-loader order (stock framework behaviour).
enum class Dealing { kBalanced, kLoader };

// A strategy's main setting, where its real counterpart has one that a user
// sets once in the configuration: the static CP degree (megatron, deepspeed),
// Megatron-Core's max_seqlen_per_dp_cp_rank (megatron-dcp), ByteScale's
// per-rank token capacity C (bytescale). Each is forced by its PlanOptions
// field; 0 there lets the strategy tune it per batch by its own estimate.
enum class Setting { kNone, kCpDegree, kMaxSeqlenPerRank, kCapacityTokens };

struct PlanOptions {
  std::string strategy = "fcp";  // see StrategyNames()
  int cp_degree = 0;             // megatron/deepspeed: fixed degree; 0 = tune
  // megatron-dcp: fixed max_seqlen_per_dp_cp_rank (tokens); 0 = tune.
  int64_t max_seqlen_per_rank = 0;
  // bytescale: fixed per-rank token capacity C (tokens); 0 = tune.
  int64_t capacity_tokens = 0;
  double time_limit_s =
      10.0;           // flexsp: wall-clock limit of the whole planning call
  uint64_t seed = 0;  // strategies with randomness
  Dealing dealing = Dealing::kBalanced;  // megatron/deepspeed: see Dealing
  // When the planning call began (MakePlan sets it when it starts planning,
  // unless the caller did), so that a time-limited strategy's deadline covers
  // the whole call; unset: the strategy counts from its own start.
  std::optional<std::chrono::steady_clock::time_point> started = std::nullopt;
};

// The plan-note (and input-field) name of a setting: cp_degree,
// max_seqlen_per_dp_cp_rank, capacity_tokens ("" for kNone).
std::string_view SettingName(Setting setting);
// The fcp flag that forces it: --cp, --max-seqlen, --capacity.
std::string_view SettingFlag(Setting setting);
// Sets the PlanOptions field that forces `setting` to `value` (0 = tune).
void ForceSetting(PlanOptions& options, Setting setting, int64_t value);

// A scheduling strategy. Implementations fill micro_batches (ranks, sequences,
// comm) and may add notes; MakePlan computes every estimate and validates.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const = 0;
  // One-line description for --help.
  virtual std::string_view description() const = 0;
  // `request` is already validated. Returns micro-batches (estimates are
  // recomputed by MakePlan) or an infeasible Plan.
  virtual Plan Solve(const PlanRequest& request,
                     const PlanOptions& options) const = 0;
  // The strategy's main setting (kNone: it has none) and the values it tunes
  // it over for this batch; `fcp simulate` simulates each on its warm-up
  // batches and fixes the fastest, as a user sets it once.
  virtual Setting setting() const { return Setting::kNone; }
  virtual std::vector<int64_t> SettingCandidates(
      const PlanRequest& /*request*/) const {
    return {};
  }
};

// Names of every registered strategy, default ("fcp") first.
std::vector<std::string> StrategyNames();
// The registered strategy of that name, or nullptr. Strategies are stateless
// and live for the whole program.
const Strategy* FindStrategy(std::string_view name);

// Validates the request (throws InputError naming the field).
void ValidateRequest(const PlanRequest& request);
// The grad_sync part of it (the batch JSON parser applies it too): collective_s
// finite in [0, 1e9] s, buckets >= 1, forward_share in [0, 1].
void CheckGradientSync(const GradientSync& sync);
// The communicators part: create_s finite in [0, 1e6] s, ranks in [0, N).
void CheckCommunicatorCache(const CommunicatorCache& cache, int num_ranks);

Plan MakePlan(const PlanRequest& request, const PlanOptions& options = {});

// The plan-level estimate (ms, docs/design.md §2): the makespan of
// `micro_batches` run in order as ranks really run them. Each group starts
// when all its ranks are free (ranks meet only inside their groups, so
// nothing waits at a micro-batch boundary) and runs for its est_ms. It lies
// between the largest micro-batch est_ms and their sum; it equals the sum when
// every micro-batch's slowest group holds ranks of the next one's slowest
// group (e.g. every micro-batch spans all ranks with one group). Reads only
// the groups' est_ms; ranks must lie in [0, num_ranks). `group_start_ms`,
// when given, receives each group's start (ms), indexed [micro-batch][group].
double ListScheduleMs(
    int num_ranks, const std::vector<MicroBatchPlan>& micro_batches,
    std::vector<std::vector<double>>* group_start_ms = nullptr);

// The step estimate (ms) of micro-batches whose groups' est_ms are filled:
// the latest rank's list-schedule finish plus the exposed part of the
// gradient sync (GradientSync) on that rank: for each of the two collectives,
// one bucket plus whatever of the rest its window does not cover. A rank's
// all-gather window is the forward share of its first group, its
// reduce-scatter window the backward share of its last (an idle rank has
// neither), so work added to an idle rank lengthens the step by at most that
// work. The optimizer step is the same for every plan and is left out.
double StepMs(int num_ranks, const std::vector<MicroBatchPlan>& micro_batches,
              const GradientSync& sync);

// What StepMs adds on a rank for one of `sync`'s collectives behind a window
// of `window_ms` of the rank's work (ms): one bucket, plus whatever of the
// rest the window does not cover.
double ExposedSyncMs(const GradientSync& sync, double window_ms);

// Fixed draws of the log-normal group-time factors of PlanRequest::
// group_time_sigma: `samples` factors per group index, drawn on first use
// from a fixed seed, so that every plan scored with one object sees the same
// draws (common random numbers: two plans' difference is estimated with far
// less noise than either). Not thread-safe (one per planning call).
class GroupTimeNoise {
 public:
  // Throws InputError for sigma outside [0, 2] (group_time_sigma) or samples
  // < 1.
  explicit GroupTimeNoise(double sigma, int samples = 128);
  double sigma() const { return sigma_; }
  int samples() const { return samples_; }
  // The factor of the group-th group (in micro-batch, group order) in `sample`.
  double Factor(int sample, size_t group);
  // All samples' factors of the group-th group, contiguous; valid until the
  // next call for a higher group index.
  const double* Factors(size_t group);

 private:
  double sigma_;
  int samples_;
  std::vector<double> factors_;  // [group][sample]
};

// The mean over `noise`'s samples of StepMs (ListScheduleMs when `sync` is
// null) with every group's est_ms times its factor and, when given, the k-th
// group (in micro-batch, group order) starting delay_ms[k] after its ranks are
// free (NewCommunicatorDelaysMs). sigma 0: the exact value.
double ExpectedStepMs(int num_ranks,
                      const std::vector<MicroBatchPlan>& micro_batches,
                      const GradientSync* sync, GroupTimeNoise& noise,
                      std::span<const double> delay_ms = {});

// Per group of `micro_batches` (in micro-batch, group order): cache.create_s
// (ms) for the first group of d > 1 on a rank set that `cache` does not hold,
// 0 for every other.
std::vector<double> NewCommunicatorDelaysMs(
    const std::vector<MicroBatchPlan>& micro_batches,
    const CommunicatorCache& cache);
// The same with the cache's rank sets sorted once (SortedRankSets), for a
// caller that scores many plans against one cache.
std::set<std::vector<int>> SortedRankSets(const CommunicatorCache& cache);
std::vector<double> NewCommunicatorDelaysMs(
    const std::vector<MicroBatchPlan>& micro_batches,
    const std::set<std::vector<int>>& held, double create_s);

// Fills est_ms/mem_bytes of every group and est_ms (max over its groups) of
// every micro-batch from the cost model and actual placement, and returns
// ListScheduleMs of them: the one plan estimate every strategy, baseline
// tuning and candidate ranking uses.
double EstimateMicroBatches(const PlanRequest& request,
                            std::vector<MicroBatchPlan>& micro_batches);

// EstimateMicroBatches into plan.est_ms, plus lower_bound_ms. Used by
// MakePlan; exposed for strategies and tests that build plans by hand.
void EvaluatePlan(const PlanRequest& request, Plan& plan);

// A valid lower bound on the estimate (ListScheduleMs) of any plan for
// `request` (ms): max(total work / N + beta1, max_k min_d T({s_k}, d)).
// The makespan is at least the busiest used rank's busy time, which is at
// least the average over the M <= N used ranks, Σ_g d·T_g / M >= (work +
// beta1·Σ_g d) / M >= work / N + beta1 (every used rank is in some group);
// and at least any one group's time. docs/design.md §3. With
// `all_to_all`, T is the cheaper of ring and Ulysses all-to-all per degree, so
// the bound also holds for plans with all-to-all groups (EvaluatePlan uses it
// for such plans).
double LowerBoundMs(const PlanRequest& request, bool all_to_all = false);

// Checks the plan's structure: CheckPlanShape (fcp/plan_check.h: every
// sequence exactly once, groups of one micro-batch on disjoint ranks within
// [0, N), degree >= 1), then per-rank memory within capacity and estimates
// consistent. Returns the first violation or "".
std::string ValidatePlan(const PlanRequest& request, const Plan& plan);

}  // namespace fcp
