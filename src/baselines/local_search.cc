// The local-search reference (include/fcp/local_search.h). Not the fcp planner.
#include "fcp/local_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>

#include "baselines/common.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {
// A named namespace: the wheel's unity build merges the anonymous namespaces
// of the core's files, where names such as WorkS are taken.
namespace local_search_internal {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Weight of the tie-break (rms finish time) against the score: it decides
// only between plans whose scores agree to about 1e-6.
constexpr double kTieWeight = 1e-6;
// Late acceptance: a move is kept when no worse than the plan of this many
// moves ago.
constexpr size_t kHistory = 500;
// Share of the budget spent on descents from every start (the rest: late
// acceptance from the best of them).
constexpr double kDescentShare = 0.4;
// Longest critical chain followed back from a last-finishing group.
constexpr int kMaxChain = 64;
// Groups that finish first, the targets of moves off the critical chain.
constexpr size_t kSlackGroups = 8;
// Share of moves followed by a second one before they are scored.
constexpr double kCompoundShare = 0.25;

// The request's rank sets when it charges the creation of new communicators
// (as fcp's ranking does), else empty.
std::optional<std::set<std::vector<int>>> ChargedRankSets(
    const PlanRequest& r) {
  if (!r.communicators || r.communicators->create_s <= 0) return std::nullopt;
  return SortedRankSets(*r.communicators);
}

// SearchScoreMs of micro-batches whose est_ms are filled; `makespan_ms`:
// their ListScheduleMs; `held`: ChargedRankSets(r).
double ScoreMs(const PlanRequest& r, const std::vector<MicroBatchPlan>& view,
               double makespan_ms,
               const std::optional<std::set<std::vector<int>>>& held) {
  const int n = r.cluster.num_ranks;
  if (held) {
    GroupTimeNoise exact(0);
    return ExpectedStepMs(
        n, view, r.grad_sync ? &*r.grad_sync : nullptr, exact,
        NewCommunicatorDelaysMs(view, *held, r.communicators->create_s));
  }
  return r.grad_sync ? StepMs(n, view, *r.grad_sync) : makespan_ms;
}

// One CP group: contiguous ranks after `gap` idle ones.
struct Slot {
  int gap = 0;
  int degree = 1;
  std::vector<int> seqs;
  GroupLoad load;
};
using MicroBatch = std::vector<Slot>;

// A plan under search, its groups laid out (`view`, the Plan's form) and
// scored.
struct State {
  std::vector<MicroBatch> layout;
  std::vector<MicroBatchPlan> view;
  double score = kInf;   // SearchScoreMs
  double spread = kInf;  // rms over ranks of their finish time (ms)
  std::string origin;
  std::vector<std::pair<int, int>>
      critical;                            // (micro-batch, slot) finishing last
  std::vector<std::pair<int, int>> slack;  // the groups that finish first
  double cost() const { return score + kTieWeight * spread; }
};

int UsedRanks(const MicroBatch& mb) {
  int used = 0;
  for (const Slot& s : mb) used += s.gap + s.degree;
  return used;
}

// Cuts `excess` idle ranks out of `mb`'s gaps, nearest to slot `around` first
// (its own gap, then after, then before). False if there are not enough.
bool SqueezeGaps(MicroBatch& mb, int excess, int around) {
  const int n = static_cast<int>(mb.size());
  for (int step = 0; excess > 0 && step < 2 * n; ++step) {
    const int j = step % 2 == 0 ? around + step / 2 : around - (step + 1) / 2;
    if (j < 0 || j >= n) continue;
    const int cut = std::min(excess, mb[j].gap);
    mb[j].gap -= cut;
    excess -= cut;
  }
  return excess == 0;
}

// Removes slot i; its ranks (and gap) become idle before the next slot.
void RemoveSlot(MicroBatch& mb, int i) {
  const int freed = mb[i].gap + mb[i].degree;
  if (i + 1 < static_cast<int>(mb.size())) mb[i + 1].gap += freed;
  mb.erase(mb.begin() + i);
}

class Searcher {
 public:
  Searcher(const PlanRequest& request, const LocalSearchOptions& options)
      : r_(request),
        o_(options),
        n_(request.cluster.num_ranks),
        held_(ChargedRankSets(request)),
        rng_(options.seed),
        start_(std::chrono::steady_clock::now()) {}

  State FromPlan(const Plan& plan, const std::string& name) const;
  std::optional<State> OneGroup() const;
  void Evaluate(State& s) const;
  void Run(std::vector<State> starts);
  const State& best() const { return best_; }
  int64_t iterations() const { return iterations_; }
  int64_t improvements() const { return improvements_; }

 private:
  MicroBatchPlan LayOut(const MicroBatch& mb) const;
  bool Fits(const Slot& s) const {
    return FitsOnLoad(r_.cost, s.load.sum_tokens, s.degree);
  }
  bool Valid(const MicroBatch& mb) const;
  bool BudgetLeft(double fraction) const;
  void Descend(State& s, double until);
  void LateAcceptance(State& s, double until);
  bool TryMove(State& s, double accept_below);
  bool ApplyRandomMove(State& s);
  bool ApplyMoves(State& s);
  void Touch(State& s, int m);
  void Undo(State& s);
  void NoteBest(const State& s);
  // Moves; each returns false when it does not apply.
  bool MoveSequence(State& s, bool swap);
  bool Resize(State& s);
  bool Split(State& s);
  bool Merge(State& s);
  bool Reorder(State& s);
  bool ShiftGap(State& s);
  bool MoveGroup(State& s);
  bool SequenceToNewMicroBatch(State& s);
  bool SplitInTime(State& s);
  bool RebuildWindow(State& s);
  // Helpers.
  int Uniform(int lo, int hi) {  // [lo, hi]
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }
  bool Chance(double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng_) < p;
  }
  std::pair<int, int> PickSlot(const State& s, bool prefer_critical);
  int NonEmptyMicroBatches(const State& s) const;
  static bool Exists(const State& s, int m, int i) {
    return m >= 0 && m < static_cast<int>(s.layout.size()) && i >= 0 &&
           i < static_cast<int>(s.layout[m].size());
  }
  int MicroBatchLimit() const;

  const PlanRequest& r_;
  const LocalSearchOptions& o_;
  const int n_;
  const std::optional<std::set<std::vector<int>>> held_;
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point start_;
  State best_;
  int64_t iterations_ = 0, improvements_ = 0;
  // Undo log of the move in progress: previous micro-batches, appended ones.
  std::vector<std::pair<int, std::pair<MicroBatch, MicroBatchPlan>>> saved_;
  size_t size_before_ = 0;
};

MicroBatchPlan Searcher::LayOut(const MicroBatch& mb) const {
  MicroBatchPlan out;
  int pos = 0;
  for (const Slot& s : mb) {
    pos += s.gap;
    GroupPlan g;
    g.ranks = RankRange(pos, s.degree);
    g.sequences = s.seqs;
    // The plan estimate's own functions (EstimateMicroBatches): ring on the
    // group's link, or all-to-all where allowed and cheaper.
    double t = GroupTimeOnRanksS(r_.cost, r_.cluster, s.load, g.ranks);
    if (o_.all_to_all && s.degree > 1 && r_.model && r_.model->kv_heads > 0 &&
        AllToAllDegreeRuns(*r_.model, s.degree)) {
      const double a2a = AllToAllGroupTimeS(
          r_.cost, *r_.model, s.load, s.degree,
          AllToAllBandwidthOnRanks(r_.cost, r_.cluster, g.ranks));
      if (a2a < t) {
        t = a2a;
        g.comm = CommKind::kAllToAll;
      }
    }
    g.est_ms = 1000.0 * t;
    g.mem_bytes = static_cast<int64_t>(
        std::ceil(GroupMemBytes(r_.cost, s.load, s.degree)));
    out.est_ms = std::max(out.est_ms, g.est_ms);
    out.groups.push_back(std::move(g));
    pos += s.degree;
  }
  return out;
}

bool Searcher::Valid(const MicroBatch& mb) const {
  if (UsedRanks(mb) > n_) return false;
  for (const Slot& s : mb) {
    if (s.degree < 1 || s.gap < 0 || s.seqs.empty() || !Fits(s)) return false;
  }
  return true;
}

// Scores `s` from its view: the score, each rank's finish time (spread) and
// the critical chain: the groups that finish last and, back from each, the
// group whose end on a shared rank held up its start.
void Searcher::Evaluate(State& s) const {
  std::vector<std::vector<double>> starts;
  const double makespan = ListScheduleMs(n_, s.view, &starts);
  s.score = ScoreMs(r_, s.view, makespan, held_);
  using Ref = std::pair<int, int>;
  std::vector<double> finish(n_, 0.0);
  std::vector<Ref> owner(n_, {-1, -1});
  std::vector<std::vector<Ref>> blocker(s.view.size());
  std::vector<Ref> last;
  std::vector<std::pair<double, Ref>> ends;
  for (size_t m = 0; m < s.view.size(); ++m) {
    blocker[m].assign(s.view[m].groups.size(), {-1, -1});
    for (size_t i = 0; i < s.view[m].groups.size(); ++i) {
      const GroupPlan& g = s.view[m].groups[i];
      for (int rank : g.ranks) {
        if (finish[rank] > 0 && finish[rank] >= starts[m][i])
          blocker[m][i] = owner[rank];
      }
      const double end = starts[m][i] + g.est_ms;
      for (int rank : g.ranks) {
        finish[rank] = end;
        owner[rank] = {static_cast<int>(m), static_cast<int>(i)};
      }
      if (end >= makespan * (1 - 1e-9))
        last.emplace_back(static_cast<int>(m), static_cast<int>(i));
      ends.push_back({end, {static_cast<int>(m), static_cast<int>(i)}});
    }
  }
  const size_t first = std::min(ends.size(), kSlackGroups);
  std::partial_sort(ends.begin(), ends.begin() + first, ends.end());
  s.slack.clear();
  for (size_t k = 0; k < first; ++k) s.slack.push_back(ends[k].second);
  s.critical.clear();
  for (Ref at : last) {
    for (int hops = 0; at.first >= 0 && hops < kMaxChain; ++hops) {
      if (std::find(s.critical.begin(), s.critical.end(), at) !=
          s.critical.end())
        break;
      s.critical.push_back(at);
      at = blocker[at.first][at.second];
    }
  }
  double sq = 0;
  for (double f : finish) sq += f * f;
  s.spread = std::sqrt(sq / std::max(1, n_));
}

// The plan's micro-batches with each one's groups in rank order, laid out
// contiguously (gaps kept where they fit).
State Searcher::FromPlan(const Plan& plan, const std::string& name) const {
  State s;
  s.origin = name;
  for (const MicroBatchPlan& mbp : plan.micro_batches) {
    std::vector<const GroupPlan*> groups;
    for (const GroupPlan& g : mbp.groups)
      if (!g.sequences.empty()) groups.push_back(&g);
    std::stable_sort(groups.begin(), groups.end(), [](auto* a, auto* b) {
      return *std::min_element(a->ranks.begin(), a->ranks.end()) <
             *std::min_element(b->ranks.begin(), b->ranks.end());
    });
    MicroBatch mb;
    int pos = 0, rest = 0;
    for (const GroupPlan* g : groups) rest += g->degree();
    for (const GroupPlan* g : groups) {
      const int first = *std::min_element(g->ranks.begin(), g->ranks.end());
      Slot slot;
      slot.gap = std::max(0, std::min(first - pos, n_ - pos - rest));
      slot.degree = g->degree();
      slot.seqs = g->sequences;
      for (int k : slot.seqs) slot.load.Add(r_.sequences[k]);
      pos += slot.gap + slot.degree;
      rest -= slot.degree;
      mb.push_back(std::move(slot));
    }
    s.view.push_back(LayOut(mb));
    s.layout.push_back(std::move(mb));
  }
  Evaluate(s);
  return s;
}

std::optional<State> Searcher::OneGroup() const {
  Slot all;
  all.degree = n_;
  for (size_t k = 0; k < r_.sequences.size(); ++k) {
    all.seqs.push_back(static_cast<int>(k));
    all.load.Add(r_.sequences[k]);
  }
  if (!Fits(all)) return std::nullopt;
  State s;
  s.origin = "one group";
  s.layout = {{all}};
  s.view = {LayOut(s.layout[0])};
  Evaluate(s);
  return s;
}

bool Searcher::BudgetLeft(double fraction) const {
  if (o_.max_iterations > 0 &&
      iterations_ >= static_cast<int64_t>(fraction * o_.max_iterations))
    return false;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  return elapsed < fraction * o_.time_limit_s;
}

void Searcher::NoteBest(const State& s) {
  if (s.score < best_.score * (1 - 1e-12) ||
      (s.score <= best_.score && s.spread < best_.spread)) {
    if (s.score < best_.score * (1 - 1e-12) && best_.score < kInf)
      ++improvements_;
    best_ = s;
  }
}

void Searcher::Touch(State& s, int m) {
  for (const auto& saved : saved_)
    if (saved.first == m) return;
  if (m < static_cast<int>(size_before_))
    saved_.push_back({m, {s.layout[m], s.view[m]}});
}

void Searcher::Undo(State& s) {
  s.layout.resize(size_before_);
  s.view.resize(size_before_);
  for (auto& [m, old] : saved_) {
    s.layout[m] = std::move(old.first);
    s.view[m] = std::move(old.second);
  }
  saved_.clear();
}

// One random move on `s`; kept (true) when valid and its cost is at most
// `accept_below`, else undone.
bool Searcher::TryMove(State& s, double accept_below) {
  ++iterations_;
  saved_.clear();
  size_before_ = s.layout.size();
  const double old_score = s.score, old_spread = s.spread;
  const auto old_critical = s.critical;
  const auto old_slack = s.slack;
  bool ok = ApplyMoves(s);
  for (size_t m = 0; ok && m < s.layout.size(); ++m) {
    bool touched = m >= size_before_;
    for (const auto& saved : saved_)
      touched |= saved.first == static_cast<int>(m);
    if (!touched) continue;
    ok = Valid(s.layout[m]);
    if (ok) s.view[m] = LayOut(s.layout[m]);
  }
  if (ok) {
    Evaluate(s);
    if (s.cost() <= accept_below) {
      saved_.clear();
      return true;
    }
  }
  Undo(s);
  s.score = old_score;
  s.spread = old_spread;
  s.critical = old_critical;
  s.slack = old_slack;
  return false;
}

bool Searcher::ApplyRandomMove(State& s) {
  const int pick = Uniform(0, 99);
  if (pick < 21) return MoveSequence(s, false);
  if (pick < 34) return MoveSequence(s, true);
  if (pick < 52) return Resize(s);
  if (pick < 60) return RebuildWindow(s);
  if (pick < 68) return Split(s);
  if (pick < 76) return Merge(s);
  if (pick < 81) return Reorder(s);
  if (pick < 85) return ShiftGap(s);
  if (pick < 88) return SplitInTime(s);
  if (pick < 97) return MoveGroup(s);
  return SequenceToNewMicroBatch(s);
}

// One move, or now and then two scored as one (a sequence moved and ranks
// moved after it, say), which crosses barriers that each move alone meets.
bool Searcher::ApplyMoves(State& s) {
  if (!ApplyRandomMove(s)) return false;
  return !Chance(kCompoundShare) || ApplyRandomMove(s);
}

void Searcher::Descend(State& s, double until) {
  NoteBest(s);
  while (BudgetLeft(until)) {
    if (TryMove(s, s.cost())) NoteBest(s);
  }
}

void Searcher::LateAcceptance(State& s, double until) {
  std::vector<double> history(kHistory, s.cost());
  for (size_t v = 0; BudgetLeft(until); v = (v + 1) % kHistory) {
    if (TryMove(s, std::max(s.cost(), history[v]))) NoteBest(s);
    history[v] = s.cost();
  }
}

void Searcher::Run(std::vector<State> starts) {
  for (size_t i = 0; i < starts.size(); ++i)
    Descend(starts[i], kDescentShare * (i + 1) / starts.size());
  State from = best_;
  LateAcceptance(from, 1.0);
}

std::pair<int, int> Searcher::PickSlot(const State& s, bool prefer_critical) {
  if (prefer_critical && !s.critical.empty() && Chance(0.6)) {
    const auto [m, i] =
        s.critical[Uniform(0, static_cast<int>(s.critical.size()) - 1)];
    // (A first move of a compound one may have changed the micro-batch.)
    if (Exists(s, m, i)) return {m, i};
  }
  int total = 0;
  for (const MicroBatch& mb : s.layout) total += static_cast<int>(mb.size());
  if (total == 0) return {-1, -1};
  int k = Uniform(0, total - 1);
  for (size_t m = 0; m < s.layout.size(); ++m) {
    const int size = static_cast<int>(s.layout[m].size());
    if (k < size) return {static_cast<int>(m), k};
    k -= size;
  }
  return {-1, -1};
}

int Searcher::NonEmptyMicroBatches(const State& s) const {
  int count = 0;
  for (const MicroBatch& mb : s.layout) count += mb.empty() ? 0 : 1;
  return count;
}

int Searcher::MicroBatchLimit() const {
  const int k = static_cast<int>(r_.sequences.size());
  return o_.max_micro_batches > 0 ? std::min(o_.max_micro_batches, k) : k;
}

// Moves one sequence of a group (the last to finish, more often than not) to
// another group, or swaps it with one of that group's.
bool Searcher::MoveSequence(State& s, bool swap) {
  const auto [m, i] = PickSlot(s, true);
  if (m < 0) return false;
  const int same_size = static_cast<int>(s.layout[m].size());
  const double target = std::uniform_real_distribution<double>(0, 1)(rng_);
  const auto [m2, j] =
      target < 0.35 && !s.slack.empty()
          ? s.slack[Uniform(0, static_cast<int>(s.slack.size()) - 1)]
      : target < 0.7 && same_size > 1 ? std::pair{m, Uniform(0, same_size - 1)}
                                      : PickSlot(s, false);
  if (!Exists(s, m2, j) || (m == m2 && i == j)) return false;
  Touch(s, m);
  Touch(s, m2);
  Slot& a = s.layout[m][i];
  Slot& b = s.layout[m2][j];
  const int ai = Uniform(0, static_cast<int>(a.seqs.size()) - 1);
  const int k = a.seqs[ai];
  a.seqs.erase(a.seqs.begin() + ai);
  a.load.Remove(r_.sequences[k]);
  if (swap) {
    const int bi = Uniform(0, static_cast<int>(b.seqs.size()) - 1);
    const int k2 = b.seqs[bi];
    b.seqs.erase(b.seqs.begin() + bi);
    b.load.Remove(r_.sequences[k2]);
    a.seqs.push_back(k2);
    a.load.Add(r_.sequences[k2]);
  }
  b.seqs.push_back(k);
  b.load.Add(r_.sequences[k]);
  if (a.seqs.empty()) RemoveSlot(s.layout[m], i);
  return true;
}

// Moves `delta` ranks from a donor (idle ranks, or another group of the
// micro-batch) to a group, or from the group to idle ranks or another group.
bool Searcher::Resize(State& s) {
  const bool grow = Chance(0.5);
  const auto [m, i] = PickSlot(s, grow);
  if (m < 0) return false;
  Touch(s, m);
  MicroBatch& mb = s.layout[m];
  const int R = r_.cluster.ranks_per_node;
  const int sizes[] = {1, 1, 2, 4, std::max(1, R / 2), R, mb[i].degree};
  const int delta = sizes[Uniform(0, 6)];
  const int size = static_cast<int>(mb.size());
  const bool via_idle = size == 1 || Chance(0.4);
  int other = via_idle ? -1 : (i + Uniform(1, size - 1)) % size;
  if (!via_idle && Chance(0.5)) {  // a group of the micro-batch that has slack
    for (const auto& [sm, si] : s.slack)
      if (sm == m && si != i && Exists(s, sm, si)) other = si;
  }
  if (grow) {
    if (other < 0) {
      mb[i].degree += delta;
      return UsedRanks(mb) <= n_ || SqueezeGaps(mb, UsedRanks(mb) - n_, i);
    }
    if (mb[other].degree <= delta) return false;
    mb[other].degree -= delta;
    mb[i].degree += delta;
    return true;
  }
  if (mb[i].degree <= delta) return false;
  mb[i].degree -= delta;
  if (other >= 0) {
    mb[other].degree += delta;
  } else if (i + 1 < size && Chance(0.5)) {
    mb[i + 1].gap += delta;
  } else {
    mb[i].gap += delta;
  }
  return true;
}

// Splits a group's sequences in two (longest-processing-time halves, or its
// heaviest sequence alone) over its ranks in proportion to their work.
bool Searcher::Split(State& s) {
  const auto [m, i] = PickSlot(s, true);
  if (m < 0 || s.layout[m][i].seqs.size() < 2) return false;
  Touch(s, m);
  MicroBatch& mb = s.layout[m];
  std::vector<int> seqs = mb[i].seqs;
  auto work = [&](int k) {
    return fcp::WorkS(r_.cost, GroupLoad::Of(r_.sequences[k]));
  };
  std::shuffle(seqs.begin(), seqs.end(), rng_);
  std::stable_sort(seqs.begin(), seqs.end(),
                   [&](int a, int b) { return work(a) > work(b); });
  Slot left, right;
  const bool peel = Chance(0.3);
  double wl = 0, wr = 0;
  for (int k : seqs) {
    const bool to_left = peel ? left.seqs.empty() : wl <= wr;
    Slot& half = to_left ? left : right;
    half.seqs.push_back(k);
    half.load.Add(r_.sequences[k]);
    (to_left ? wl : wr) += work(k);
  }
  const int d = mb[i].degree;
  left.gap = mb[i].gap;
  if (d >= 2) {
    left.degree = std::clamp(
        static_cast<int>(std::lround(d * wl / std::max(wl + wr, 1e-300))), 1,
        d - 1);
    right.degree = d - left.degree;
  } else {
    left.degree = right.degree = 1;
  }
  mb[i] = std::move(left);
  mb.insert(mb.begin() + i + 1, std::move(right));
  return UsedRanks(mb) <= n_ || SqueezeGaps(mb, UsedRanks(mb) - n_, i);
}

// Merges a group with a neighbour (or another group) of its micro-batch; the
// merged group holds both groups' ranks.
bool Searcher::Merge(State& s) {
  const auto [m, i] = PickSlot(s, false);
  if (m < 0 || s.layout[m].size() < 2) return false;
  Touch(s, m);
  MicroBatch& mb = s.layout[m];
  const int size = static_cast<int>(mb.size());
  int j = Chance(0.7) ? (i + 1 < size ? i + 1 : i - 1)
                      : (i + Uniform(1, size - 1)) % size;
  Slot gone = mb[j];
  RemoveSlot(mb, j);
  const int keep = j < i ? i - 1 : i;
  for (int k : gone.seqs) {
    mb[keep].seqs.push_back(k);
    mb[keep].load.Add(r_.sequences[k]);
  }
  mb[keep].degree += gone.degree;
  return UsedRanks(mb) <= n_ || SqueezeGaps(mb, UsedRanks(mb) - n_, keep);
}

// Swaps two groups of a micro-batch (their gaps stay), or moves one to
// another place in its order: which ranks, and which node, each group gets.
bool Searcher::Reorder(State& s) {
  const auto [m, i] = PickSlot(s, false);
  if (m < 0 || s.layout[m].size() < 2) return false;
  Touch(s, m);
  MicroBatch& mb = s.layout[m];
  const int size = static_cast<int>(mb.size());
  const int j = (i + Uniform(1, size - 1)) % size;
  if (Chance(0.5)) {
    std::swap(mb[i].degree, mb[j].degree);
    std::swap(mb[i].seqs, mb[j].seqs);
    std::swap(mb[i].load, mb[j].load);
  } else {
    Slot moved = mb[i];
    moved.gap = 0;
    RemoveSlot(mb, i);
    const int at = std::min(j, size - 1);
    mb.insert(mb.begin() + at, std::move(moved));
    const int excess = UsedRanks(mb) - n_;
    return excess <= 0 || SqueezeGaps(mb, excess, at);
  }
  return true;
}

// Moves idle ranks from one gap to another (or to the end).
bool Searcher::ShiftGap(State& s) {
  const auto [m, i] = PickSlot(s, false);
  if (m < 0) return false;
  Touch(s, m);
  MicroBatch& mb = s.layout[m];
  const int size = static_cast<int>(mb.size());
  const int trailing = n_ - UsedRanks(mb);
  if (mb[i].gap > 0 && Chance(0.5)) {
    const int x = Uniform(1, mb[i].gap);
    mb[i].gap -= x;
    const int j = Uniform(0, size);
    if (j < size) mb[j].gap += x;
    return true;
  }
  if (trailing <= 0) return false;
  mb[i].gap += Uniform(1, trailing);
  return true;
}

// Moves a group to another micro-batch (a new one, sometimes), or swaps it
// with a group there.
bool Searcher::MoveGroup(State& s) {
  const auto [m, i] = PickSlot(s, true);
  if (m < 0) return false;
  int m2;
  if (NonEmptyMicroBatches(s) < MicroBatchLimit() && Chance(0.2)) {
    m2 = static_cast<int>(s.layout.size());
    s.layout.emplace_back();
    s.view.emplace_back();
  } else {
    if (s.layout.size() < 2) return false;
    m2 = (m + Uniform(1, static_cast<int>(s.layout.size()) - 1)) %
         static_cast<int>(s.layout.size());
  }
  Touch(s, m);
  Touch(s, m2);
  MicroBatch& to = s.layout[m2];
  Slot moved = s.layout[m][i];
  moved.gap = 0;
  const int at = Uniform(0, static_cast<int>(to.size()));
  if (!to.empty() && Chance(0.5)) {
    const int j = std::min(at, static_cast<int>(to.size()) - 1);
    Slot back = to[j];
    back.gap = s.layout[m][i].gap;
    moved.gap = to[j].gap;
    to[j] = std::move(moved);
    s.layout[m][i] = std::move(back);
  } else {
    RemoveSlot(s.layout[m], i);
    to.insert(to.begin() + at, std::move(moved));
  }
  for (const int k : {m, m2}) {
    MicroBatch& mb = s.layout[k];
    const int excess = UsedRanks(mb) - n_;
    if (excess > 0 && !SqueezeGaps(mb, excess, k == m2 ? at : i)) return false;
  }
  return true;
}

// Takes one sequence of a group that finishes last into a new micro-batch,
// on the fewest ranks that hold it or on a whole node.
bool Searcher::SequenceToNewMicroBatch(State& s) {
  if (NonEmptyMicroBatches(s) >= MicroBatchLimit()) return false;
  const auto [m, i] = PickSlot(s, true);
  if (m < 0 || s.layout[m][i].seqs.size() < 2) return false;
  Touch(s, m);
  Slot& a = s.layout[m][i];
  const int ai = Uniform(0, static_cast<int>(a.seqs.size()) - 1);
  Slot alone;
  alone.seqs = {a.seqs[ai]};
  alone.load = GroupLoad::Of(r_.sequences[a.seqs[ai]]);
  a.seqs.erase(a.seqs.begin() + ai);
  a.load.Remove(r_.sequences[alone.seqs[0]]);
  const int64_t dmin = MinDegree(r_.cost, alone.load);
  if (dmin > n_) return false;
  alone.degree = Chance(0.5)
                     ? static_cast<int>(dmin)
                     : std::max<int>(static_cast<int>(dmin),
                                     std::min(n_, r_.cluster.ranks_per_node));
  s.layout.push_back({std::move(alone)});
  s.view.emplace_back();
  return true;
}

// Moves half of a group's sequences (longest-processing-time halves) to a new
// last micro-batch, on the same ranks: the group's work split in time, not
// space, which halves its memory and opens splits that memory refused.
bool Searcher::SplitInTime(State& s) {
  if (NonEmptyMicroBatches(s) >= MicroBatchLimit()) return false;
  const auto [m, i] = PickSlot(s, true);
  if (m < 0 || s.layout[m][i].seqs.size() < 2) return false;
  Touch(s, m);
  Slot& a = s.layout[m][i];
  std::vector<int> seqs = a.seqs;
  auto work = [&](int k) {
    return fcp::WorkS(r_.cost, GroupLoad::Of(r_.sequences[k]));
  };
  std::stable_sort(seqs.begin(), seqs.end(),
                   [&](int x, int y) { return work(x) > work(y); });
  Slot later;
  later.degree = a.degree;
  a.seqs.clear();
  a.load = GroupLoad{};
  double wa = 0, wl = 0;
  for (int k : seqs) {
    Slot& half = wa <= wl ? a : later;
    (wa <= wl ? wa : wl) += work(k);
    half.seqs.push_back(k);
    half.load.Add(r_.sequences[k]);
  }
  for (int j = 0; j < i; ++j)
    later.gap += s.layout[m][j].gap + s.layout[m][j].degree;
  later.gap += a.gap;
  s.layout.push_back({std::move(later)});
  s.view.emplace_back();
  return true;
}

// Ruin and recreate: the sequences of up to four adjacent groups of a
// micro-batch (around one on the critical chain) dealt again, longest-
// processing-time first, onto a random number of new groups whose degrees
// share the window's ranks in proportion to their work.
bool Searcher::RebuildWindow(State& s) {
  const auto [m, i] = PickSlot(s, true);
  if (m < 0) return false;
  Touch(s, m);
  MicroBatch& mb = s.layout[m];
  const int size = static_cast<int>(mb.size());
  const int width = Uniform(1, 4);
  int a = i, b = i + 1;
  while (b - a < width && (a > 0 || b < size)) {
    if (b >= size || (a > 0 && Chance(0.5))) {
      --a;
    } else {
      ++b;
    }
  }
  int ranks = 0;
  std::vector<int> seqs;
  for (int j = a; j < b; ++j) {
    ranks += (j > a ? mb[j].gap : 0) + mb[j].degree;
    seqs.insert(seqs.end(), mb[j].seqs.begin(), mb[j].seqs.end());
  }
  auto work = [&](int k) {
    return fcp::WorkS(r_.cost, GroupLoad::Of(r_.sequences[k]));
  };
  std::stable_sort(seqs.begin(), seqs.end(),
                   [&](int x, int y) { return work(x) > work(y); });
  const int count = Uniform(1, std::min(static_cast<int>(seqs.size()), ranks));
  std::vector<Slot> fresh(count);
  std::vector<double> load(count, 0);
  for (int k : seqs) {
    const int j = static_cast<int>(std::min_element(load.begin(), load.end()) -
                                   load.begin());
    load[j] += work(k);
    fresh[j].seqs.push_back(k);
    fresh[j].load.Add(r_.sequences[k]);
  }
  double total = 0;
  for (double w : load) total += w;
  int given = 0;
  for (int j = 0; j < count; ++j) {
    fresh[j].degree =
        std::max(1, static_cast<int>(
                        std::floor(ranks * load[j] / std::max(total, 1e-300))));
    given += fresh[j].degree;
  }
  for (int j = 0; given < ranks; j = (j + 1) % count, ++given)
    ++fresh[j].degree;
  if (given > ranks) return false;
  fresh[0].gap = mb[a].gap;
  mb.erase(mb.begin() + a, mb.begin() + b);
  mb.insert(mb.begin() + a, fresh.begin(), fresh.end());
  return true;
}

}  // namespace local_search_internal

double SearchScoreMs(const PlanRequest& request, const Plan& plan) {
  return local_search_internal::ScoreMs(
      request, plan.micro_batches, plan.est_ms,
      local_search_internal::ChargedRankSets(request));
}

std::vector<SearchStart> DefaultSearchStarts(const PlanRequest& request) {
  std::vector<SearchStart> starts;
  for (const char* name : {"fcp", "ref-share", "ref-bisect", "ref-grow",
                           "megatron", "deepspeed"}) {
    if (FindStrategy(name) == nullptr) continue;
    PlanOptions options;
    options.strategy = name;
    Plan plan = MakePlan(request, options);
    if (plan.status == PlanStatus::kOk)
      starts.push_back({name, std::move(plan)});
  }
  return starts;
}

namespace local_search_internal {

void CheckOptions(const LocalSearchOptions& options) {
  if (!(options.time_limit_s > 0) || !std::isfinite(options.time_limit_s))
    throw InputError("time_limit_s", "must be a finite number > 0");
  if (options.max_iterations < 0)
    throw InputError("max_iterations", "must be >= 0 (0 = no limit)");
  if (options.max_micro_batches < 0)
    throw InputError("max_micro_batches", "must be >= 0 (0 = no limit)");
}

// The searched state as a Plan, evaluated and checked.
Plan ToPlan(const PlanRequest& request, const local_search_internal::State& s) {
  Plan plan;
  plan.strategy = "search";
  for (const MicroBatchPlan& mb : s.view)
    if (!mb.groups.empty()) plan.micro_batches.push_back(mb);
  EvaluatePlan(request, plan);
  const std::string violation = ValidatePlan(request, plan);
  const double score = SearchScoreMs(request, plan);
  if (!violation.empty() || std::abs(score - s.score) > 1e-9 * s.score) {
    throw std::logic_error("local search: plan from " + s.origin +
                           " is invalid or mis-scored: " + violation);
  }
  return plan;
}

}  // namespace local_search_internal

LocalSearchResult LocalSearch(const PlanRequest& request,
                              const std::vector<SearchStart>& starts,
                              const LocalSearchOptions& options) {
  local_search_internal::CheckOptions(options);
  const auto begin = std::chrono::steady_clock::now();
  LocalSearchResult result;
  const int bad = FirstNotFitting(request, request.cluster.num_ranks);
  if (bad >= 0) {
    result.plan =
        InfeasiblePlan("search", request, bad, "does not fit on all N ranks");
    return result;
  }
  local_search_internal::Searcher searcher(request, options);
  std::vector<local_search_internal::State> states;
  const int limit = options.max_micro_batches;
  for (const SearchStart& start : starts) {
    Plan given = start.plan;
    EvaluatePlan(request, given);
    result.start_scores_ms.emplace_back(start.name,
                                        SearchScoreMs(request, given));
    if (limit > 0 && static_cast<int>(given.micro_batches.size()) > limit)
      continue;
    states.push_back(searcher.FromPlan(given, start.name));
  }
  if (auto one = searcher.OneGroup()) states.push_back(std::move(*one));
  if (states.empty())
    throw InputError("starts", "no start plan within max_micro_batches");
  searcher.Run(std::move(states));
  const local_search_internal::State& best = searcher.best();
  result.plan = local_search_internal::ToPlan(request, best);
  result.score_ms = best.score;
  result.origin = best.origin;
  if (options.keep_starts) {
    for (size_t i = 0; i < starts.size(); ++i) {
      if (result.start_scores_ms[i].second < result.score_ms) {
        result.score_ms = result.start_scores_ms[i].second;
        result.plan = starts[i].plan;
        EvaluatePlan(request, result.plan);
        result.origin = starts[i].name + " (as given)";
      }
    }
  }
  result.plan.notes["origin"] = result.origin;
  result.plan.notes["reference"] = "local search (not the fcp planner)";
  result.iterations = searcher.iterations();
  result.improvements = searcher.improvements();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  return result;
}

}  // namespace fcp::baselines
