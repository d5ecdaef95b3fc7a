// `flexsp`: FlexSP as Hetu-Galvatron's FlexSP solver runs it (docs/baselines.md
// cites the functions): several micro-batch counts starting from the fewest
// valid one, the global batch sorted and cut into consecutive chunks of
// balanced tokens, lengths bucketed, and per micro-batch a MILP over bucket
// counts that forms power-of-two Ulysses groups. Everything, set-up included,
// runs against one wall-clock deadline (PlanOptions::time_limit_s, counted
// from PlanOptions::started): the search for the fewest count, the further
// counts and the MILPs each run only while the deadline leaves room for them
// and for finishing; what is always done is O(K) passes, a radix sort and one
// greedy packing. notes.deadline says where the deadline stopped the work.
#include "baselines/flexsp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <coin/CbcEventHandler.hpp>
#include <coin/CbcModel.hpp>
#include <coin/ClpEventHandler.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "baselines/common.h"
#include "baselines/dynamic.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {
namespace {

using Clock = std::chrono::steady_clock;

// Galvatron's defaults: mb_option_num = 5 micro-batch counts, bucket_num = 16.
constexpr int kMicroBatchOptions = 5;
constexpr int kBuckets = 16;
// Candidate bucket boundaries for the padding DP (distinct lengths, or this
// many quantiles of them): bounds the DP at O(kBuckets · kBoundaryCandidates²).
constexpr int kBoundaryCandidates = 128;
// A MILP larger than this many columns is not built (the greedy packing is
// kept): bounds model construction and CBC's root solve, which its time
// limit does not interrupt.
constexpr int kMaxMilpColumns = 20000;
// Below this share of the deadline a MILP is not started.
constexpr double kMinMilpSeconds = 0.002;
// When the deadline split over every micro-batch would give each MILP less
// than this, the MILPs get this much each, in order, while time is left (the
// rest keep their greedy packing), rather than all being skipped.
constexpr double kMilpShareFloorSeconds = 0.01;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Everything below works on positions in the batch sorted longest first
// (`seq`, `cp`: contiguous, so that the O(K) passes do not chase indices);
// the plan maps positions back to sequence indices.
struct Context {
  const PlanRequest& req;
  ModelShape shape;
  std::vector<Sequence> seq;  // the sequences, longest first
  std::vector<int64_t> cp;    // power-of-two Ulysses size each one needs
  int64_t max_size =
      1;  // largest allowed Ulysses size (power of two | q_heads, <= N)
  double headroom_tokens;  // tokens one rank holds
  std::vector<double>
      bw_of_size;  // [c]: BwFor, filled for powers of two <= max_size
};

// The all-to-all bandwidth of a group of `c` ranks (a power of two <=
// max_size) placed aligned from rank 0, as EvaluatePlan computes it for a
// placement (AllToAllBandwidthOnRange), so that the solver ranks packings by
// the planner's own formula.
double BwFor(const Context& ctx, int c) { return ctx.bw_of_size.at(c); }

// A micro-batch's groups: (size, members).
using Groups = std::vector<std::pair<int, std::vector<int>>>;

// The greedy packing (also the MILP's warm start): every sequence needing
// more than one rank gets its own group of its power-of-two size; the others
// go, longest first, next-fit onto single ranks. Empty when it needs more
// than N ranks. O(m).
// `padded`, when given, maps a sequence to the length to pack it with (its
// bucket boundary).
// Long because: Galvatron's greedy packing rule by rule; the grouped, next-fit
// and capacity steps share the packing state.
Groups GreedyPacking(const Context& ctx, const std::vector<int>& seqs,
                     const std::unordered_map<int, int64_t>* padded = nullptr) {
  const int n = ctx.req.cluster.num_ranks;
  auto len_of = [&](int k) {
    return static_cast<double>(padded ? padded->at(k)
                                      : ctx.seq[k].length_tokens);
  };
  // Next-fit decides feasibility. Only the long sequences' groups are built
  // here; the single ranks are recorded by where each opens (`opens`) and
  // built only if the dealing below fails (allocation dominated at 10^6).
  Groups longs;
  std::vector<int> shorts;
  std::vector<size_t>
      opens;  // positions in `shorts` where a new single rank opens
  int used = 0;
  double open_tokens = 0;
  bool open = false;
  for (int k : seqs) {  // seqs are sorted longest first
    const double len = len_of(k);
    if (ctx.cp[k] > 1) {
      used += static_cast<int>(ctx.cp[k]);
      longs.push_back({static_cast<int>(ctx.cp[k]), {k}});
      open = false;
    } else if (open && open_tokens + len <= ctx.headroom_tokens) {
      open_tokens += len;
      shorts.push_back(k);
    } else {
      ++used;
      open = true;
      open_tokens = len;
      opens.push_back(shorts.size());
      shorts.push_back(k);
    }
    if (used > n) return {};
  }
  // The short sequences are then dealt, longest first, to the least-loaded of
  // all free single ranks (by single-rank time), which balances them; if that
  // overflows a rank's memory the next-fit packing stays. O(m log N).
  int free_ranks = n;
  for (const auto& g : longs) free_ranks -= g.first;
  // More slots than short sequences would stay empty: O(m) slots, not O(N).
  free_ranks = std::min(free_ranks, static_cast<int>(shorts.size()));
  Groups balanced = std::move(longs);
  bool dealt_ok = !shorts.empty() && free_ranks > 0;
  std::vector<std::vector<int>> dealt(std::max(free_ranks, 0));
  if (dealt_ok) {
    using Slot = std::pair<double, int>;  // (load s, slot)
    std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
    for (int r = 0; r < free_ranks; ++r) heap.push({0.0, r});
    std::vector<double> tokens(free_ranks, 0);
    for (int k : shorts) {
      auto [load, r] = heap.top();
      heap.pop();
      Sequence s = ctx.seq[k];
      s.length_tokens = static_cast<int64_t>(len_of(k));
      tokens[r] += len_of(k);
      if (tokens[r] > ctx.headroom_tokens) {
        dealt_ok = false;  // keep the next-fit packing
        break;
      }
      dealt[r].push_back(k);
      heap.push(
          {load + AllToAllGroupTimeS(ctx.req.cost, ctx.shape, GroupLoad::Of(s),
                                     1, ctx.req.cost.bw_intra_node),
           r});
    }
  }
  if (dealt_ok) {
    for (auto& d : dealt) {
      if (!d.empty()) balanced.push_back({1, std::move(d)});
    }
  } else {
    for (size_t i = 0; i < opens.size(); ++i) {
      const size_t end = i + 1 < opens.size() ? opens[i + 1] : shorts.size();
      balanced.push_back({1, std::vector<int>(shorts.begin() + opens[i],
                                              shorts.begin() + end)});
    }
  }
  // Ranks still idle go to the slowest groups: the slowest group doubles its
  // (power-of-two) size while enough ranks are free, as the MILP would. O(N log
  // N).
  int idle = n;
  for (const auto& g : balanced) idle -= g.first;
  auto time_of = [&](const std::pair<int, std::vector<int>>& g) {
    GroupLoad load;
    for (int k : g.second) load.Add(ctx.seq[k]);
    return AllToAllGroupTimeS(ctx.req.cost, ctx.shape, load, g.first,
                              BwFor(ctx, g.first));
  };
  std::priority_queue<std::pair<double, int>> slowest;
  for (size_t i = 0; idle > 0 && i < balanced.size(); ++i) {
    slowest.push({time_of(balanced[i]), static_cast<int>(i)});
  }
  while (idle > 0 && !slowest.empty()) {
    const int i = slowest.top().second;
    slowest.pop();
    auto& g = balanced[i];
    if (2 * g.first > ctx.max_size || g.first > idle)
      continue;  // cannot grow: next one
    const double before = time_of(g);
    g.first *= 2;
    const double after = time_of(g);
    if (after >= before) {  // doubling does not help this group
      g.first /= 2;
      continue;
    }
    idle -= g.first / 2;
    slowest.push({after, i});
  }
  return balanced;
}

// A uniform packing: floor(N / c) Ulysses groups of one size c, the
// sequences dealt longest first, each to the group with the least estimated
// time whose memory still holds it (list scheduling). Every such packing lies
// in FlexSP's search space (static Ulysses at degree c is one of them), so
// the solver's incumbent starts no worse than the best of them. Empty when
// a sequence needs more than c ranks or fits no group. O(m log(N/c)), plus
// a scan of the groups for a sequence that the least loaded one cannot hold.
Groups UniformPacking(
    const Context& ctx, const std::vector<int>& seqs, int c,
    const std::unordered_map<int, int64_t>* padded = nullptr) {
  const int count = ctx.req.cluster.num_ranks / c;
  if (count < 1 || seqs.empty()) return {};
  const int slots =
      std::min(count, static_cast<int>(seqs.size()));  // the rest stay empty
  const double bw = BwFor(ctx, c);
  std::vector<GroupLoad> load(slots);
  std::vector<double> tokens(slots, 0);
  Groups groups(slots, {c, {}});
  using Slot = std::pair<double, int>;  // (estimated time s, slot)
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
  for (int g = 0; g < slots; ++g) heap.push({0.0, g});
  std::vector<Slot> skipped;
  for (int k : seqs) {
    if (ctx.cp[k] > c) return {};
    Sequence s = ctx.seq[k];
    if (padded) s.length_tokens = padded->at(k);
    const double len = static_cast<double>(s.length_tokens);
    skipped.clear();
    while (!heap.empty() &&
           tokens[heap.top().second] + len > c * ctx.headroom_tokens) {
      skipped.push_back(heap.top());
      heap.pop();
    }
    if (heap.empty()) return {};
    const int g = heap.top().second;
    heap.pop();
    for (const Slot& slot : skipped) heap.push(slot);
    load[g].Add(s);
    tokens[g] += len;
    groups[g].second.push_back(k);
    heap.push({AllToAllGroupTimeS(ctx.req.cost, ctx.shape, load[g], c, bw), g});
  }
  return groups;
}

// The group sizes a micro-batch may use uniformly: powers of two from the
// largest one its sequences need (the first: sorted longest first) up to the
// largest allowed size.
std::vector<int> UniformSizes(const Context& ctx,
                              const std::vector<int>& seqs) {
  std::vector<int> sizes;
  if (seqs.empty()) return sizes;
  for (int64_t c = ctx.cp[seqs.front()]; c <= ctx.max_size; c *= 2) {
    sizes.push_back(static_cast<int>(c));
  }
  return sizes;
}

// A micro-batch's estimate (s) as EvaluatePlan computes it for these groups
// placed largest first from rank 0: the slowest group's all-to-all time.
double MicroBatchEstimateS(const Context& ctx, Groups& groups) {
  std::stable_sort(
      groups.begin(), groups.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  double worst = 0;
  int first = 0;
  for (const auto& [size, members] : groups) {
    GroupLoad load;
    for (int k : members) load.Add(ctx.seq[k]);
    worst = std::max(
        worst,
        AllToAllGroupTimeS(ctx.req.cost, ctx.shape, load, size,
                           AllToAllBandwidthOnRange(
                               ctx.req.cost, ctx.req.cluster, first, size)));
    first += size;
  }
  return worst;
}

// bucketing_seqs: B buckets of consecutive (sorted) lengths minimising the
// padding Σ (boundary - s), boundary = the bucket's longest. Exact DP over the
// distinct lengths, or over kBoundaryCandidates quantiles when there are more.
// Returns, per bucket, its members (sorted longest first).
std::vector<std::vector<int>> Bucketize(const Context& ctx,
                                        std::vector<int> seqs) {
  auto len = [&](int k) { return ctx.seq[k].length_tokens; };
  std::sort(seqs.begin(), seqs.end(),
            [&](int a, int b) { return len(a) < len(b); });
  // Candidate cut points: indices i where a bucket may end (after seqs[i-1]).
  std::vector<int> cuts;
  for (size_t i = 1; i <= seqs.size(); ++i) {
    if (i == seqs.size() || len(seqs[i]) != len(seqs[i - 1]))
      cuts.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(cuts.size()) > kBoundaryCandidates) {
    std::vector<int> thin;
    for (int q = 1; q <= kBoundaryCandidates; ++q) {
      thin.push_back(
          cuts[(static_cast<size_t>(q) * cuts.size()) / kBoundaryCandidates -
               1]);
    }
    thin.erase(std::unique(thin.begin(), thin.end()), thin.end());
    cuts = thin;
  }
  const int c = static_cast<int>(cuts.size());
  std::vector<double> prefix(seqs.size() + 1, 0);
  for (size_t i = 0; i < seqs.size(); ++i)
    prefix[i + 1] = prefix[i] + static_cast<double>(len(seqs[i]));
  auto pad = [&](int from, int to) {  // positions [from, to)
    return static_cast<double>(len(seqs[to - 1])) * (to - from) -
           (prefix[to] - prefix[from]);
  };
  const int b_max = std::min(kBuckets, c);
  const double inf = std::numeric_limits<double>::infinity();
  // dp[b][j]: best padding with b buckets covering [0, cuts[j]).
  std::vector<std::vector<double>> dp(b_max + 1, std::vector<double>(c, inf));
  std::vector<std::vector<int>> from(b_max + 1, std::vector<int>(c, -1));
  for (int j = 0; j < c; ++j) dp[1][j] = pad(0, cuts[j]);
  for (int b = 2; b <= b_max; ++b) {
    for (int j = 0; j < c; ++j) {
      for (int i = 0; i < j; ++i) {
        const double v = dp[b - 1][i] + pad(cuts[i], cuts[j]);
        if (v < dp[b][j]) dp[b][j] = v, from[b][j] = i;
      }
    }
  }
  int best_b = 1;
  for (int b = 1; b <= b_max; ++b) {
    if (dp[b][c - 1] < dp[best_b][c - 1]) best_b = b;
  }
  std::vector<std::vector<int>> buckets;
  int j = c - 1;
  for (int b = best_b; b >= 1; --b) {
    const int start = b == 1 ? 0 : cuts[from[b][j]];
    std::vector<int> members(seqs.begin() + start, seqs.begin() + cuts[j]);
    std::reverse(members.begin(), members.end());
    buckets.push_back(std::move(members));
    if (b > 1) j = from[b][j];
  }
  return buckets;
}

// CBC checks its own time limit only between some phases; this handler stops
// the search at the next event (node, solution, heuristic pass, cuts) once the
// slot's deadline has passed.
class DeadlineHandler final : public CbcEventHandler {
 public:
  explicit DeadlineHandler(Clock::time_point deadline) : deadline_(deadline) {}
  CbcAction event(CbcEvent /*which*/) override {
    return Clock::now() > deadline_ ? stop : noAction;
  }
  CbcEventHandler* clone() const override { return new DeadlineHandler(*this); }

 private:
  Clock::time_point deadline_;
};

// The same for Clp's simplex iterations inside one node (strong branching and
// node LPs have no CBC event): a non-negative return stops the LP.
class LpDeadlineHandler final : public ClpEventHandler {
 public:
  explicit LpDeadlineHandler(Clock::time_point deadline)
      : deadline_(deadline) {}
  int event(Event which) override {
    return which == endOfIteration && Clock::now() > deadline_ ? 5 : -1;
  }
  ClpEventHandler* clone() const override {
    return new LpDeadlineHandler(*this);
  }

 private:
  Clock::time_point deadline_;
};

struct MbSolve {
  Groups groups;
  std::string status;  // optimal | time_limit | stopped | greedy(...)
};

// solve_flexSP_bucket_seqs' variables for one micro-batch: the buckets
// (lengths count at their bucket's boundary, its longest, so that a solution
// is safe for memory and pessimistic in time), slots g of power-of-two size
// c_g (dividing q_heads), and the column of each integer n_bg (how many
// sequences of bucket b run in slot g); columns [0, ns) are the slots'
// binaries u_g, z_col the makespan z.
struct BucketModel {
  std::vector<std::vector<int>> buckets;
  std::vector<int64_t> boundary;      // [b]: the bucket's longest length
  std::vector<double> eta;            // [b]: the bucket's largest eta
  std::vector<int64_t> need;          // [b]: the largest size a member needs
  std::vector<int> slot_size;         // [g]
  std::vector<std::vector<int>> col;  // [b][g]: n_bg's column, -1 when none
  int ncols = 0;
  int z_col = 0;
  int nb() const { return static_cast<int>(buckets.size()); }
  int ns() const { return static_cast<int>(slot_size.size()); }
};

// The buckets, slots and columns of `seqs`; nullopt when the model would
// exceed kMaxMilpColumns.
std::optional<BucketModel> MakeBucketModel(const Context& ctx,
                                           const std::vector<int>& seqs) {
  const int n = ctx.req.cluster.num_ranks;
  BucketModel m;
  m.buckets = Bucketize(ctx, seqs);
  const int nb = m.nb();
  m.boundary.resize(nb);
  m.eta.assign(nb, 0);
  m.need.resize(nb);
  for (int b = 0; b < nb; ++b) {
    m.boundary[b] = ctx.seq[m.buckets[b].front()].length_tokens;
    for (int k : m.buckets[b]) m.eta[b] = std::max(m.eta[b], ctx.seq[k].eta);
    m.need[b] = 1;
    for (int k : m.buckets[b]) m.need[b] = std::max(m.need[b], ctx.cp[k]);
  }
  for (int c = 1; c <= n && ctx.shape.q_heads % c == 0; c *= 2) {
    int fit = 0;
    for (int b = 0; b < nb; ++b)
      fit += m.need[b] <= c ? static_cast<int>(m.buckets[b].size()) : 0;
    const int count = std::min(fit, n / c);
    for (int i = 0; i < count; ++i) m.slot_size.push_back(c);
  }
  const int ns = m.ns();
  if (static_cast<int64_t>(ns) * (nb + 1) + 1 > kMaxMilpColumns)
    return std::nullopt;
  m.col.assign(nb, std::vector<int>(ns, -1));
  m.ncols = ns;
  for (int b = 0; b < nb; ++b) {
    for (int g = 0; g < ns; ++g) {
      if (m.need[b] <= m.slot_size[g]) m.col[b][g] = m.ncols++;
    }
  }
  m.z_col = m.ncols++;
  return m;
}

// The MILP as triplets (packed once at the end: appending rows one by one to
// a CoinPackedMatrix reallocates it every time, quadratic in the model size)
// with row and column bounds and the objective (minimise z).
struct MilpData {
  std::vector<int> nz_row, nz_col;
  std::vector<double> nz_val;
  std::vector<double> row_lb, row_ub;
  std::vector<double> col_lb, col_ub, obj;
  void AddRow(const std::vector<int>& idx, const std::vector<double>& val,
              double lb, double ub) {
    for (size_t i = 0; i < idx.size(); ++i) {
      nz_row.push_back(static_cast<int>(row_lb.size()));
      nz_col.push_back(idx[i]);
      nz_val.push_back(val[i]);
    }
    row_lb.push_back(lb);
    row_ub.push_back(ub);
  }
};

// The rows: Σ c_g u_g <= N; every bucket's sequences placed; per slot
// n_bg <= |bucket| u_g, memory and makespan; equal slots used in order.
MilpData BuildMilp(const Context& ctx, const BucketModel& m) {
  const PlanRequest& req = ctx.req;
  const int n = req.cluster.num_ranks;
  const int nb = m.nb(), ns = m.ns();
  const double inf = COIN_DBL_MAX;
  MilpData milp;
  {
    std::vector<int> idx(ns);
    std::vector<double> val(ns);
    for (int g = 0; g < ns; ++g) idx[g] = g, val[g] = m.slot_size[g];
    milp.AddRow(idx, val, -inf, n);  // Σ c_g u_g <= N
  }
  for (int b = 0; b < nb; ++b) {  // every sequence of the bucket placed
    std::vector<int> idx;
    for (int g = 0; g < ns; ++g)
      if (m.col[b][g] >= 0) idx.push_back(m.col[b][g]);
    milp.AddRow(idx, std::vector<double>(idx.size(), 1.0),
                static_cast<double>(m.buckets[b].size()),
                static_cast<double>(m.buckets[b].size()));
  }
  for (int g = 0; g < ns; ++g) {
    const int c = m.slot_size[g];
    const double bw = BwFor(ctx, c);
    const double fixed =
        AllToAllGroupTimeS(req.cost, ctx.shape, GroupLoad{}, c, bw);
    std::vector<int> t_idx, m_idx;
    std::vector<double> t_val, m_val;
    for (int b = 0; b < nb; ++b) {
      if (m.col[b][g] < 0) continue;
      const Sequence s{m.boundary[b], m.eta[b]};
      t_idx.push_back(m.col[b][g]);
      t_val.push_back(
          AllToAllGroupTimeS(req.cost, ctx.shape, GroupLoad::Of(s), c, bw) -
          fixed);
      m_idx.push_back(m.col[b][g]);
      m_val.push_back(static_cast<double>(m.boundary[b]));
      // n_bg <= |bucket| u_g
      milp.AddRow({m.col[b][g], g},
                  {1.0, -static_cast<double>(m.buckets[b].size())}, -inf, 0.0);
    }
    m_idx.push_back(g), m_val.push_back(-c * ctx.headroom_tokens);
    milp.AddRow(m_idx, m_val, -inf, 0.0);  // memory
    t_idx.push_back(g), t_val.push_back(fixed);
    t_idx.push_back(m.z_col), t_val.push_back(-1.0);
    milp.AddRow(t_idx, t_val, -inf, 0.0);  // makespan
    if (g + 1 < ns && m.slot_size[g + 1] == c)
      milp.AddRow({g, g + 1}, {1.0, -1.0}, 0.0, inf);
  }
  milp.col_lb.assign(m.ncols, 0.0);
  milp.col_ub.assign(m.ncols, 1.0);
  milp.obj.assign(m.ncols, 0.0);
  for (int b = 0; b < nb; ++b)
    for (int g = 0; g < ns; ++g)
      if (m.col[b][g] >= 0)
        milp.col_ub[m.col[b][g]] = static_cast<double>(m.buckets[b].size());
  milp.col_ub[m.z_col] = inf;
  milp.obj[m.z_col] = 1.0;
  return milp;
}

// A solution of the MILP (column values) and its objective z.
struct WarmStart {
  std::vector<double> sol;
  double z = std::numeric_limits<double>::infinity();
};

// The warm start: the best, by the MILP's own objective (z on bucket
// boundaries), of the greedy packing and the uniform packings of every
// allowed size redone on boundary lengths (so that they satisfy the bucketed
// memory rows), and the incumbent handed in (the best of those on exact
// lengths), each as bucket counts on slots where it maps onto them. The
// uniform ones are built while less than half the slot (`seconds` from
// `start`) is spent. nullopt when none maps.
std::optional<WarmStart> BestWarmStart(const Context& ctx, const BucketModel& m,
                                       const std::vector<int>& seqs,
                                       const Groups& incumbent,
                                       Clock::time_point start,
                                       double seconds) {
  const PlanRequest& req = ctx.req;
  const int n = req.cluster.num_ranks;
  const int nb = m.nb(), ns = m.ns();
  std::unordered_map<int, int> bucket_of;
  std::unordered_map<int, int64_t> padded;
  for (int b = 0; b < nb; ++b)
    for (int k : m.buckets[b]) bucket_of[k] = b, padded[k] = m.boundary[b];
  // Maps a packing onto slots; false when it does not fit them or the
  // bucketed memory rows.
  auto as_counts = [&](const Groups& packing, std::vector<double>* sol,
                       double* z) {
    sol->assign(m.ncols, 0.0);
    *z = 0;
    std::vector<int> next_of_size(n + 1, 0);
    if (packing.empty()) return false;
    for (const auto& [size, members] : packing) {
      if (members.empty()) continue;
      int g = -1;
      for (int s = 0, seen = 0; s < ns; ++s) {
        if (m.slot_size[s] == size && seen++ == next_of_size[size]) {
          g = s;
          break;
        }
      }
      if (g < 0) return false;
      ++next_of_size[size];
      (*sol)[g] = 1.0;
      double tokens = 0;
      GroupLoad load;
      for (int k : members) {
        const int b = bucket_of.at(k);
        if (m.col[b][g] < 0) return false;
        (*sol)[m.col[b][g]] += 1.0;
        tokens += static_cast<double>(m.boundary[b]);
        load.Add({m.boundary[b], m.eta[b]});
      }
      if (tokens > size * ctx.headroom_tokens) return false;
      *z = std::max(*z, AllToAllGroupTimeS(req.cost, ctx.shape, load, size,
                                           BwFor(ctx, size)));
    }
    (*sol)[m.z_col] = *z;
    return true;
  };
  std::optional<WarmStart> warm;
  WarmStart candidate;
  auto consider = [&](const Groups& packing) {
    if (as_counts(packing, &candidate.sol, &candidate.z) &&
        (!warm || candidate.z < warm->z)) {
      if (!warm) warm.emplace();
      warm->z = candidate.z;
      warm->sol.swap(candidate.sol);
    }
  };
  consider(GreedyPacking(ctx, seqs, &padded));
  consider(incumbent);
  for (int size : UniformSizes(ctx, seqs)) {
    if (SecondsSince(start) > seconds / 2) break;
    consider(UniformPacking(ctx, seqs, size, &padded));
  }
  return warm;
}

// CBC on the MILP within the slot (`seconds` from `start`, model building
// included), from the warm start when there is one. The solution's column
// values (empty when CBC has none) and the status: optimal | time_limit |
// stopped.
std::pair<std::vector<double>, std::string> RunCbc(
    const BucketModel& m, const MilpData& milp,
    const std::optional<WarmStart>& warm, Clock::time_point start,
    double seconds) {
  CoinPackedMatrix matrix(false, milp.nz_row.data(), milp.nz_col.data(),
                          milp.nz_val.data(),
                          static_cast<CoinBigIndex>(milp.nz_val.size()));
  matrix.setDimensions(static_cast<int>(milp.row_lb.size()), m.ncols);
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, milp.col_lb.data(), milp.col_ub.data(),
                     milp.obj.data(), milp.row_lb.data(), milp.row_ub.data());
  for (int c = 0; c < m.z_col; ++c) solver.setInteger(c);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setUseElapsedTime(true);  // wall-clock, not CPU time
  // Model building counts against the slot too.
  model.setMaximumSeconds(
      std::max(kMinMilpSeconds, seconds - SecondsSince(start)));
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(seconds));
  DeadlineHandler handler(deadline);
  model.passInEventHandler(&handler);
  LpDeadlineHandler lp_handler(deadline);
  if (auto* clp = dynamic_cast<OsiClpSolverInterface*>(model.solver())) {
    clp->getModelPtr()->passInEventHandler(&lp_handler);
  }
  // No strong branching: its LP solves sit between CBC's time checks.
  model.setNumberStrong(0);
  model.setNumberBeforeTrust(0);
  if (warm) model.setBestSolution(warm->sol.data(), m.ncols, warm->z, true);
  model.branchAndBound();
  const double* sol = model.bestSolution();
  if (sol == nullptr) return {{}, ""};
  return {std::vector<double>(sol, sol + m.ncols),
          model.isProvenOptimal()         ? "optimal"
          : model.isSecondsLimitReached() ? "time_limit"
                                          : "stopped"};
}

// Bucket counts back to sequences: each bucket's members, longest first, to
// its slots in slot order; the used slots. nullopt when the counts do not add
// up to the buckets (numerically off).
std::optional<Groups> GroupsFromCounts(const BucketModel& m,
                                       const std::vector<double>& sol) {
  const int nb = m.nb(), ns = m.ns();
  Groups groups(ns);
  for (int g = 0; g < ns; ++g) groups[g].first = m.slot_size[g];
  for (int b = 0; b < nb; ++b) {
    size_t next = 0;
    for (int g = 0; g < ns; ++g) {
      if (m.col[b][g] < 0) continue;
      const int count = static_cast<int>(std::llround(sol[m.col[b][g]]));
      for (int i = 0; i < count && next < m.buckets[b].size(); ++i) {
        groups[g].second.push_back(m.buckets[b][next++]);
      }
    }
    if (next != m.buckets[b].size()) return std::nullopt;
  }
  Groups used;
  for (auto& g : groups) {
    if (!g.second.empty()) used.push_back(std::move(g));
  }
  return used;
}

// solve_flexSP_bucket_seqs: per micro-batch, the bucketed MILP
// (BucketModel, BuildMilp) from the best warm start, solved by CBC within
// `seconds`; `incumbent` (the greedy plan) is kept when there is no time, the
// model is too large, or CBC gives no usable solution.
MbSolve SolveMicroBatch(const Context& ctx, const std::vector<int>& seqs,
                        const Groups& incumbent, double seconds) {
  MbSolve result;
  result.groups = incumbent;
  if (seconds < kMinMilpSeconds) {
    result.status = "greedy(no time left)";
    return result;
  }
  const Clock::time_point start = Clock::now();
  const std::optional<BucketModel> model = MakeBucketModel(ctx, seqs);
  if (!model) {
    result.status = "greedy(model too large)";
    return result;
  }
  const MilpData milp = BuildMilp(ctx, *model);
  const std::optional<WarmStart> warm =
      BestWarmStart(ctx, *model, seqs, incumbent, start, seconds);
  const auto [sol, status] = RunCbc(*model, milp, warm, start, seconds);
  if (sol.empty()) {
    result.status = "greedy(no MILP solution)";
    return result;
  }
  result.status = status;
  std::optional<Groups> groups = GroupsFromCounts(*model, sol);
  if (!groups) {  // numerically off: keep the greedy plan
    result.status = "greedy(MILP rounding)";
    return result;
  }
  result.groups = std::move(*groups);
  return result;
}

// The furthest end in (at, k] with prefix[end] <= prefix[at] + cap, at least
// at + 1: galloping from `at`, so O(log(end - at)) and a whole cut costs
// O(m log(K/m)) <= O(K) however many chunks it makes.
int FurthestEnd(const std::vector<double>& prefix, int at, double cap) {
  const int k = static_cast<int>(prefix.size()) - 1;
  const double target = prefix[at] + cap;
  int step = 1;
  while (at + step <= k && prefix[at + step] <= target) step *= 2;
  // prefix[at + step / 2] <= target (or step == 1); the end lies below at +
  // step.
  int lo = at + step / 2,
      hi = std::min(at + step, k + 1);  // lo fits, hi does not (or k + 1)
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (prefix[mid] <= target)
      lo = mid;
    else
      hi = mid;
  }
  return std::max(at + 1, lo);
}

// chunk_globalbatch('sort_consec'): the batch sorted longest first, cut into
// at most `m` consecutive chunks minimising the largest chunk's tokens. The
// optimum of that min-max is found by bisection on the bound with a greedy cut
// over prefix sums (O(m log(K/m)) per probe, O(K log Σs) at most in all)
// instead of Galvatron's O(K²·m) DP; the optimum value is the same. Returns
// the chunk ends (exclusive); m >= K gives one sequence per chunk.
std::vector<int> ChunkEnds(const std::vector<double>& prefix, int m) {
  const int k = static_cast<int>(prefix.size()) - 1;
  std::vector<int> ends;
  if (m >= k) {
    for (int i = 1; i <= k; ++i) ends.push_back(i);
    return ends;
  }
  auto cut = [&](double cap) {
    ends.clear();
    int at = 0;
    while (at < k) {
      if (static_cast<int>(ends.size()) == m) return false;
      at = FurthestEnd(prefix, at, cap);
      ends.push_back(at);
    }
    return true;
  };
  double lo = 0, hi = prefix[k];
  for (int i = 0; i < k; ++i) lo = std::max(lo, prefix[i + 1] - prefix[i]);
  while (lo < hi) {  // integer token bounds
    const double mid = std::floor((lo + hi) / 2);
    if (cut(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  FCP_CHECK(cut(hi));
  return ends;
}

// GreedyPacking's feasibility rule (next-fit, long sequences on their own
// power-of-two group) as a running state, so that a chunk can be grown one
// sequence at a time without building its packing.
struct NextFitState {
  int64_t used = 0;
  double open_tokens = -1;  // < 0: no single rank open
  // Adds sequence k; false when the chunk no longer fits on N ranks.
  bool Add(const Context& ctx, int k) {
    const double len = static_cast<double>(ctx.seq[k].length_tokens);
    if (ctx.cp[k] > 1) {
      used += ctx.cp[k];
    } else if (open_tokens >= 0 && open_tokens + len <= ctx.headroom_tokens) {
      open_tokens += len;
    } else {
      ++used;
      open_tokens = len;
    }
    return used <= ctx.req.cluster.num_ranks;
  }
};

// Whether GreedyPacking of positions [from, to) fits on N ranks, without
// building it (O(to - from), no allocation).
bool GreedyFits(const Context& ctx, int from, int to) {
  NextFitState state;
  for (int i = from; i < to; ++i) {
    if (!state.Add(ctx, i)) return false;
  }
  return true;
}

// The fallback when the deadline leaves no time to search for the fewest
// valid count: consecutive chunks of the sorted batch, each grown while its
// greedy packing fits (one O(K) pass). Every chunk fits by construction (a
// single sequence always does: its group size is <= N).
std::vector<int> NextFitChunkEnds(const Context& ctx) {
  std::vector<int> ends;
  NextFitState state;
  const int k = static_cast<int>(ctx.seq.size());
  for (int i = 0; i < k; ++i) {
    if (!state.Add(ctx, i)) {
      ends.push_back(i);
      state = NextFitState{};
      FCP_CHECK(state.Add(ctx, i));
    }
  }
  ends.push_back(k);
  return ends;
}

// Indices of the sequences, longest first (ties: lower index first), by a
// radix sort of packed 64-bit keys (length - 1 in the high 40 bits, the index
// in the low 24): O(K) per length byte, several times faster than an indirect
// stable sort at 10^6 sequences. Falls back to that sort outside those ranges.
std::vector<int> SortedLongestFirst(const PlanRequest& request) {
  const size_t k = request.sequences.size();
  std::vector<int> sorted(k);
  constexpr int kIndexBits = 24;
  constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
  bool packable = k <= kIndexMask;
  for (const Sequence& s : request.sequences) {
    packable = packable && s.length_tokens >= 1 &&
               s.length_tokens <= (int64_t{1} << 40);
  }
  if (!packable) {
    std::iota(sorted.begin(), sorted.end(), 0);
    std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) {
      return request.sequences[a].length_tokens >
             request.sequences[b].length_tokens;
    });
    return sorted;
  }
  std::vector<uint64_t> keys(k), buffer(k);
  for (size_t i = 0; i < k; ++i) {
    keys[i] = (static_cast<uint64_t>(request.sequences[i].length_tokens - 1)
               << kIndexBits) |
              i;
  }
  // LSD radix sort on the length bytes only, descending; it is stable, so
  // equal lengths keep index order. Bytes equal in every key are skipped.
  uint64_t varying = 0;
  for (uint64_t key : keys) varying |= key ^ keys.front();
  for (int shift = kIndexBits; shift < 64; shift += 8) {
    if (((varying >> shift) & 0xFF) == 0) continue;
    size_t start[257] = {};
    for (uint64_t key : keys) ++start[256 - ((key >> shift) & 0xFF)];
    for (int b = 1; b <= 256; ++b) start[b] += start[b - 1];
    for (uint64_t key : keys)
      buffer[start[255 - ((key >> shift) & 0xFF)]++] = key;
    keys.swap(buffer);
  }
  for (size_t i = 0; i < k; ++i)
    sorted[i] = static_cast<int>(keys[i] & kIndexMask);
  return sorted;
}

// One wall-clock deadline for the whole planning call.
class Deadline {
 public:
  // Limits beyond 10^9 s (any finite value is valid input) are capped there,
  // so that the time point cannot overflow.
  Deadline(Clock::time_point start, double limit_s)
      : end_(start +
             std::chrono::duration_cast<Clock::duration>(
                 std::chrono::duration<double>(std::min(limit_s, 1e9)))) {}
  double LeftS() const {
    return std::chrono::duration<double>(end_ - Clock::now()).count();
  }

 private:
  Clock::time_point end_;
};

// What runs after Solve returns (the hand-over, MakePlan's estimates, lower
// bound and validation: O(K) passes) and what packing one micro-batch count
// costs (O(K log N)), as multiples of the measured time of phase 1 (O(K)
// passes and the radix sort), so that on a loaded machine the reserves grow
// with it. Measured on 10^5-10^6 github-like sequences (release build, 2-core
// VM at load 8-10): about 0.5-1.1 and 1.5-2.
constexpr double kFinishPerSortTime = 1.0;
constexpr double kPackPerSortTime = 2.0;
// The finishing reserve is at least the measured time of packing one count
// (O(K log N)) times kFinishPerPackTime + kFinishPerPackTimePerItem · (G +
// D) / K, where a count's plan has G groups listing D ranks in all: the
// hand-over, MakePlan's estimates and checks walk every sequence, build every
// group and list its ranks, which neither the sort nor the packing measures.
// Fitted on 10^6 github-like sequences (release build, 2-core VM at load 2-9):
// N = 64 (G + D = 0.15 K) finished in 0.45 packings, N = R = 10^6 (G + D =
// 3.6 K) in 1.2-1.4 (issue 30: the flat one-packing reserve ended L = 2 at
// 2.13-2.20 s there); with these constants the reserve is 0.53 and 1.2
// packings.
constexpr double kFinishPerPackTime = 0.5;
constexpr double kFinishPerPackTimePerItem = 0.2;
// A floor under the finishing reserve (the plan's hand-over and MakePlan's
// checks for a small batch).
constexpr double kMinFinishSeconds = 0.005;

// What the phases of Solve share: the deadline, the reserves for finishing
// and for packing one count (replaced by measured times as they come), and
// what notes.deadline says (no wall-clock figure: the same events give the
// same words).
struct Budget {
  Deadline deadline;
  double finish_s = 0;
  double pack_s = 0;
  std::string note = "not reached";
};

// The result of phase 2: the fewest valid count lies in [lo, hi]; `hi` is
// valid; `searched`: the search ran to the end (lo == hi).
struct CountSearch {
  int lo = 1, hi = 1;
  bool searched = true;
};

// Phase 2: get_min_valid_microbatch_num, the fewest chunks whose greedy
// packing fits on N ranks, by search between the token bound and K
// (m = K, one sequence per chunk, always packs; `hi` only ever holds a
// valid count). Each probe costs O(K); before each, the deadline must leave
// room for that probe, packing one count and finishing. Galloping up from the
// token bound first (steps of lo/16, doubling), so that the probes stay near
// m_min, where they are cheap, then bisection.
CountSearch SearchFewestCount(const Context& ctx,
                              const std::vector<double>& prefix,
                              Budget& budget) {
  const int n = ctx.req.cluster.num_ranks;
  const int k_total = static_cast<int>(ctx.seq.size());
  auto valid = [&](int m) {
    int at = 0;
    for (int end : ChunkEnds(prefix, m)) {
      if (!GreedyFits(ctx, at, end)) return false;
      at = end;
    }
    return true;
  };
  CountSearch search;
  search.lo = static_cast<int>(
      std::clamp(std::ceil(prefix.back() / (n * ctx.headroom_tokens)), 1.0,
                 static_cast<double>(k_total)));
  search.hi = k_total;
  double probe_s = 0;
  int step = std::max(1, search.lo / 16);
  bool bracketed = false;
  while (search.lo < search.hi) {
    if (budget.deadline.LeftS() < budget.finish_s + budget.pack_s + probe_s) {
      search.searched = false;
      break;
    }
    const Clock::time_point probe_start = Clock::now();
    const int mid = bracketed ? search.lo + (search.hi - search.lo) / 2
                              : std::min(search.hi - 1, search.lo + step - 1);
    if (valid(mid)) {
      search.hi = mid;
      bracketed = true;
    } else {
      search.lo = mid + 1;
      step *= 2;
    }
    probe_s = SecondsSince(probe_start);
  }
  return search;
}

// One micro-batch count of solve_flexSP_globalbatch_mp_gbmb: its chunks of
// the sorted batch, each chunk's packing and estimate, and their total.
struct Option {
  int m = 0;
  bool ok = true;
  std::vector<std::vector<int>> chunks;
  std::vector<Groups> groups;
  std::vector<double> est_s;
  double total_s = 0;
};

// The greedy packing of each chunk ending at `ends`; not ok when one does
// not pack (this count is not an option).
Option PackCount(const Context& ctx, int m, const std::vector<int>& ends) {
  Option o;
  o.m = m;
  int at = 0;
  for (int end : ends) {
    o.chunks.emplace_back(end - at);
    std::iota(o.chunks.back().begin(), o.chunks.back().end(), at);
    at = end;
    o.groups.push_back(GreedyPacking(ctx, o.chunks.back()));
    if (o.groups.back().empty()) {
      o.ok = false;
      break;
    }
    o.est_s.push_back(MicroBatchEstimateS(ctx, o.groups.back()));
    o.total_s += o.est_s.back();
  }
  return o;
}

// The finishing reserve (s) after packing `o` in `pack_s`: see
// kFinishPerPackTime. The MILPs may regroup a count; its greedy packing gives
// the scale (an estimate: the largest over the packed counts is kept).
double FinishReserveS(const Option& o, double pack_s, int k_total) {
  double items = 0;  // G + D
  for (const Groups& groups : o.groups) {
    for (const auto& [size, members] : groups) items += 1.0 + size;
  }
  return pack_s *
         (kFinishPerPackTime + kFinishPerPackTimePerItem * items /
                                   std::max(1.0, static_cast<double>(k_total)));
}

// Phase 3, solve_flexSP_globalbatch_mp_gbmb: m_min .. m_min + 4
// micro-batches, each count's greedy packing (O(K log N) each; the first is
// always packed, each further one only when the deadline leaves room for it
// and for finishing). When the search was cut short, one count: the
// bisection's valid `hi` or next-fit consecutive chunks, the fewer.
std::vector<Option> PackCounts(const Context& ctx,
                               const std::vector<double>& prefix,
                               const CountSearch& search, Budget& budget) {
  const int k_total = static_cast<int>(ctx.seq.size());
  std::vector<Option> opts;
  if (!search.searched) {
    const std::vector<int> ends = NextFitChunkEnds(ctx);
    const int m_fit = static_cast<int>(ends.size());
    opts.push_back(search.hi < m_fit
                       ? PackCount(ctx, search.hi, ChunkEnds(prefix, search.hi))
                       : PackCount(ctx, m_fit, ends));
    budget.note =
        std::string(
            "reached while searching the fewest valid micro-batch count: ") +
        (search.hi < m_fit
             ? "the best valid count found so far"
             : "next-fit consecutive chunks of the sorted batch") +
        ", one count packed greedily";
    return opts;
  }
  const int m_min = search.lo;
  for (int i = 0; i < kMicroBatchOptions && m_min + i <= k_total; ++i) {
    if (i > 0 && budget.deadline.LeftS() < budget.finish_s + budget.pack_s) {
      budget.note =
          "reached while packing micro-batch counts: " + std::to_string(i) +
          " of " + std::to_string(kMicroBatchOptions) + " counts packed";
      break;
    }
    const Clock::time_point pack_start = Clock::now();
    Option o = PackCount(ctx, m_min + i, ChunkEnds(prefix, m_min + i));
    budget.pack_s = SecondsSince(pack_start);
    // Finishing also builds every group and lists its ranks, which phase 1
    // does not see (issue 30: L = 2 ended at 2.8 s on 10^6 sequences on
    // N = R = 10^6 when the reserve was the sort's time alone).
    budget.finish_s =
        std::max(budget.finish_s, FinishReserveS(o, budget.pack_s, k_total));
    if (o.ok) opts.push_back(std::move(o));
  }
  return opts;
}

// Phase 3b: the uniform packings of every allowed group size (each lies in
// FlexSP's search space; static Ulysses is one of them) replace a
// micro-batch's greedy packing where their estimate is lower, so that the
// MILPs start from the best of them (CBC alone, without SCIP's heuristics,
// rarely improves on its warm start within the limit). Count by count while
// the deadline leaves room for one more count's packings and for finishing;
// O(m log N) per size.
void ImproveByUniformPackings(const Context& ctx, std::vector<Option>& opts,
                              Budget& budget) {
  double uniform_s =
      budget.pack_s *
      static_cast<double>(std::max<size_t>(
          1, UniformSizes(ctx, opts.front().chunks.front()).size()));
  for (size_t i = 0; i < opts.size(); ++i) {
    Option& o = opts[i];
    if (budget.deadline.LeftS() < budget.finish_s + uniform_s) {
      if (budget.note == "not reached") {
        budget.note =
            "reached while trying uniform packings: " + std::to_string(i) +
            " of " + std::to_string(opts.size()) + " counts tried";
      }
      break;
    }
    const Clock::time_point uniform_start = Clock::now();
    for (size_t c = 0; c < o.chunks.size(); ++c) {
      for (int size : UniformSizes(ctx, o.chunks[c])) {
        Groups uniform = UniformPacking(ctx, o.chunks[c], size);
        if (uniform.empty()) continue;
        const double est = MicroBatchEstimateS(ctx, uniform);
        if (est < o.est_s[c]) {
          o.total_s += est - o.est_s[c];
          o.est_s[c] = est;
          o.groups[c] = std::move(uniform);
        }
      }
    }
    uniform_s = SecondsSince(uniform_start);
  }
}

// Phase 4: the MILPs share what is left of the deadline equally (Galvatron
// runs the options in parallel processes, one SCIP time limit each); a MILP
// result replaces the packing of its micro-batch only if its estimate is
// lower. Returns notes.milp_status.
std::string RunMilps(const Context& ctx, std::vector<Option>& opts,
                     Budget& budget) {
  int milps_left = 0;
  for (const Option& o : opts) milps_left += static_cast<int>(o.chunks.size());
  int optimal_count = 0, milp_count = 0;
  std::string statuses;
  auto add_status = [&](const std::string& status) {
    ++milp_count;
    optimal_count += status == "optimal" ? 1 : 0;
    if (statuses.find(status) == std::string::npos) {
      statuses += (statuses.empty() ? "" : ",") + status;
    }
  };
  bool milps_cut = false;
  double milp_overrun_s = 0;
  for (Option& o : opts) {
    for (size_t c = 0; c < o.chunks.size(); ++c, --milps_left) {
      // CBC stops a little after its limit (between its checks): the largest
      // overrun seen so far is kept free too.
      const double left =
          budget.deadline.LeftS() - budget.finish_s - milp_overrun_s;
      const double share =
          std::max(0.9 * left / milps_left, kMilpShareFloorSeconds);
      if (left < share) {  // no time: this micro-batch keeps its greedy packing
        milps_cut = true;
        add_status("greedy(no time left)");
        continue;
      }
      const Clock::time_point milp_start = Clock::now();
      MbSolve r = SolveMicroBatch(ctx, o.chunks[c], o.groups[c], share);
      milp_overrun_s =
          std::max(milp_overrun_s, SecondsSince(milp_start) - share);
      add_status(r.status);
      const double est = MicroBatchEstimateS(ctx, r.groups);
      if (est < o.est_s[c]) {
        o.total_s += est - o.est_s[c];
        o.est_s[c] = est;
        o.groups[c] = std::move(r.groups);
      }
    }
  }
  // A MILP stopped at its share of the deadline counts too.
  const bool milp_limited = statuses.find("time_limit") != std::string::npos ||
                            statuses.find("stopped") != std::string::npos;
  if ((milps_cut || milp_limited) && budget.note == "not reached") {
    budget.note = "reached during the MILPs: see milp_status";
  }
  return optimal_count == milp_count ? "optimal" : statuses;
}

// The context every phase reads: the model shape, memory headroom, and the
// Ulysses rule's sizes (a power of two dividing q_heads, <= N) with their
// all-to-all bandwidths.
Context MakeContext(const PlanRequest& request, bool* fallback) {
  const int n = request.cluster.num_ranks;
  Context ctx{request, ShapeOrDefault(request, fallback), {}, {}, 0, 0, {}};
  ctx.headroom_tokens =
      request.cost.mem_per_token > 0
          ? (request.cost.mem_capacity - request.cost.mem_static) /
                request.cost.mem_per_token * (1 - 1e-9)
          : 1e300;
  int64_t max_pow2 = 1;
  while (max_pow2 * 2 <= n && ctx.shape.q_heads % (max_pow2 * 2) == 0)
    max_pow2 *= 2;
  ctx.max_size = max_pow2;
  ctx.bw_of_size.assign(max_pow2 + 1, 0.0);
  for (int64_t c = 1; c <= max_pow2; c *= 2) {
    ctx.bw_of_size[c] = AllToAllBandwidthOnRange(request.cost, request.cluster,
                                                 0, static_cast<int>(c));
  }
  return ctx;
}

// The chosen count's micro-batches as a plan: groups laid out largest first
// (MicroBatchEstimateS sorted them, so they stay aligned), positions in the
// sorted batch mapped back to sequence indices.
Plan PlanOfOption(Option& best, const std::vector<int>& sorted, int n) {
  Plan plan;
  plan.num_ranks = n;
  for (Groups& groups : best.groups) {
    MicroBatchPlan mb;
    int first = 0;
    for (auto& [size, members] : groups) {
      for (int& k : members) k = sorted[k];
      mb.groups.push_back({RankRange(first, size), std::move(members),
                           CommKind::kAllToAll, 0, 0});
      first += size;
    }
    FCP_CHECK(first <= n);
    plan.micro_batches.push_back(std::move(mb));
  }
  return plan;
}

}  // namespace

// The phases, each against one deadline: 1. group sizes, the sorted batch and
// prefix sums (always); 2. SearchFewestCount; 3. PackCounts; 3b.
// ImproveByUniformPackings; 4. RunMilps; then the best count's plan.
Plan FlexSpStrategy::Solve(const PlanRequest& request,
                           const PlanOptions& options) const {
  const Deadline deadline(options.started.value_or(Clock::now()),
                          options.time_limit_s);
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  bool fallback = false;
  Context ctx = MakeContext(request, &fallback);
  const int64_t max_pow2 = ctx.max_size;
  // Phase 1 (always runs, O(K) passes and a radix sort): group sizes, the
  // sorted batch, prefix sums.
  const Clock::time_point sort_start = Clock::now();
  std::vector<int64_t> cp_of(k_total);
  for (int k = 0; k < k_total; ++k) {
    cp_of[k] = DcpDegree(request.cost, request.sequences[k].length_tokens);
    if (cp_of[k] > max_pow2) {
      return InfeasiblePlan(
          name(), request, k,
          "sequences[" + std::to_string(k) + "] needs a Ulysses group of " +
              std::to_string(cp_of[k]) +
              " ranks but the largest allowed size (power of two <= N "
              "dividing q_heads = " +
              std::to_string(ctx.shape.q_heads) + ") is " +
              std::to_string(max_pow2));
    }
  }
  const std::vector<int> sorted = SortedLongestFirst(request);
  ctx.seq.resize(k_total);
  ctx.cp.resize(k_total);
  std::vector<double> prefix(k_total + 1, 0);
  for (int i = 0; i < k_total; ++i) {
    ctx.seq[i] = request.sequences[sorted[i]];
    ctx.cp[i] = cp_of[sorted[i]];
    prefix[i + 1] = prefix[i] + static_cast<double>(ctx.seq[i].length_tokens);
  }
  cp_of = {};
  const double sort_s = SecondsSince(sort_start);
  Budget budget{deadline,
                std::max(kMinFinishSeconds, kFinishPerSortTime * sort_s),
                kPackPerSortTime * sort_s};
  const CountSearch search = SearchFewestCount(ctx, prefix, budget);
  std::vector<Option> opts = PackCounts(ctx, prefix, search, budget);
  FCP_CHECK(!opts.empty() &&
            opts.front().ok);  // m_min and the fallback pack by construction
  ImproveByUniformPackings(ctx, opts, budget);
  const std::string milp_status = RunMilps(ctx, opts, budget);
  Option* best = &opts.front();
  std::string tried;
  for (Option& o : opts) {
    tried += (tried.empty() ? "" : ",") + std::to_string(o.m) + ":" +
             FormatDouble(1000.0 * o.total_s, 5) + "ms";
    if (o.total_s < best->total_s) best = &o;
  }
  Plan plan = PlanOfOption(*best, sorted, n);
  plan.notes["milp_status"] = milp_status;
  plan.notes["milp_time_limit_s"] = FormatDouble(options.time_limit_s, 4);
  plan.notes["deadline"] = budget.note;
  plan.notes["micro_batches"] = std::to_string(best->m);
  plan.notes["micro_batch_counts_tried"] = tried;
  plan.notes["q_heads"] =
      std::to_string(ctx.shape.q_heads) +
      (fallback ? " (model absent: default preset " + ctx.shape.name + ")"
                : "");
  return plan;
}

}  // namespace fcp::baselines
