// The planner core of MakePlan: input check, estimates, lower bound,
// validation. The strategy table is src/strategies/registry.cc (above the
// planner and the baselines).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "fcp/check.h"
#include "fcp/cost_model.h"
#include "fcp/datasets.h"
#include "fcp/unknown_names.h"
#include "planner/run_strategy.h"

namespace fcp {
namespace {

constexpr int64_t kMaxLength = int64_t{1} << 40;
constexpr int kMaxRanks = 1 << 20;

GroupLoad LoadOf(const PlanRequest& request,
                 const std::vector<int>& sequences) {
  GroupLoad load;
  for (int i : sequences) load.Add(request.sequences[i]);
  return load;
}

double GroupTimeForPlan(const PlanRequest& request, const GroupPlan& g,
                        const GroupLoad& load) {
  if (g.comm == CommKind::kAllToAll) {
    return AllToAllGroupTimeS(
        request.cost, request.model.value_or(ModelShape{}), load, g.degree(),
        AllToAllBandwidthOnRanks(request.cost, request.cluster, g.ranks));
  }
  return GroupTimeOnRanksS(request.cost, request.cluster, load, g.ranks);
}

}  // namespace

void CheckGradientSync(const GradientSync& sync) {
  if (!std::isfinite(sync.collective_s) || sync.collective_s < 0 ||
      sync.collective_s > 1e9) {
    throw InputError("grad_sync.collective_s",
                     "must be a finite number in [0, 1e9] seconds");
  }
  if (sync.buckets < 1) throw InputError("grad_sync.buckets", "must be >= 1");
  if (!(sync.forward_share >= 0 && sync.forward_share <= 1)) {
    throw InputError("grad_sync.forward_share", "must be in [0, 1]");
  }
}

// Long because: one check per input field, in the input's order.
void ValidateRequest(const PlanRequest& request) {
  if (request.cluster.num_ranks < 1 || request.cluster.num_ranks > kMaxRanks) {
    throw InputError("cluster.ranks", "must be in [1, 2^20]");
  }
  if (request.cluster.ranks_per_node < 1) {
    throw InputError("cluster.ranks_per_node", "must be >= 1");
  }
  CheckCostModel(request.cost);
  if (request.grad_sync) CheckGradientSync(*request.grad_sync);
  if (request.communicators) {
    CheckCommunicatorCache(*request.communicators, request.cluster.num_ranks);
  }
  if (!std::isfinite(request.group_time_sigma) ||
      request.group_time_sigma < 0 ||
      request.group_time_sigma > kMaxGroupTimeSigma) {
    throw InputError("group_time_sigma", "must be a finite number in [0, 2]");
  }
  if (request.sequences.empty())
    throw InputError("sequences", "must not be empty");
  if (request.sequences.size() >
      static_cast<size_t>(std::numeric_limits<int>::max() / 2)) {
    throw InputError("sequences", "too many sequences");
  }
  for (size_t i = 0; i < request.sequences.size(); ++i) {
    const Sequence& s = request.sequences[i];
    // The field name is built only for an error (this loop runs on every plan).
    auto field = [i] { return "sequences[" + std::to_string(i) + "]"; };
    if (s.length_tokens < 1 || s.length_tokens > kMaxLength) {
      throw InputError(field() + ".length", "must be in [1, 2^40]");
    }
    if (!std::isfinite(s.eta) || s.eta < 0 || s.eta > 1) {
      throw InputError(field() + ".eta", "must be in [0, 1]");
    }
    if (s.vision_tokens < 0 || s.vision_tokens > s.length_tokens) {
      throw InputError(field() + ".vision_tokens", "must be in [0, length]");
    }
  }
  // Numeric range (issue 8): per-rank memory is reported as int64 bytes, and
  // every time the planner computes must stay finite. A bound on any plan's
  // estimate: K micro-batches, each at most the whole batch on one rank plus
  // its communication at the slowest bandwidth. Keep it (times 1000 for ms)
  // far below DBL_MAX, leaving room for the planner's products with degrees.
  if (request.cost.mem_capacity > 0x1p62) {
    throw InputError("cost_model.mem_capacity", "must be <= 2^62 bytes");
  }
  const CostModel& cm = request.cost;
  double sum_tokens = 0, sum_attn = 0;
  for (const Sequence& s : request.sequences) {
    const double len = static_cast<double>(s.length_tokens);
    sum_tokens += len;
    sum_attn += (1.0 + s.eta) * len * len;
  }
  // A group's memory is reported as int64 bytes too, also for a plan read from
  // a file that ignores the capacity: the whole batch on one rank must fit
  // (found by plan_file_fuzz: mem_per_token 4.6e17).
  if (!(cm.mem_static + cm.mem_per_token * sum_tokens <= 0x1p62)) {
    throw InputError("cost_model.mem_per_token",
                     "the batch on one rank (mem_static + mem_per_token × its "
                     "tokens) must be <= 2^62 bytes");
  }
  const double worst_s =
      cm.alpha1 * (sum_attn + 2.0 * cm.attn_overhead_tokens * sum_tokens) +
      (cm.alpha2 + cm.alpha2_vision) * sum_tokens + cm.beta1 +
      cm.alpha3 * sum_tokens / std::min(cm.bw_intra_node, cm.bw_inter_node) +
      cm.beta2 +
      (std::max(cm.gamma_intra, cm.gamma_inter) + cm.gamma_serial) *
          request.cluster.num_ranks;
  // GroupTimeS multiplies alpha3 · Σs by (d - 1) before dividing by d and the
  // bandwidth: that intermediate must stay finite too (found by planner_fuzz).
  const double worst_product =
      cm.alpha3 * sum_tokens * static_cast<double>(request.cluster.num_ranks);
  // The all-to-all costs (deepspeed, flexsp, the bound) work in seconds per
  // byte, up to N / bw: with a denormal bandwidth that is inf, and 0 · inf
  // is NaN even when alpha3 = 0 (found by baselines_fuzz).
  const double worst_s_per_byte =
      static_cast<double>(request.cluster.num_ranks) /
      std::min(cm.bw_intra_node, cm.bw_inter_node);
  // At the other end, a positive time coefficient so small that products with
  // token counts leave the normal range (subnormal numbers keep a few bits)
  // makes estimates and the lower bound disagree by more than rounding
  // (found by planner_fuzz: alpha2 = 5e-324).
  for (const double c :
       {cm.alpha1, cm.alpha2, cm.beta1, cm.alpha3, cm.beta2, cm.gamma_intra,
        cm.gamma_inter, cm.gamma_serial, cm.alpha3_home, cm.alpha2_vision}) {
    if (c > 0 && c < 1e-280) {
      throw InputError(
          "cost_model",
          "a positive time coefficient below 1e-280 (times would underflow)");
    }
  }
  if (!(1000.0 * static_cast<double>(request.sequences.size()) * worst_s <=
        1e300) ||
      !(worst_product <= 1e300) || !(worst_s_per_byte <= 1e300)) {
    throw InputError(
        "cost_model",
        "coefficients too large for these sequence lengths (times overflow)");
  }
}

double LowerBoundMs(const PlanRequest& request, bool all_to_all) {
  const CostModel& cm = request.cost;
  const Cluster& cluster = request.cluster;
  // Every sequence's compute must run somewhere (at least its rank-seconds at
  // d = 1, h's term included); the overlap term and the communication are
  // >= 0, and every micro-batch pays beta1 at least once.
  double work = 0;
  for (const Sequence& seq : request.sequences)
    work += WorkS(cm, GroupLoad::Of(seq));
  // T is monotone in a group's contents, so no group holding sequence k beats
  // f(k) = min_d T({k}, d), and f grows with length and with eta: the maximum
  // of f is reached at the longest sequence of some eta value. Batches have
  // few distinct eta values, so those candidates are found in one O(K) pass;
  // with many values (or an infeasible candidate) the scan below sorts.
  const ModelShape shape = request.model.value_or(ModelShape{});
  auto bound_of = [&](const GroupLoad& load, int64_t d_min) {
    double best = std::numeric_limits<double>::infinity();
    for (int64_t d = d_min; d <= cluster.num_ranks; ++d) {
      best = std::min(best,
                      GroupTimeBestS(cm, cluster, load, static_cast<int>(d)));
      if (all_to_all) {
        best = std::min(
            best, AllToAllGroupTimeS(cm, shape, load, static_cast<int>(d),
                                     AllToAllBandwidthBound(
                                         cm, cluster, static_cast<int>(d))));
      }
    }
    return best;
  };
  constexpr size_t kMaxEtaCandidates = 64;
  std::vector<int> candidates;  // per distinct eta, its longest sequence
  for (size_t i = 0;
       i < request.sequences.size() && candidates.size() <= kMaxEtaCandidates;
       ++i) {
    const Sequence& seq = request.sequences[i];
    auto it = std::find_if(candidates.begin(), candidates.end(), [&](int c) {
      return request.sequences[c].eta == seq.eta;
    });
    if (it == candidates.end())
      candidates.push_back(static_cast<int>(i));
    else if (request.sequences[*it].length_tokens < seq.length_tokens)
      *it = static_cast<int>(i);
  }
  double longest = 0;
  bool all_feasible = candidates.size() <= kMaxEtaCandidates;
  for (size_t c = 0; all_feasible && c < candidates.size(); ++c) {
    const GroupLoad load = GroupLoad::Of(request.sequences[candidates[c]]);
    const int64_t d_min = MinDegree(cm, load);
    all_feasible = d_min <= cluster.num_ranks;
    if (all_feasible) longest = std::max(longest, bound_of(load, d_min));
  }
  if (all_feasible)
    return 1000.0 * std::max(work / cluster.num_ranks + cm.beta1, longest);
  // Scanning by length descending, a sequence whose eta does not exceed that
  // of one already scanned (which is at least as long) cannot raise the
  // maximum; an infeasible sequence gives no bound.
  std::vector<int> order(request.sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& x = request.sequences[a];
    const auto& y = request.sequences[b];
    if (x.length_tokens != y.length_tokens)
      return x.length_tokens > y.length_tokens;
    return x.eta != y.eta ? x.eta > y.eta : a < b;
  });
  longest = 0;
  double max_eta_scanned = -1;
  for (int i : order) {
    const Sequence& seq = request.sequences[i];
    if (seq.eta <= max_eta_scanned) continue;
    const GroupLoad load = GroupLoad::Of(seq);
    const int64_t d_min = MinDegree(cm, load);
    if (d_min > cluster.num_ranks) continue;  // infeasible: no bound from it
    max_eta_scanned = seq.eta;
    longest = std::max(longest, bound_of(load, d_min));
  }
  return 1000.0 * std::max(work / cluster.num_ranks + cm.beta1, longest);
}

std::string_view SettingName(Setting setting) {
  switch (setting) {
    case Setting::kCpDegree:
      return "cp_degree";
    case Setting::kMaxSeqlenPerRank:
      return "max_seqlen_per_dp_cp_rank";
    case Setting::kCapacityTokens:
      return "capacity_tokens";
    case Setting::kNone:
      break;
  }
  return "";
}

std::string_view SettingFlag(Setting setting) {
  switch (setting) {
    case Setting::kCpDegree:
      return "--cp";
    case Setting::kMaxSeqlenPerRank:
      return "--max-seqlen";
    case Setting::kCapacityTokens:
      return "--capacity";
    case Setting::kNone:
      break;
  }
  return "";
}

void ForceSetting(PlanOptions& options, Setting setting, int64_t value) {
  switch (setting) {
    case Setting::kCpDegree:
      options.cp_degree = static_cast<int>(
          std::clamp<int64_t>(value, std::numeric_limits<int>::min(),
                              std::numeric_limits<int>::max()));
      break;
    case Setting::kMaxSeqlenPerRank:
      options.max_seqlen_per_rank = value;
      break;
    case Setting::kCapacityTokens:
      options.capacity_tokens = value;
      break;
    case Setting::kNone:
      break;
  }
}

namespace {

// The list schedule behind ListScheduleMs, StepMs and ExpectedStepMs: the
// groups run in order, each starting when all its ranks are free plus
// delay(k) ms and running for duration(group, k) ms, k = the group's index in
// (micro-batch, group) order. `free_at` (one zero per rank) ends as each
// rank's finish time; on_group(micro_batch, group, start_ms, duration_ms)
// sees every group as it is scheduled.
template <class Duration, class Delay, class OnGroup>
void RunListSchedule(const std::vector<MicroBatchPlan>& micro_batches,
                     std::vector<double>& free_at, Duration&& duration,
                     Delay&& delay, OnGroup&& on_group) {
  size_t k = 0;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    for (const GroupPlan& g : micro_batches[m].groups) {
      double start = 0;
      for (int r : g.ranks) start = std::max(start, free_at[r]);
      start += delay(k);
      const double ms = duration(g, k++);
      on_group(m, g, start, ms);
      for (int r : g.ranks) free_at[r] = start + ms;
    }
  }
}

double EstMs(const GroupPlan& g, size_t) { return g.est_ms; }
double NoDelay(size_t) { return 0; }

// A rank's figure in StepMs from its finish time and its first and last
// group times (ms; first -1: none), or its finish time without `sync`.
double RankStepMs(const GradientSync* sync, double free_ms, double first_ms,
                  double last_ms) {
  if (!sync) return free_ms;
  return ExposedSyncMs(*sync, sync->forward_share * std::max(0.0, first_ms)) +
         free_ms + ExposedSyncMs(*sync, (1 - sync->forward_share) * last_ms);
}

// StepMs with each group running for duration(group, k) ms after delay(k)
// (RunListSchedule); without `sync`, the makespan. `scratch` holds three
// per-rank vectors (reused across calls).
template <class Duration, class Delay>
double StepWith(int num_ranks, const std::vector<MicroBatchPlan>& micro_batches,
                const GradientSync* sync, Duration&& duration, Delay&& delay,
                std::vector<double> (&scratch)[3]) {
  const size_t n = static_cast<size_t>(std::max(0, num_ranks));
  std::vector<double>& free_at = scratch[0];
  std::vector<double>& last_group_ms = scratch[1];
  std::vector<double>& first_group_ms = scratch[2];
  free_at.assign(n, 0.0);
  if (sync) {
    last_group_ms.assign(n, 0.0);
    first_group_ms.assign(n, -1.0);
  }
  RunListSchedule(micro_batches, free_at, duration, delay,
                  [&](size_t, const GroupPlan& g, double, double ms) {
                    if (!sync) return;
                    for (int r : g.ranks) {
                      last_group_ms[r] = ms;
                      if (first_group_ms[r] < 0) first_group_ms[r] = ms;
                    }
                  });
  if (free_at.empty()) return 0;
  if (!sync) return *std::max_element(free_at.begin(), free_at.end());
  // Each rank waits for the all-gather behind its own first forward and
  // for the reduce-scatter behind its own last backward (an idle rank hides
  // neither); the step ends with the latest rank. Work added to an idle rank
  // thus lengthens the step by at most that work (the simulator's rule).
  double step_ms = 0;
  for (size_t r = 0; r < n; ++r) {
    step_ms = std::max(step_ms, RankStepMs(sync, free_at[r], first_group_ms[r],
                                           last_group_ms[r]));
  }
  return step_ms;
}

}  // namespace

double ListScheduleMs(int num_ranks,
                      const std::vector<MicroBatchPlan>& micro_batches,
                      std::vector<std::vector<double>>* group_start_ms) {
  std::vector<double> free_at(std::max(0, num_ranks), 0.0);
  if (group_start_ms) group_start_ms->assign(micro_batches.size(), {});
  RunListSchedule(micro_batches, free_at, EstMs, NoDelay,
                  [&](size_t m, const GroupPlan&, double start, double) {
                    if (group_start_ms) (*group_start_ms)[m].push_back(start);
                  });
  return free_at.empty() ? 0.0
                         : *std::max_element(free_at.begin(), free_at.end());
}

double ExposedSyncMs(const GradientSync& sync, double window_ms) {
  const double total_ms = 1000.0 * sync.collective_s;
  const double bucket_ms = total_ms / sync.buckets;
  return bucket_ms + std::max(0.0, total_ms - bucket_ms - window_ms);
}

double StepMs(int num_ranks, const std::vector<MicroBatchPlan>& micro_batches,
              const GradientSync& sync) {
  std::vector<double> scratch[3];
  return StepWith(num_ranks, micro_batches, &sync, EstMs, NoDelay, scratch);
}

void CheckCommunicatorCache(const CommunicatorCache& cache, int num_ranks) {
  if (!std::isfinite(cache.create_s) || cache.create_s < 0 ||
      cache.create_s > 1e6) {
    throw InputError("communicators.create_s",
                     "must be a finite number in [0, 1e6] seconds");
  }
  for (size_t i = 0; i < cache.existing.size(); ++i) {
    const std::string set_field =
        "communicators.existing[" + std::to_string(i) + "]";
    if (cache.existing[i].empty())
      throw InputError(set_field, "must hold at least one rank");
    std::vector<int> sorted = cache.existing[i];
    std::sort(sorted.begin(), sorted.end());
    if (const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
        dup != sorted.end()) {
      throw InputError(set_field,
                       "rank " + std::to_string(*dup) + " is listed twice");
    }
    for (size_t j = 0; j < cache.existing[i].size(); ++j) {
      const int r = cache.existing[i][j];
      if (r < 0 || r >= num_ranks) {
        throw InputError(
            "communicators.existing[" + std::to_string(i) + "][" +
                std::to_string(j) + "]",
            "rank must be in [0, " + std::to_string(num_ranks) + ")");
      }
    }
  }
}

std::set<std::vector<int>> SortedRankSets(const CommunicatorCache& cache) {
  std::set<std::vector<int>> held;
  for (std::vector<int> ranks : cache.existing) {
    std::sort(ranks.begin(), ranks.end());
    held.insert(std::move(ranks));
  }
  return held;
}

std::vector<double> NewCommunicatorDelaysMs(
    const std::vector<MicroBatchPlan>& micro_batches,
    const std::set<std::vector<int>>& held, double create_s) {
  std::set<std::vector<int>> created;  // by earlier groups of this plan
  std::vector<double> delays;
  for (const MicroBatchPlan& mb : micro_batches) {
    for (const GroupPlan& g : mb.groups) {
      double ms = 0;
      if (g.ranks.size() > 1) {
        std::vector<int> key = g.ranks;
        std::sort(key.begin(), key.end());
        if (!held.count(key) && created.insert(std::move(key)).second)
          ms = 1000.0 * create_s;
      }
      delays.push_back(ms);
    }
  }
  return delays;
}

std::vector<double> NewCommunicatorDelaysMs(
    const std::vector<MicroBatchPlan>& micro_batches,
    const CommunicatorCache& cache) {
  return NewCommunicatorDelaysMs(micro_batches, SortedRankSets(cache),
                                 cache.create_s);
}

GroupTimeNoise::GroupTimeNoise(double sigma, int samples)
    : sigma_(sigma), samples_(samples) {
  if (!std::isfinite(sigma) || sigma < 0 || sigma > kMaxGroupTimeSigma) {
    throw InputError("group_time_sigma", "must be a finite number in [0, 2]");
  }
  if (samples < 1) throw InputError("samples", "must be >= 1");
}

const double* GroupTimeNoise::Factors(size_t group) {
  // Draws are made per group index, all samples at once, on first use: every
  // plan scored with this object sees the same factors for its k-th group.
  const size_t per_group = static_cast<size_t>(samples_);
  while (factors_.size() <= group * per_group) {
    const size_t k = factors_.size() / per_group;
    DeterministicRng rng(0x67726f7570ULL + k);
    for (int s = 0; s < samples_; ++s) {
      factors_.push_back(
          std::exp(sigma_ * rng.Normal() - 0.5 * sigma_ * sigma_));
    }
  }
  return &factors_[group * per_group];
}

double GroupTimeNoise::Factor(int sample, size_t group) {
  return Factors(group)[sample];
}

namespace {

// The delay (ms) before the k-th group: delay_ms[k], 0 beyond its end.
double DelayAt(std::span<const double> delay_ms, size_t k) {
  return k < delay_ms.size() ? delay_ms[k] : 0.0;
}

// The mean of every draw's step (ms), summed in draw order.
double MeanStepMs(const std::vector<double>& step_ms) {
  return std::accumulate(step_ms.begin(), step_ms.end(), 0.0) /
         static_cast<double>(step_ms.size());
}

// Whether no rank of `n` is in two groups of the micro-batch; `any_idle`
// then tells whether some rank is in none.
bool DisjointGroups(const MicroBatchPlan& mb, size_t n, bool* any_idle) {
  std::vector<char> used(n, 0);
  for (const GroupPlan& g : mb.groups) {
    for (int r : g.ranks) {
      if (used[static_cast<size_t>(r)]) return false;
      used[static_cast<size_t>(r)] = 1;
    }
  }
  *any_idle = std::find(used.begin(), used.end(), 0) != used.end();
  return true;
}

// ExpectedStepAcrossDraws for one micro-batch of disjoint groups: every rank
// of a group has the same figures (free from 0, its one group first and
// last), so each group is one term per draw, and an idle rank one more.
double OneMicroBatchExpectedStepMs(const MicroBatchPlan& mb, bool any_idle,
                                   const GradientSync* sync,
                                   GroupTimeNoise& noise,
                                   std::span<const double> delay_ms) {
  const size_t samples = static_cast<size_t>(noise.samples());
  const double idle_ms = any_idle ? RankStepMs(sync, 0.0, -1.0, 0.0) : 0.0;
  std::vector<double> step_ms(samples, idle_ms);
  for (size_t k = 0; k < mb.groups.size(); ++k) {
    const GroupPlan& g = mb.groups[k];
    if (g.ranks.empty()) continue;
    const double start = DelayAt(delay_ms, k);  // every rank is free at 0
    const double* factors = noise.Factors(k);
    for (size_t s = 0; s < samples; ++s) {
      const double ms = g.est_ms * factors[s];
      step_ms[s] = std::max(step_ms[s], RankStepMs(sync, start + ms, ms, ms));
    }
  }
  return MeanStepMs(step_ms);
}

// ExpectedStepMs under noise: the list schedule of every draw at once, each
// rank's free time (and first and last group times) held for all draws side
// by side ([rank · S + sample]), so a group's draws are one pass over
// contiguous memory (a schedule per draw walked the plan S times). Every
// draw's figures are computed by the same operations in the same order as
// StepWith's, and summed in draw order: the same value.
double ExpectedStepAcrossDraws(int num_ranks,
                               const std::vector<MicroBatchPlan>& micro_batches,
                               const GradientSync* sync, GroupTimeNoise& noise,
                               std::span<const double> delay_ms) {
  const size_t n = static_cast<size_t>(std::max(0, num_ranks));
  const size_t samples = static_cast<size_t>(noise.samples());
  if (n == 0) return 0;
  bool any_idle = false;
  if (micro_batches.size() == 1 &&
      DisjointGroups(micro_batches[0], n, &any_idle)) {
    return OneMicroBatchExpectedStepMs(micro_batches[0], any_idle, sync, noise,
                                       delay_ms);
  }
  std::vector<double> free_at(n * samples, 0.0), start(samples), ms(samples);
  std::vector<double> first_ms, last_ms;
  if (sync) {
    first_ms.assign(n * samples, -1.0);
    last_ms.assign(n * samples, 0.0);
  }
  size_t k = 0;
  for (const MicroBatchPlan& mb : micro_batches) {
    for (const GroupPlan& g : mb.groups) {
      const double delay = DelayAt(delay_ms, k);
      const double* factors = noise.Factors(k++);
      std::fill(start.begin(), start.end(), 0.0);
      for (int r : g.ranks) {
        const double* free_r = &free_at[static_cast<size_t>(r) * samples];
        for (size_t s = 0; s < samples; ++s)
          start[s] = std::max(start[s], free_r[s]);
      }
      for (size_t s = 0; s < samples; ++s) {
        start[s] += delay;
        ms[s] = g.est_ms * factors[s];
      }
      for (int r : g.ranks) {
        const size_t at = static_cast<size_t>(r) * samples;
        for (size_t s = 0; s < samples; ++s) free_at[at + s] = start[s] + ms[s];
        if (!sync) continue;
        for (size_t s = 0; s < samples; ++s) {
          last_ms[at + s] = ms[s];
          if (first_ms[at + s] < 0) first_ms[at + s] = ms[s];
        }
      }
    }
  }
  std::vector<double> step_ms(samples, 0.0);
  for (size_t r = 0; r < n; ++r) {
    for (size_t s = 0; s < samples; ++s) {
      const size_t i = r * samples + s;
      step_ms[s] =
          std::max(step_ms[s],
                   sync ? RankStepMs(sync, free_at[i], first_ms[i], last_ms[i])
                        : free_at[i]);
    }
  }
  return MeanStepMs(step_ms);
}

}  // namespace

double ExpectedStepMs(int num_ranks,
                      const std::vector<MicroBatchPlan>& micro_batches,
                      const GradientSync* sync, GroupTimeNoise& noise,
                      std::span<const double> delay_ms) {
  if (noise.sigma() > 0) {
    return ExpectedStepAcrossDraws(num_ranks, micro_batches, sync, noise,
                                   delay_ms);
  }
  std::vector<double> scratch[3];
  auto delay = [&](size_t k) { return DelayAt(delay_ms, k); };
  return StepWith(num_ranks, micro_batches, sync, EstMs, delay, scratch);
}

double EstimateMicroBatches(const PlanRequest& request,
                            std::vector<MicroBatchPlan>& micro_batches) {
  for (MicroBatchPlan& mb : micro_batches) {
    mb.est_ms = 0;
    for (GroupPlan& g : mb.groups) {
      const GroupLoad load = LoadOf(request, g.sequences);
      g.est_ms = 1000.0 * GroupTimeForPlan(request, g, load);
      g.mem_bytes = static_cast<int64_t>(std::ceil(
          GroupMemBytes(request.cost, load, std::max(1, g.degree()))));
      mb.est_ms = std::max(mb.est_ms, g.est_ms);
    }
  }
  return ListScheduleMs(request.cluster.num_ranks, micro_batches);
}

void EvaluatePlan(const PlanRequest& request, Plan& plan) {
  plan.num_ranks = request.cluster.num_ranks;
  plan.est_ms = EstimateMicroBatches(request, plan.micro_batches);
  bool all_to_all = false;
  for (const MicroBatchPlan& mb : plan.micro_batches) {
    for (const GroupPlan& g : mb.groups)
      all_to_all |= g.comm == CommKind::kAllToAll;
  }
  plan.lower_bound_ms = LowerBoundMs(request, all_to_all);
}

namespace planner {

Plan RunStrategy(const Strategy& strategy_ref, const PlanRequest& request,
                 const PlanOptions& options) {
  const Strategy* strategy = &strategy_ref;
  if (options.cp_degree < 0) throw InputError("cp_degree", "must be >= 0");
  if (options.max_seqlen_per_rank < 0) {
    throw InputError("max_seqlen_per_dp_cp_rank",
                     "must be >= 0 tokens (0 = tune)");
  }
  if (options.capacity_tokens < 0) {
    throw InputError("capacity_tokens", "must be >= 0 tokens (0 = tune)");
  }
  if (!(options.time_limit_s > 0) || !std::isfinite(options.time_limit_s)) {
    throw InputError("time_limit_s", "must be a finite number > 0");
  }
  ValidateRequest(request);

  const auto start = std::chrono::steady_clock::now();
  Plan plan;
  // A sequence that cannot fit even on all N ranks makes the batch infeasible.
  for (size_t i = 0; i < request.sequences.size(); ++i) {
    const int64_t d_min =
        MinDegree(request.cost, GroupLoad::Of(request.sequences[i]));
    if (d_min > request.cluster.num_ranks) {
      plan.status = PlanStatus::kInfeasible;
      plan.infeasible_sequence = static_cast<int>(i);
      plan.message = "sequences[" + std::to_string(i) + "]: " +
                     std::to_string(request.sequences[i].length_tokens) +
                     " tokens need at least " + std::to_string(d_min) +
                     " ranks for memory, the cluster has " +
                     std::to_string(request.cluster.num_ranks);
      break;
    }
  }
  if (plan.status == PlanStatus::kOk) {
    PlanOptions timed = options;
    if (!timed.started) timed.started = start;
    plan = strategy->Solve(request, timed);
  }
  plan.strategy = std::string(strategy->name());
  if (plan.status == PlanStatus::kOk) {
    EvaluatePlan(request, plan);
  } else {
    plan.micro_batches.clear();
    plan.num_ranks = request.cluster.num_ranks;
    plan.lower_bound_ms = LowerBoundMs(request);
  }
  if (plan.status == PlanStatus::kOk) {
    const std::string violation = ValidatePlan(request, plan);
    if (!violation.empty()) {
      std::fprintf(stderr, "fcp: strategy %s produced an invalid plan: %s\n",
                   plan.strategy.c_str(), violation.c_str());
      FCP_CHECK(violation.empty());
    }
  }
  // The whole call, validation included (what a time limit covers).
  plan.solver_ms = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return plan;
}

}  // namespace planner

Plan MakePlan(const PlanRequest& request, const PlanOptions& options) {
  const Strategy* strategy = FindStrategy(options.strategy);
  if (!strategy)
    throw InputError("strategy", UnknownStrategyMessage(options.strategy));
  return planner::RunStrategy(*strategy, request, options);
}

}  // namespace fcp
