// The FCP strategies: `fcp-paper` (docs/design.md §3 verbatim) and `fcp`
// (ours).
#include "planner/fcp_strategies.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "fcp/cost_model.h"
#include "planner/balanced_static.h"
#include "planner/bfd.h"
#include "planner/lanes.h"
#include "planner/layout_scorer.h"
#include "planner/microbatch.h"
#include "planner/realize.h"
#include "planner/refine.h"

namespace fcp::planner {
namespace {

// Above this many DP cells (K'·N²) Algorithm 1 would take seconds; the fast
// allocator returns the same degrees (both canonical, equal makespan: a
// property test), so fcp-paper switches to it and says so in the notes.
constexpr double kMaxDpCells = 2e8;

std::string FormatMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", ms);
  return buf;
}

// A ring moves every K/V block d - 1 hops, so a rank sends the whole group's
// K/V traffic whatever d is; across nodes a long sequence's ring is bound by
// the inter-node bandwidth (docs/planner/vs-static.md: 103k tokens on h100-8x8
// stay at ~1.9 s simulated from d = 32 on). An all-to-all (Ulysses) sends 1/d
// of it but cannot overlap it with attention. Each placed group of d > 1
// therefore runs whichever of the two the cost model finds faster on its ranks;
// the model shape is needed for the head counts. Returns the number of groups
// switched to all-to-all.
int UseAllToAllWhereFaster(const PlanRequest& request, Plan& plan) {
  if (!request.model || request.model->q_heads <= 0 ||
      request.model->kv_heads <= 0)
    return 0;
  int switched = 0;
  for (MicroBatchPlan& mb : plan.micro_batches) {
    for (GroupPlan& g : mb.groups) {
      if (!AllToAllAllowed(&*request.model, g.degree()) ||
          g.comm != CommKind::kRing)
        continue;
      GroupLoad load;
      for (int i : g.sequences) load.Add(request.sequences[i]);
      const double ring =
          GroupTimeOnRanksS(request.cost, request.cluster, load, g.ranks);
      const double a2a = AllToAllGroupTimeS(
          request.cost, *request.model, load, g.degree(),
          AllToAllBandwidthOnRanks(request.cost, request.cluster, g.ranks));
      if (a2a < ring * (1 - 1e-12)) {
        g.comm = CommKind::kAllToAll;
        ++switched;
      }
    }
  }
  return switched;
}

// What fcp minimises over its candidates (ms): the step estimate (StepMs)
// when the request gives the gradient sync, else the plan estimate; groups on
// rank sets without a communicator start its creation time later when the
// request gives the communicators (NewCommunicatorDelaysMs); with
// group_time_sigma > 0, the expectation over the noise's fixed draws
// (ExpectedStepMs). Reads the groups' est_ms (filled by EstimateMicroBatches).
class Scorer {
 public:
  explicit Scorer(const PlanRequest& request)
      : request_(request),
        noise_(request.group_time_sigma),
        charge_communicators_(request.communicators &&
                              request.communicators->create_s > 0),
        held_(charge_communicators_ ? SortedRankSets(*request.communicators)
                                    : std::set<std::vector<int>>{}) {}
  double operator()(const Plan& plan) {
    if (noise_.sigma() > 0 || charge_communicators_) {
      const std::vector<double> delays =
          charge_communicators_
              ? NewCommunicatorDelaysMs(plan.micro_batches, held_,
                                        request_.communicators->create_s)
              : std::vector<double>{};
      return ExpectedStepMs(request_.cluster.num_ranks, plan.micro_batches,
                            request_.grad_sync ? &*request_.grad_sync : nullptr,
                            noise_, delays);
    }
    return request_.grad_sync ? StepMs(request_.cluster.num_ranks,
                                       plan.micro_batches, *request_.grad_sync)
                              : plan.est_ms;
  }
  // A LayoutScorer of `micro_batches` that ranks layouts as this score does.
  LayoutScorer Layouts(const std::vector<MicroBatchPlan>& micro_batches) {
    return LayoutScorer(
        request_.cluster.num_ranks,
        request_.grad_sync ? &*request_.grad_sync : nullptr, &noise_,
        charge_communicators_ ? &held_ : nullptr,
        charge_communicators_ ? request_.communicators->create_s : 0.0,
        micro_batches);
  }
  // Whether a score can differ from the plan estimate.
  bool BeyondMakespan() const {
    return request_.grad_sync || noise_.sigma() > 0 || charge_communicators_;
  }
  // The rank sets with a communicator, when their creation is charged.
  const std::set<std::vector<int>>& held() const { return held_; }

 private:
  const PlanRequest& request_;
  GroupTimeNoise noise_;
  bool charge_communicators_;
  std::set<std::vector<int>> held_;  // the request's communicators, sorted once
};

// UseAllToAllWhereFaster on `plan`, which leaves with its estimates filled
// (`estimated`: they already are, for the plan as given). Faster groups never
// lengthen the makespan but can shorten the windows that hide the gradient
// sync, or their noise can outweigh the gain, so ranked by step time the
// all-ring plan is kept when it scores better. Returns the number of groups
// switched (0 when none or all ring kept).
int SwitchWhereFaster(const PlanRequest& request, Scorer& score, Plan& plan,
                      bool estimated) {
  std::optional<Plan> all_ring;  // copied only when it can win (planning time)
  if (score.BeyondMakespan()) {
    all_ring = plan;
    if (!estimated)
      all_ring->est_ms = EstimateMicroBatches(request, all_ring->micro_batches);
  }
  const int switched = UseAllToAllWhereFaster(request, plan);
  if (switched || !estimated)
    plan.est_ms = EstimateMicroBatches(request, plan.micro_batches);
  if (switched && all_ring && score(*all_ring) < score(plan)) {
    plan = std::move(*all_ring);
    return 0;
  }
  return switched;
}

// A candidate built from micro-batches alone: all-to-all where faster
// (SwitchWhereFaster), then scored; when it scores below `best_score_ms`
// (updated), or above it by less than `tie` (a fraction; an exact tie does
// not count), its micro-batches and estimate replace `plan`'s. Returns the
// number of groups switched to all-to-all when it replaced `plan`.
std::optional<int> KeepIfBetter(const PlanRequest& request, Scorer& score,
                                Plan candidate, Plan& plan,
                                double& best_score_ms, double tie = 0) {
  const int switched =
      SwitchWhereFaster(request, score, candidate, /*estimated=*/false);
  const double candidate_score_ms = score(candidate);
  const bool better = candidate_score_ms < best_score_ms * (1 - 1e-12);
  const bool near_tie = candidate_score_ms > best_score_ms * (1 + 1e-12) &&
                        candidate_score_ms < best_score_ms * (1 + tie);
  if (!better && !near_tie) return std::nullopt;
  best_score_ms = candidate_score_ms;
  plan.micro_batches = std::move(candidate.micro_batches);
  plan.est_ms = candidate.est_ms;
  return switched;
}

// The batch with each sequence whose single-rank time is at least a rank's
// share of the batch's alone and the others in one group; fewer than two
// groups when none or every sequence is that heavy.
std::vector<std::vector<int>> HeavyAlone(const PlanRequest& request) {
  std::vector<double> single_s;
  for (const Sequence& s : request.sequences) {
    single_s.push_back(
        GroupTimeS(request.cost, GroupLoad::Of(s), 1, Link::kIntraNode));
  }
  const double share_s =
      std::accumulate(single_s.begin(), single_s.end(), 0.0) /
      request.cluster.num_ranks;
  std::vector<std::vector<int>> groups;
  std::vector<int> light;
  for (size_t k = 0; k < single_s.size(); ++k) {
    if (single_s[k] >= share_s) {
      groups.push_back({static_cast<int>(k)});
    } else {
      light.push_back(static_cast<int>(k));
    }
  }
  if (!light.empty()) groups.push_back(std::move(light));
  return groups;
}

// N is not a multiple of the node size: the last node has fewer ranks.
bool LastNodePartial(const Cluster& cluster) {
  return cluster.num_ranks % cluster.ranks_per_node != 0;
}

constexpr int kLocalSearchTrials = 48;
// A static plan scored less than this fraction above the plan so far
// replaces it: the estimate cannot order plans whose different groups set
// their makespans that close (group estimates err by about 1 %,
// kPolishMinGainPerRise), and every runtime runs the static plan (issue 32:
// on commoncrawl, H100, gbs 2,048, a one-micro-batch plan 0.003 % below the
// static one in fcp's model made the run 0.19 % slower, simulated). An exact
// tie does not count: the same group, or the gradient sync, sets both
// scores, and there fcp's own plan simulated no slower (issue 32: three
// sync-bound cases of the study, where static plans tied with fcp-ring's
// ran 0.05 % slower).
constexpr double kStaticTie = 1e-4;
// LaneGroupings' third dual grouping opens lanes of d > 1 at even degrees:
// the free one opens each long sequence at the fewest ranks that meet the
// target, often odd degrees with no headroom for a second long sequence and
// no all-to-all (issue 32: Ascend go-src, 64 ranks, gbs 1,024).
constexpr int kLaneMultipleOf = 2;
// fcp decides degrees and placement together (realize.h).
constexpr RealizeOptions kFcpRealize{.topology_aware = true};
// How many micro-batches fewer than the BFD split fcp tries.
constexpr int kMaxFewerMicroBatches = 2;
// Trials PolishLanes may spend per start (TryPolishedLanes; lanes.h).
constexpr int kPolishTrials = 1000;
// The most lanes whose rank sets TryPolishedLanes deals afresh: a fresh deal
// of 8,192 sequences onto ~1,000 lanes cost 4 % of planning at 8,192 /
// 1,024 (6 M instructions) and changed no plan of the study, whose winners
// have at most 64 lanes.
constexpr size_t kFreshDealMaxLanes = 64;
// The most lanes whose degrees TryPolishedLanes reshapes (ReshapeLanes): a
// round deals every sequence once per neighbour, and there are about twice
// as many neighbours as the square of the lanes' distinct degrees. Without
// this limit the planning benchmark's plans (github, 26-33 lanes at 512 /
// 64, 400-490 at 8,192 / 1,024) took 6.8 M -> 13.3 M and 157 M -> 220 M
// instructions and none of the 8 changed.
constexpr size_t kReshapeMaxLanes = 16;
// The most sequences whose balanced static plans fcp polishes as lanes
// (TryStaticLanes), and how many of those plans, the best scored as dealt,
// it polishes: on heuristics_test's two random samples (3,000 smaller and
// 1,000 wider batches), reshaped with the winner's settings, the best one
// lowered fcp's score on 15 and 18 batches, the best two on 17 and 20, every
// one on 20 and 23.
constexpr int kStaticLanesMaxSequences = 256;
constexpr size_t kStaticLanesPolished = 2;
// How their lanes are reshaped: on at most 64 sequences 2 neighbours
// polished per round instead of the winner's 8, and a tenth of its deal
// search's pricings. With the winner's settings fcp-ring took 74.8 M
// instructions to plan 64 msrvtt sequences on 64 Ascend ranks instead of
// 37.1 M (14.9 M without these candidates), and lowered fcp's score on 20
// batches of the wider sample instead of 8, by at most 20.5 % instead of
// 10.3 % (docs/planner/speed.md).
constexpr ReshapeOptions kStaticLanesReshaping{
    .small_batch_polished_per_round = 2,
    .search_pricings = 2000,
    .trial_search_pricings = 200};

// The paper's plan (docs/design.md §3 verbatim): BFD micro-batch split and
// grouping, then Algorithm 1, on the paper's terms (Eq. 8-9: the v2 terms are
// zeroed for planning; estimates are made in the given model by the caller).
// With `allow_dp` false, or when the DP would be too large, the exact fast
// allocator gives the same degrees (*used_fast says whether it was used).
std::vector<MicroBatchPlan> PaperMicroBatches(const PlanRequest& given,
                                              bool allow_dp, bool* used_fast) {
  PlanRequest request = given;
  request.cost = PaperTerms(given.cost);
  std::vector<MicroBatchPlan> out;
  std::vector<std::vector<std::vector<int>>> split_bfd;
  const auto mbs = SplitMicroBatches(request.sequences, request.cost,
                                     request.cluster, &split_bfd);
  *used_fast = false;
  for (size_t m = 0; m < mbs.size(); ++m) {
    // The split's feasibility check already grouped each micro-batch by BFD.
    const auto groups =
        split_bfd.size() == mbs.size()
            ? std::move(split_bfd[m])
            : BestFitDecreasing(request.sequences, mbs[m], request.cost);
    const double n = request.cluster.num_ranks;
    const bool dp =
        allow_dp && static_cast<double>(groups.size()) * n * n <= kMaxDpCells;
    *used_fast |= !dp;
    auto realized = RealizeGrouping(
        request, groups, {.allocator = dp ? Allocator::kDp : Allocator::kFast});
    FCP_CHECK(realized.has_value());
    out.push_back(std::move(realized->micro_batch));
  }
  return out;
}

class FcpPaperStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "fcp-paper"; }
  std::string_view description() const override {
    return "FCP as published: BFD atomic grouping + Algorithm 1 (2D-DP) "
           "allocation";
  }
  Plan Solve(const PlanRequest& request, const PlanOptions&) const override {
    Plan plan;
    bool used_fast = false;
    plan.micro_batches =
        PaperMicroBatches(request, /*allow_dp=*/true, &used_fast);
    plan.notes["allocator"] = used_fast
                                  ? "fast (equal to Algorithm 1; DP too large)"
                                  : "algorithm-1-dp";
    return plan;
  }
};

class FcpStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "fcp"; }
  std::string_view description() const override {
    return "FCP, improved (default): best of BFD and dual-approximation "
           "grouping, "
           "move local search, exact fast allocator, node-aware placement";
  }
  // Long because: the candidate stages in order; later ones use earlier bests.
  Plan Solve(const PlanRequest& request, const PlanOptions&) const override {
    // Micro-batch co-planning: the paper's split (so fcp is never worse than
    // fcp-paper), splits with fewer micro-batches down to what memory allows
    // (BFD fragments memory; the dual grouping may pack it tighter), and one
    // with an extra micro-batch, which gives memory-bound batches room to
    // balance time. The lowest total wins.
    Scorer score(request);
    const WorkOrder work_order = MakeWorkOrder(request.sequences, request.cost);
    std::vector<std::vector<std::vector<int>>> split_bfd;
    const auto split =
        SplitMicroBatches(request.sequences, request.cost, request.cluster,
                          &split_bfd, &work_order);
    SplitDual split_dual;
    std::optional<Plan> plan =
        PlanSplit(request, split, &split_bfd, &split_dual);
    FCP_CHECK(plan.has_value());
    // Where the lanes' bisection starts (s): a makespan no scoring has
    // chosen, so that the lane candidates are the same whatever the score.
    const double lanes_upper_s = plan->est_ms / 1000;
    const int count = static_cast<int>(split.size());
    const int fewest =
        MinMicroBatches(request.sequences, request.cost, request.cluster);
    const int num_seqs = static_cast<int>(request.sequences.size());
    auto try_count = [&](int c) {
      const auto alt_split = SplitIntoMicroBatches(
          request.sequences, request.cost, request.cluster, c,
          /*check_bfd=*/false, /*bfd_groups=*/nullptr, &work_order);
      if (alt_split.empty()) return;
      std::optional<Plan> alt = PlanSplit(request, alt_split);
      if (alt && score(*alt) < score(*plan) * (1 - 1e-12)) {
        plan = std::move(alt);
      }
    };
    for (int c = std::max(fewest, count - kMaxFewerMicroBatches); c < count;
         ++c)
      try_count(c);
    if (count > 1 && count < num_seqs) try_count(count + 1);
    // fcp-paper's own plan (the fast allocator gives Algorithm 1's degrees):
    // per micro-batch the candidates above are never slower than it, but the
    // plan estimate is a list schedule, where how one micro-batch's groups
    // line up with the next one's counts too; with it as a candidate fcp is
    // never worse than fcp-paper. A one-micro-batch fcp-paper plan has
    // nothing to line up, and fcp-paper's split has one micro-batch exactly
    // when fcp's has: one micro-batch holding everything does not depend on
    // the work order (the only thing fcp-paper's zeroed v2 terms change).
    // With one micro-batch fcp's own candidates are at least as fast when
    // every node is full; when the last node is partial (N not a multiple of
    // R) its allocator, which prices any d <= R at intra-node figures, can
    // pick degrees that no placement keeps inside nodes (e.g. 8 8 5 5 on
    // nodes of 8 8 8 2 ranks), and the topology rounds only move ranks one at
    // a time, so fcp-paper's degrees (8 4 3 3 there) are a candidate too.
    const bool partial_node = LastNodePartial(request.cluster);
    if (count > 1 || partial_node) {
      bool used_fast = true;
      Plan paper;
      paper.micro_batches =
          PaperMicroBatches(request, /*allow_dp=*/false, &used_fast);
      paper.est_ms = EstimateMicroBatches(request, paper.micro_batches);
      if (score(paper) < score(*plan) * (1 - 1e-12)) {
        paper.notes["grouping"] = "fcp-paper";
        plan = std::move(paper);
      }
    }
    if (const int switched =
            SwitchWhereFaster(request, score, *plan, /*estimated=*/true)) {
      plan->notes["all_to_all_groups"] = std::to_string(switched);
    }
    // Lanes are tried with the dual grouping whatever the memory: even when
    // one micro-batch holds the batch, lanes spread over several let memory-
    // bound sequences run on fewer ranks each, leaving more for the longest
    // (go-src, 128 ranks, gbs 1,024: 3 lane micro-batches 8 % below the best
    // one-micro-batch plan in fcp's own model). A one-micro-batch split's
    // dual grouping that memory did not shape is the lanes' free grouping:
    // searched again from the plan's estimate, it came out at most 0.02 %
    // faster in 5 of the study's 92 cases, for 7-8 % of the planning
    // instructions on bench/planner_bench's batches.
    LanePlans lane_plans;
    TryLanes(request, score, *plan, lanes_upper_s, split_dual, lane_plans);
    if (fewest == 1) TryHeavyAlone(request, score, *plan);
    if (const int moved = ShiftMicroBatches(request, score, *plan)) {
      plan->notes["shifted_micro_batches"] = std::to_string(moved);
    }
    // The yardstick is a candidate too: the best work-balanced static ring
    // plan (one degree for everything, docs/design.md §3), so in its own model
    // fcp is never worse than it. Degrees that provably cannot beat the plan
    // so far are skipped.
    const BalancedStaticBuilder statics(request, &work_order);
    if (auto yardstick = statics.Best(plan->est_ms)) {
      plan->notes["balanced_static"] = "cp " + std::to_string(yardstick->cp) +
                                       ", " + FormatMs(yardstick->est_ms) +
                                       " ms";
    } else {
      plan->notes["balanced_static"] = "no degree can beat this plan (bound)";
    }
    // Every static degree, each group ring or all-to-all, whichever is faster
    // on its ranks: no slower than the ring plan of the same degree (a list
    // schedule's makespan only grows with its groups' times), so the winner
    // is never worse than the yardstick. A static plan on cp ranks runs the
    // heaviest sequence in one group of cp ranks: no faster than that group
    // alone on the faster link and comm (times grow with a group's
    // contents), so degrees whose bound cannot beat the plan are not built
    // (planning time only; the result is the same). Ranked by step time
    // (Scorer), a plan's step is at least its makespan plus one bucket of
    // each collective.
    const double exposed_floor_ms =
        request.grad_sync ? 2000.0 * request.grad_sync->collective_s /
                                request.grad_sync->buckets
                          : 0.0;
    double best_score_ms = score(*plan);
    const auto heaviest =
        std::max_element(request.sequences.begin(), request.sequences.end(),
                         [&](const Sequence& a, const Sequence& b) {
                           return SequenceWorkS(request.cost, a) <
                                  SequenceWorkS(request.cost, b);
                         });
    const GroupLoad heavy = GroupLoad::Of(*heaviest);
    // Within kStaticTie of fcp's own plan; static plans among themselves
    // strictly (a tie taken raises the score to beat).
    double tie = kStaticTie;
    for (int cp = 1; cp <= request.cluster.num_ranks; ++cp) {
      if (request.cluster.num_ranks % cp != 0) continue;
      double bound_s =
          std::min(GroupTimeS(request.cost, heavy, cp, Link::kIntraNode),
                   GroupTimeS(request.cost, heavy, cp, Link::kInterNode));
      if (AllToAllAllowed(request.model ? &*request.model : nullptr, cp)) {
        bound_s = std::min(
            bound_s,
            AllToAllGroupTimeS(
                request.cost, *request.model, heavy, cp,
                AllToAllBandwidthBound(request.cost, request.cluster, cp)));
      }
      // The noisy score is a mean over finite draws, which the bound does
      // not bound: every degree is built then.
      if (request.group_time_sigma == 0 &&
          1000.0 * bound_s + exposed_floor_ms >= best_score_ms * (1 + tie)) {
        continue;
      }
      auto mbs = statics.MicroBatches(cp, CommKind::kRing);
      if (!mbs) continue;
      Plan candidate;
      candidate.micro_batches = std::move(*mbs);
      if (const auto switched =
              KeepIfBetter(request, score, std::move(candidate), *plan,
                           best_score_ms, tie)) {
        tie = 0;
        plan->notes["grouping"] =
            "balanced static (cp " + std::to_string(cp) + ")";
        plan->notes["all_to_all_groups"] = std::to_string(*switched);
      }
    }
    if (request.group_time_sigma > 0) {
      if (const int k = TryFewerGroups(request, score, work_order, *plan,
                                       best_score_ms)) {
        plan->notes["grouping"] =
            "at most " + std::to_string(k) + " groups per micro-batch (noise)";
      }
    }
    if (const char* layout =
            TryHeldLayouts(request, score, work_order, *plan, best_score_ms)) {
      plan->notes["grouping"] = layout;
    }
    std::vector<std::vector<int>> winner_sets;
    LanesOf(plan->micro_batches, &winner_sets);
    const bool winner_is_best_lanes =
        !winner_sets.empty() && winner_sets == lane_plans.best_rank_sets;
    if (const std::string polished =
            TryPolishedLanes(request, score, work_order, *plan, best_score_ms);
        !polished.empty()) {
      plan->notes["polished_lanes"] = polished;
    }
    // Where the winner does not run lanes, the best lane plan polished and
    // reshaped too: lanes a reshape takes past the winner can start behind
    // it (issue 32: lanes of 4, 2, 2 and 1 ranks 0.2 % behind two
    // micro-batches, where 4, 4 and 1 are 2.8 % ahead). Where the winner is
    // the best lane plan, the best on other rank sets, kept where it gains
    // enough over the winner (GainsEnoughAcross): polishing starts from
    // near ties that end apart (issue 32: a wider random batch on 18 ranks,
    // 0.12 % behind ref-share). Polishing it costs planning time on small
    // batches (docs/planner/speed.md).
    const bool winner_runs_lanes = !winner_sets.empty();
    ScoredPlan* other = !winner_runs_lanes     ? &lane_plans.best
                        : winner_is_best_lanes ? &lane_plans.other
                                               : nullptr;
    if (other && std::isfinite(other->score_ms)) {
      Plan& lanes = other->plan;
      const std::string polished =
          TryPolishedLanes(request, score, work_order, lanes, other->score_ms);
      if (!polished.empty() && other->score_ms < best_score_ms * (1 - 1e-12) &&
          (!winner_runs_lanes ||
           GainsEnoughAcross(request.cluster.num_ranks, plan->micro_batches,
                             lanes.micro_batches))) {
        best_score_ms = other->score_ms;
        plan->micro_batches = std::move(lanes.micro_batches);
        for (const char* key : {"grouping", "all_to_all_groups"})
          plan->notes[key] = lanes.notes[key];
        plan->notes["polished_lanes"] = polished;
      }
    }
    // The static plans at other degrees, their lanes balanced by time.
    if (num_seqs <= kStaticLanesMaxSequences) {
      if (const std::string note = TryStaticLanes(
              request, score, work_order, statics, *plan, best_score_ms);
          !note.empty()) {
        plan->notes["polished_lanes"] = note;
      }
    }
    plan->notes["micro_batches"] = std::to_string(plan->micro_batches.size()) +
                                   " (BFD needs " + std::to_string(count) +
                                   ", memory " + std::to_string(fewest) + ")";
    if (request.group_time_sigma > 0) {
      plan->notes["expected_step_ms"] = FormatMs(best_score_ms);
    } else if (score.BeyondMakespan()) {
      plan->notes["step_ms"] = FormatMs(best_score_ms);
    }
    plan->est_ms = 0;  // MakePlan recomputes every estimate
    return std::move(*plan);
  }

 private:
  // Under noise (group_time_sigma > 0) the expected step grows with the number
  // of near-tied groups whose max it is. Each micro-batch of `plan` regrouped
  // into k groups by work (LPT: heaviest sequence onto the lightest group)
  // and realized as fcp's own groupings, for k = 1, 2, 3, 4, 6, 8, ... below
  // the plan's largest group count, is a candidate; the best replaces `plan`
  // when it scores below `best_score_ms` (updated). Returns its k, or 0.
  static int TryFewerGroups(const PlanRequest& request, Scorer& score,
                            const WorkOrder& work_order, Plan& plan,
                            double& best_score_ms) {
    size_t most_groups = 0;
    std::vector<std::vector<int>> members(plan.micro_batches.size());
    for (size_t m = 0; m < plan.micro_batches.size(); ++m) {
      most_groups = std::max(most_groups, plan.micro_batches[m].groups.size());
      for (const GroupPlan& g : plan.micro_batches[m].groups) {
        members[m].insert(members[m].end(), g.sequences.begin(),
                          g.sequences.end());
      }
    }
    std::vector<int> position(request.sequences.size());
    for (size_t i = 0; i < work_order.order.size(); ++i) {
      position[work_order.order[i]] = static_cast<int>(i);
    }
    for (std::vector<int>& mb : members) {
      std::sort(mb.begin(), mb.end(),
                [&](int a, int b) { return position[a] < position[b]; });
    }
    int best_k = 0;
    for (size_t k = 1; k < most_groups; k = std::max(k + 1, k * 3 / 2)) {
      Plan candidate;
      for (const std::vector<int>& mb : members) {
        std::vector<std::vector<int>> groups(std::min(k, mb.size()));
        std::vector<double> load(groups.size(), 0.0);
        for (int i : mb) {
          const size_t lightest = static_cast<size_t>(
              std::min_element(load.begin(), load.end()) - load.begin());
          groups[lightest].push_back(i);
          load[lightest] += work_order.work[i];
        }
        auto realized = RealizeGrouping(request, groups, kFcpRealize);
        if (!realized) break;
        candidate.micro_batches.push_back(std::move(realized->micro_batch));
      }
      if (candidate.micro_batches.size() != members.size()) continue;
      if (KeepIfBetter(request, score, std::move(candidate), plan,
                       best_score_ms)) {
        best_k = static_cast<int>(k);
      }
    }
    return best_k;
  }

  // Every candidate above may open rank sets without a communicator, each
  // charged its creation; where the step hides under the gradient sync a
  // plan on known rank sets is as fast and pays nothing (issue 32: fcp 1 ms
  // behind the static plan, which reuses its groups every step). Lanes on a
  // partition into held rank sets (largest or smallest first) are candidates;
  // the best replaces `plan` when it scores below `best_score_ms` (updated).
  // Returns the grouping note, or null.
  static const char* TryHeldLayouts(const PlanRequest& request, Scorer& score,
                                    const WorkOrder& work_order, Plan& plan,
                                    double& best_score_ms) {
    if (score.held().empty()) return nullptr;
    const char* note = nullptr;
    for (bool largest_first : {true, false}) {
      const auto layout =
          HeldLayout(request.cluster.num_ranks, score.held(), largest_first);
      auto mbs = LaneMicroBatchesOn(request, layout, work_order.work,
                                    work_order.order);
      if (!mbs) continue;
      Plan candidate;
      candidate.micro_batches = std::move(*mbs);
      if (KeepIfBetter(request, score, std::move(candidate), plan,
                       best_score_ms)) {
        note = "lanes on held communicators";
      }
    }
    return note;
  }

  // Each micro-batch is placed on its own, so the next one's longest group
  // can land on the ranks the previous one's longest group keeps busy, and
  // the list schedule (docs/design.md §2) then runs the two back to back
  // (issue 32: 96.8 s where 65.4 s was possible). Micro-batch by micro-batch,
  // its layout rotated by whole nodes and/or mirrored is kept when the plan
  // scores lower. Returns how many micro-batches moved. With N a multiple of
  // R both moves keep every group's count of ranks per node, all that its
  // estimate depends on (GroupTimeForPlan), so est_ms is not recomputed per
  // layout. A layout is scored in O(N) per noise draw against the
  // schedule's tails (LayoutScorer) instead of rescheduling the whole plan
  // (issue 30: O(C^2 N) for C micro-batches). The plan is rescored for a
  // layout that creates communicators later groups use (their delays
  // change), and with a sync for a micro-batch before which some rank used
  // later has run nothing.
  static int ShiftMicroBatches(const PlanRequest& request, Scorer& score,
                               Plan& plan) {
    const int n = request.cluster.num_ranks;
    const int r = request.cluster.ranks_per_node;
    if (plan.micro_batches.size() < 2 || n % r != 0) return 0;
    LayoutScorer layouts = score.Layouts(plan.micro_batches);
    layouts.Commit(plan.micro_batches[0]);
    int moved = 0;
    for (size_t m = 1; m < plan.micro_batches.size(); ++m) {
      MicroBatchPlan& mb = plan.micro_batches[m];
      const bool incremental = layouts.CanScore(m);
      auto layout_ms = [&] {
        const std::optional<double> ms =
            incremental ? layouts.Score(m, mb) : std::nullopt;
        return ms ? *ms : score(plan);
      };
      double best_ms = layout_ms();  // the plan as it is
      std::vector<std::vector<int>> original;
      for (const GroupPlan& g : mb.groups) original.push_back(g.ranks);
      auto lay_out = [&](int shift, bool mirror) {
        for (size_t i = 0; i < mb.groups.size(); ++i) {
          for (size_t j = 0; j < original[i].size(); ++j) {
            const int rank = original[i][j];
            mb.groups[i].ranks[j] =
                ((mirror ? n - 1 - rank : rank) + shift) % n;
          }
        }
      };
      int best_shift = 0;
      bool best_mirror = false;
      for (int shift = 0; shift < n; shift += r) {
        for (bool mirror : {false, true}) {
          if (shift == 0 && !mirror) continue;
          lay_out(shift, mirror);
          const double candidate_ms = layout_ms();
          if (candidate_ms < best_ms * (1 - 1e-12)) {
            best_ms = candidate_ms;
            best_shift = shift;
            best_mirror = mirror;
          }
        }
      }
      lay_out(best_shift, best_mirror);
      moved += best_shift != 0 || best_mirror;
      layouts.Commit(mb);
    }
    plan.est_ms = EstimateMicroBatches(request, plan.micro_batches);
    return moved;
  }

  // The winner's lanes (when its groups form lanes: a one-micro-batch plan,
  // a static or a lane plan), polished (PolishLanes), and the winner's rank
  // sets dealt afresh (DealOnto: LPT by work per rank; up to
  // kFreshDealMaxLanes lanes), polished too. The
  // stages above deal sequences once, by work over degree or to the dual
  // approximation's target, and leave near-tied lanes that moving sequences
  // between them shortens (issue 32: 8 of 108 small batches 0.003-1.3 %
  // behind a reference heuristic in fcp's own model, most on the same rank
  // sets). Then, up to kReshapeMaxLanes lanes, the lanes dealt below the
  // makespan and at other degrees (ReshapeLanes: the 2 such batches left
  // needed a tighter deal, or 4 and 3 ranks where fcp had 2 and 5; up to
  // 1.1 % on Ascend go-src cases of the study, simulated). Each replaces
  // `plan` when it scores below `best_score_ms` (updated). Returns the note
  // of the one kept last, or "".
  static std::string TryPolishedLanes(const PlanRequest& request, Scorer& score,
                                      const WorkOrder& work_order, Plan& plan,
                                      double& best_score_ms,
                                      const ReshapeOptions& reshaping = {}) {
    std::vector<std::vector<int>> rank_sets;
    std::vector<std::vector<int>> lanes =
        LanesOf(plan.micro_batches, &rank_sets);
    if (lanes.empty()) return "";
    std::string note;
    auto keep = [&](std::vector<std::vector<int>> start, bool dealt_afresh) {
      std::string got =
          KeepPolished(request, score, std::move(start), rank_sets,
                       dealt_afresh, plan, best_score_ms);
      if (!got.empty()) note = std::move(got);
    };
    const size_t num_lanes = lanes.size();
    if (num_lanes >= 2 && num_lanes <= kFreshDealMaxLanes) {
      if (auto fresh =
              DealOnto(request, rank_sets, work_order.work, work_order.order)) {
        keep(std::move(*fresh), /*dealt_afresh=*/true);
      }
    }
    if (num_lanes >= 2) keep(std::move(lanes), /*dealt_afresh=*/false);
    // Past kReshapeMaxLanes, a plan of one micro-batch runs one group per
    // lane, which DealtAsSeveralGroups below would find only after the lanes
    // are built again (a planning benchmark's plan).
    if (num_lanes > kFreshDealMaxLanes ||
        (num_lanes > kReshapeMaxLanes && plan.micro_batches.size() == 1)) {
      return note;
    }
    std::string reshaped = TryReshapedLanes(
        request, score, work_order, num_lanes, reshaping, plan, best_score_ms);
    return reshaped.empty() ? note : reshaped;
  }

  // `start`, lanes on `rank_sets`, polished (PolishLanes) and chunked: it
  // replaces `plan` where its makespan is lower and it scores below
  // `best_score_ms` (updated). Returns its note ("dealt afresh, " where
  // `dealt_afresh`, and the changes), or "" where it does not replace.
  static std::string KeepPolished(
      const PlanRequest& request, Scorer& score,
      std::vector<std::vector<int>> start,
      const std::vector<std::vector<int>>& rank_sets, bool dealt_afresh,
      Plan& plan, double& best_score_ms) {
    const Polished polished =
        PolishLanes(request, start, rank_sets, kPolishTrials);
    if (polished.changes == 0 && !dealt_afresh) return "";
    // Lanes whose makespan is not lower are not built: ranked by makespan
    // they cannot win, ranked by the step they rarely do, and scoring them
    // there (a mean over noise draws) is the costly part.
    if (1000.0 * polished.makespan_s >= plan.est_ms * (1 + 1e-9)) return "";
    Plan candidate;
    candidate.micro_batches = ChunkLanes(request, start, rank_sets);
    if (!KeepIfBetter(request, score, std::move(candidate), plan,
                      best_score_ms)) {
      return "";
    }
    return std::string(dealt_afresh ? "dealt afresh, " : "") +
           std::to_string(polished.changes) + " changes";
  }

  // The lanes of `plan` (`num_lanes` of them before polishing) dealt below
  // the makespan and at other degrees (ReshapeLanes), then polished again: a
  // deal leaves moves that polishing the lanes before it could not see
  // (issue 32: two short sequences swapped between a 2-rank lane and a
  // single rank, 0.005 % behind ref-bisect). Replaces `plan` as
  // KeepPolished does; returns the note, or "".
  static std::string TryReshapedLanes(const PlanRequest& request, Scorer& score,
                                      const WorkOrder& work_order,
                                      size_t num_lanes, ReshapeOptions options,
                                      Plan& plan, double& best_score_ms) {
    // The plan's lanes now (polishing may have emptied one, which is gone).
    std::vector<std::vector<int>> rank_sets;
    std::vector<std::vector<int>> lanes =
        LanesOf(plan.micro_batches, &rank_sets);
    // Past kReshapeMaxLanes, where the lanes are dealt as several groups,
    // only the deal below the makespan on the
    // same rank sets: polishing moves a sequence or two at a time, and lanes
    // that several micro-batches fill end far apart (issue 32: Ascend
    // go-src, 512 sequences on 18 lanes of 128 ranks, 0.31 % behind
    // ref-grow's deal on the same degrees).
    if (num_lanes > kReshapeMaxLanes) {
      if (!DealtAsSeveralGroups(request, lanes, rank_sets)) return "";
      options.max_rounds = 0;
    }
    const auto reshaped =
        ReshapeLanes(request, std::move(lanes), rank_sets, plan.est_ms / 1000,
                     work_order.work, work_order.order, options);
    if (!reshaped) return "";
    Plan candidate;
    candidate.micro_batches =
        ChunkLanes(request, reshaped->lanes, reshaped->rank_sets);
    if (!KeepIfBetter(request, score, std::move(candidate), plan,
                      best_score_ms)) {
      return "";
    }
    const std::string note =
        reshaped->degree_changes == 0
            ? "reshaped on its rank sets"
            : "reshaped, " + std::to_string(reshaped->degree_changes) +
                  " degree changes";
    lanes = LanesOf(plan.micro_batches, &rank_sets);
    if (lanes.size() < 2) return note;
    const std::string polished =
        KeepPolished(request, score, std::move(lanes), rank_sets,
                     /*dealt_afresh=*/false, plan, best_score_ms);
    return polished.empty() ? note : note + ", then " + polished;
  }

  // The balanced static plans of 2 to kReshapeMaxLanes lanes (every degree
  // dividing N, ring groups), the best kStaticLanesPolished by their score as
  // dealt that do not run on `plan`'s lanes, polished and reshaped as the
  // winner's lanes are (TryPolishedLanes, kStaticLanesReshaping; groups
  // switched to all-to-all where faster). The static degree that wins dealt
  // by work is not always the one that wins once its lanes are balanced by
  // time (issue 32: 64 msrvtt sequences of 2-6 k tokens on 64 Ascend ranks,
  // ring only: the static plan on 8 ranks won, 1,262.5 ms polished, behind
  // deepspeed's Ulysses on 8; on 4 ranks its lanes end 9 % apart,
  // 1,205-1,313 ms, and polished and reshaped 1,235.0 ms). Each replaces
  // `plan` where it scores below `best_score_ms` (updated) and, where the
  // plan runs lanes, gains enough over it (GainsEnoughAcross). Returns the
  // note of the one kept last, or "".
  static std::string TryStaticLanes(const PlanRequest& request, Scorer& score,
                                    const WorkOrder& work_order,
                                    const BalancedStaticBuilder& statics,
                                    Plan& plan, double& best_score_ms) {
    const int n = request.cluster.num_ranks;
    std::vector<std::vector<int>> plan_sets;
    LanesOf(plan.micro_batches, &plan_sets);
    struct Start {
      double score_ms;
      int cp;
      Plan lanes;
    };
    std::vector<Start> starts;
    for (int cp = 1; cp <= n; ++cp) {
      const size_t num_lanes = static_cast<size_t>(n / cp);
      if (n % cp != 0 || num_lanes < 2 || num_lanes > kReshapeMaxLanes)
        continue;
      auto mbs = statics.MicroBatches(cp, CommKind::kRing);
      if (!mbs) continue;
      Plan lanes;
      lanes.micro_batches = std::move(*mbs);
      std::vector<std::vector<int>> sets;
      LanesOf(lanes.micro_batches, &sets);
      if (sets == plan_sets) continue;  // polished as the plan's lanes
      lanes.est_ms = EstimateMicroBatches(request, lanes.micro_batches);
      starts.push_back({score(lanes), cp, std::move(lanes)});
    }
    std::sort(starts.begin(), starts.end(), [](const Start& a, const Start& b) {
      return a.score_ms < b.score_ms ||
             (a.score_ms == b.score_ms && a.cp < b.cp);
    });
    if (starts.size() > kStaticLanesPolished)
      starts.resize(kStaticLanesPolished);
    std::string note;
    for (Start& start : starts) {
      Plan& lanes = start.lanes;
      const std::string polished =
          TryPolishedLanes(request, score, work_order, lanes, start.score_ms,
                           kStaticLanesReshaping);
      if (polished.empty() || start.score_ms >= best_score_ms * (1 - 1e-12))
        continue;
      if (!plan_sets.empty() &&
          !GainsEnoughAcross(n, plan.micro_batches, lanes.micro_batches)) {
        continue;
      }
      best_score_ms = start.score_ms;
      plan.micro_batches = std::move(lanes.micro_batches);
      plan.est_ms = lanes.est_ms;
      LanesOf(plan.micro_batches, &plan_sets);
      plan.notes["grouping"] =
          "balanced static (cp " + std::to_string(start.cp) + ") as lanes";
      int all_to_all = 0;
      for (const MicroBatchPlan& mb : plan.micro_batches)
        for (const GroupPlan& g : mb.groups)
          all_to_all += g.comm == CommKind::kAllToAll;
      plan.notes["all_to_all_groups"] = std::to_string(all_to_all);
      note = polished;
    }
    return note;
  }

  // One micro-batch of the heavy sequences alone and the others together
  // (HeavyAlone), realized topology-aware: a candidate when it scores below
  // `plan`. Every grouping above is searched by the allocator's makespan,
  // which counts any d <= R as inside a node; where nodes are uneven that
  // can prefer groupings no placement keeps inside them (issue 32: 26 ranks
  // on nodes of 16 and 10, the longest sequence with three short ones on 13
  // ranks and two long ones on 5 each, 3.4 % behind ref-grow's long
  // sequences alone on 10, 6 | 6, 3, 1). Tried after the lanes, whose
  // bisection starts from the plan's estimate: before them it moved that
  // start and lost lane plans.
  static void TryHeavyAlone(const PlanRequest& request, Scorer& score,
                            Plan& plan) {
    const std::vector<std::vector<int>> groups = HeavyAlone(request);
    if (groups.size() < 2) return;
    auto realized = RealizeGrouping(request, groups, kFcpRealize);
    if (!realized) return;
    Plan candidate;
    candidate.micro_batches = {std::move(realized->micro_batch)};
    double best_score_ms = score(plan);
    if (const auto switched = KeepIfBetter(request, score, std::move(candidate),
                                           plan, best_score_ms)) {
      plan.notes["grouping"] = "heavy sequences alone";
      plan.notes["all_to_all_groups"] = std::to_string(*switched);
    }
  }

  // Persistent groups (lanes.h) as candidates: each lane grouping whose plan
  // scores below `plan` replaces it (estimates filled).
  // The dual groupings (memory relaxed per lane) bisect below `upper_s`, a
  // makespan that does not depend on the plans the score chose so far (with
  // communicators held, a bound taken from the current plan steered the lane
  // candidates, and fcp then missed plans it had found without them).
  // Lanes are split first fit; ranked by step time, lanes that need several
  // groups are split balanced too (ChunkLanes): first fit leaves a short last
  // group whose backward cannot hide the gradient sync's reduce-scatter
  // (issue 32: openvid, H100, 64 ranks, gbs 1,024, 128 ms exposed, 1 % behind
  // a lane heuristic whose lanes each fit one group). Ranked by makespan the
  // split changes a lane's time only by the rings' overlap, so only first fit
  // is tried (planning time).
  // `lane_plans` gets the best lane plans (LanePlans), kept or not.
  struct ScoredPlan {
    Plan plan;
    double score_ms = std::numeric_limits<double>::infinity();
  };
  // What the lanes reuse (LaneGroupings) of a one-micro-batch split's dual
  // approximation (PlanSplit): its preparation, and its grouping where
  // memory decided none of it (DualApprox::memory_decided: with memory
  // relaxed, as for lanes, the same search finds the same grouping).
  struct SplitDual {
    std::optional<DualApprox> search;
    std::optional<std::vector<std::vector<int>>> free_lanes;
  };
  // The best lane plan of all (lanes on at most kReshapeMaxLanes rank sets
  // only), with its rank sets, and the best on other rank sets.
  struct LanePlans {
    ScoredPlan best, other;
    std::vector<std::vector<int>> best_rank_sets;
    void Offer(const Plan& candidate, double score_ms) {
      if (score_ms >= std::max(best.score_ms, other.score_ms)) return;
      std::vector<std::vector<int>> rank_sets;
      LanesOf(candidate.micro_batches, &rank_sets);
      if (score_ms < best.score_ms) {
        if (rank_sets != best_rank_sets) other = std::move(best);
        best = {candidate, score_ms};
        best_rank_sets = std::move(rank_sets);
      } else if (rank_sets != best_rank_sets) {
        other = {candidate, score_ms};
      }
    }
  };
  static void TryLanes(const PlanRequest& request, Scorer& score, Plan& plan,
                       double upper_s, SplitDual& split_dual,
                       LanePlans& lane_plans) {
    double best_ms = score(plan);
    const bool packing_prices = PackingPricesAllToAll(request);
    for (const LaneGrouping& grouping : LaneGroupings(
             request, upper_s, /*dual=*/true, kLaneMultipleOf,
             split_dual.free_lanes ? &*split_dual.free_lanes : nullptr,
             split_dual.search ? &*split_dual.search : nullptr)) {
      const auto& lanes = grouping.lanes;
      // Sorted once for every layout and split below.
      const auto sorted_lanes = LongestFirst(request, lanes);
      // A grouping opened at restricted degrees is laid out at those; a free
      // one at free and at node-aligned degrees. A free one, and one at
      // all-to-all degrees, where packing prices some degree otherwise, with
      // all-to-all lanes priced packed too (realize.h).
      const LaneDegrees& opened = grouping.degrees;
      std::vector<LaneDegrees> layouts = {opened};
      const bool free = !opened.node_aligned && opened.multiple_of == 1;
      if (free && !opened.all_to_all_only)
        layouts.push_back({.node_aligned = true});
      if (free && packing_prices) {
        layouts.push_back(opened);
        layouts.back().all_to_all = AllToAllPricing::kPacked;
      }
      // Rank sets an earlier layout of this grouping had: the same plans.
      std::vector<std::vector<std::vector<int>>> laid_out;
      for (const LaneDegrees& layout : layouts) {
        const auto rank_sets = LaneRankSets(request, lanes, layout);
        if (!rank_sets || std::find(laid_out.begin(), laid_out.end(),
                                    *rank_sets) != laid_out.end()) {
          continue;
        }
        laid_out.push_back(*rank_sets);
        bool several = false;
        for (Chunking chunking : {Chunking::kFirstFit, Chunking::kBalanced}) {
          if (chunking == Chunking::kBalanced &&
              (!several || !score.BeyondMakespan()))
            break;
          Plan candidate;
          candidate.micro_batches =
              ChunkLanes(request, sorted_lanes, *rank_sets, chunking, &several);
          const int switched = SwitchWhereFaster(request, score, candidate,
                                                 /*estimated=*/false);
          candidate.notes["grouping"] =
              "lanes: " + std::to_string(lanes.size()) + " persistent groups" +
              (chunking == Chunking::kBalanced ? ", balanced split" : "");
          candidate.notes["all_to_all_groups"] = std::to_string(switched);
          const double candidate_ms = score(candidate);
          if (lanes.size() <= kReshapeMaxLanes)
            lane_plans.Offer(candidate, candidate_ms);
          if (candidate_ms < best_ms * (1 - 1e-12)) {
            best_ms = candidate_ms;
            plan.micro_batches = std::move(candidate.micro_batches);
            plan.est_ms = candidate.est_ms;
            for (const char* key : {"grouping", "all_to_all_groups"})
              plan.notes[key] = candidate.notes[key];
          }
        }
      }
    }
  }

  // Plans each micro-batch of `split`; est_ms holds the plan estimate
  // (EstimateMicroBatches: the list-schedule makespan, ms).
  // nullopt when some micro-batch has no grouping that fits N ranks.
  // `split_bfd`, when it has one grouping per micro-batch, is the BFD grouping
  // of each (computed by the split's feasibility check; BFD is deterministic).
  // `split_dual`, when given and `split` is one micro-batch, receives its
  // dual approximation (SplitDual).
  // Long because: each micro-batch's candidates share `best`, in rank order.
  static std::optional<Plan> PlanSplit(
      const PlanRequest& request, const std::vector<std::vector<int>>& split,
      const std::vector<std::vector<std::vector<int>>>* split_bfd = nullptr,
      SplitDual* split_dual = nullptr) {
    Plan plan;
    int wins_bfd = 0, wins_dual = 0;
    const bool have_bfd = split_bfd && split_bfd->size() == split.size();
    const bool partial_node = LastNodePartial(request.cluster);
    const bool packing_prices = PackingPricesAllToAll(request);
    for (size_t m = 0; m < split.size(); ++m) {
      const std::vector<int>& members = split[m];
      // Candidate 1: the paper's grouping (same degrees as fcp-paper, so fcp is
      // never worse than fcp-paper on the same micro-batch split).
      auto bfd_groups = have_bfd ? (*split_bfd)[m]
                                 : BestFitDecreasing(request.sequences, members,
                                                     request.cost);
      auto best = RealizeGrouping(request, bfd_groups, kFcpRealize);
      bool best_is_dual = false;
      auto consider = [&](std::vector<std::vector<int>> groups, bool dual) {
        auto r = RealizeGrouping(request, groups, kFcpRealize);
        if (r && (!best || r->placed_makespan_s <
                               best->placed_makespan_s * (1 - 1e-12))) {
          best = std::move(r);
          best_is_dual = dual;
        }
      };
      // Candidate 2: BFD refined by local search.
      if (best) {
        LocalSearch(request, bfd_groups, kLocalSearchTrials);
        consider(bfd_groups, false);
      }
      // Candidate 3: one group of everything (perfect balance when the ring's
      // traffic hides behind attention).
      consider({members}, false);
      // Candidate 4: dual approximation (+ local search), bounded above by the
      // best makespan so far.
      const double upper_s =
          best ? std::max(best->alloc_makespan_s, best->placed_makespan_s)
               : std::numeric_limits<double>::infinity();
      DualApprox dual_approx(request, members);
      if (auto dual = dual_approx.Group(upper_s, {})) {
        if (split_dual && split.size() == 1 && !dual_approx.memory_decided())
          split_dual->free_lanes = *dual;
        consider(*dual, true);
        LocalSearch(request, *dual, kLocalSearchTrials);
        consider(*dual, true);
      }
      if (split_dual && split.size() == 1)
        split_dual->search = std::move(dual_approx);
      if (!best) return std::nullopt;
      // The winner's grouping realized once more; kept only when its placed
      // makespan is lower.
      auto realize_winner_again = [&](RealizeOptions options) {
        options.topology_aware = kFcpRealize.topology_aware;
        std::vector<std::vector<int>> winner;
        for (const GroupPlan& g : best->micro_batch.groups)
          winner.push_back(g.sequences);
        auto again = RealizeGrouping(request, winner, options);
        if (again &&
            again->placed_makespan_s < best->placed_makespan_s * (1 - 1e-12)) {
          best = std::move(again);
        }
      };
      // With a partial last node the winner is realized once more with the
      // full nodes' allocation as a further candidate (realize.h); this comes
      // after the ranking so that it cannot steer the candidates above (the
      // dual approximation starts from the best allocator makespan so far),
      // and its placed makespan is never above the winner's.
      if (partial_node) realize_winner_again({.full_nodes_too = true});
      // The winner with node-aligned degrees (realize.h): the allocator may
      // pick degrees such as 14 and 5 on 8-rank nodes whose rings then cross
      // nodes, where 16 and 4 pack into whole nodes (issue 32).
      realize_winner_again({.aligned_degrees = true});
      // And with all-to-all groups priced packed, where that prices some
      // degree otherwise (realize.h: 6-rank all-to-all groups on 4-rank
      // nodes, 6 % faster than the 8-rank rings the worst placement's price
      // chose).
      if (packing_prices)
        realize_winner_again({.pricing = AllToAllPricing::kPacked});
      (best_is_dual ? wins_dual : wins_bfd)++;
      plan.micro_batches.push_back(std::move(best->micro_batch));
    }
    plan.est_ms = EstimateMicroBatches(request, plan.micro_batches);
    plan.notes["grouping"] = "bfd:" + std::to_string(wins_bfd) +
                             " dual:" + std::to_string(wins_dual) +
                             " micro-batches";
    return plan;
  }
};

// fcp with ring groups only, for runtimes that execute every group as ring
// attention (e.g. Megatron's CP): without the model shape fcp never prices
// an all-to-all group.
class FcpRingStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "fcp-ring"; }
  std::string_view description() const override {
    return "fcp with ring-attention groups only (no all-to-all groups)";
  }
  Plan Solve(const PlanRequest& request,
             const PlanOptions& options) const override {
    PlanRequest ring_only = request;
    ring_only.model.reset();
    return FcpStrategy().Solve(ring_only, options);
  }
};

}  // namespace

void AppendFcpStrategies(std::vector<std::unique_ptr<Strategy>>& out) {
  out.push_back(std::make_unique<FcpStrategy>());
  out.push_back(std::make_unique<FcpPaperStrategy>());
  out.push_back(std::make_unique<FcpRingStrategy>());
}

}  // namespace fcp::planner
