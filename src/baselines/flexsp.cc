// `flexsp`: FlexSP as Hetu-Galvatron's FlexSP solver runs it (docs/baselines.md
// cites the functions): several micro-batch counts starting from the fewest
// valid one, the global batch sorted and cut into consecutive chunks of
// balanced tokens, lengths bucketed, and per micro-batch a MILP over bucket
// counts that forms power-of-two Ulysses groups. Everything, set-up included,
// runs against one wall-clock deadline (PlanOptions::time_limit_s).
#include "baselines/flexsp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include <coin/CbcEventHandler.hpp>
#include <coin/CbcModel.hpp>
#include <coin/ClpEventHandler.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

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

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Context {
  const PlanRequest& req;
  ModelShape shape;
  std::vector<int64_t> cp;  // power-of-two Ulysses size each sequence needs
  int64_t max_size = 1;     // largest allowed Ulysses size (power of two | q_heads, <= N)
  double headroom_tokens;   // tokens one rank holds
};

double BwFor(const Context& ctx, int c) {
  const int r = ctx.req.cluster.ranks_per_node;
  return c <= r && r % c == 0 ? ctx.req.cost.bw_intra_node : ctx.req.cost.bw_inter_node;
}

// A micro-batch's groups: (size, members).
using Groups = std::vector<std::pair<int, std::vector<int>>>;

// The greedy packing (also the MILP's warm start): every sequence needing
// more than one rank gets its own group of its power-of-two size; the others
// go, longest first, next-fit onto single ranks. Empty when it needs more
// than N ranks. O(m).
// `padded`, when given, maps a sequence to the length to pack it with (its
// bucket boundary).
Groups GreedyPacking(const Context& ctx, const std::vector<int>& seqs,
                     const std::unordered_map<int, int64_t>* padded = nullptr) {
  const int n = ctx.req.cluster.num_ranks;
  auto len_of = [&](int k) {
    return static_cast<double>(padded ? padded->at(k) : ctx.req.sequences[k].length_tokens);
  };
  Groups out;
  int used = 0;
  double open_tokens = 0;
  std::vector<int> shorts;
  for (int k : seqs) {  // seqs are sorted longest first
    const double len = len_of(k);
    if (ctx.cp[k] > 1) {
      used += static_cast<int>(ctx.cp[k]);
      out.push_back({static_cast<int>(ctx.cp[k]), {k}});
    } else if (!out.empty() && out.back().first == 1 &&
               open_tokens + len <= ctx.headroom_tokens) {
      out.back().second.push_back(k);
      open_tokens += len;
      shorts.push_back(k);
    } else {
      ++used;
      out.push_back({1, {k}});
      open_tokens = len;
      shorts.push_back(k);
    }
    if (used > n) return {};
  }
  // The next-fit packing above decides feasibility; the short sequences are
  // then dealt, longest first, to the least-loaded of all free single ranks
  // (by single-rank time), which balances them; if that overflows a rank's
  // memory the next-fit packing stays. O(m log N).
  int free_ranks = n;
  for (const auto& [size, members] : out) free_ranks -= size > 1 ? size : 0;
  Groups balanced;
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
      Sequence s = ctx.req.sequences[k];
      s.length_tokens = static_cast<int64_t>(len_of(k));
      tokens[r] += len_of(k);
      if (tokens[r] > ctx.headroom_tokens) {
        dealt_ok = false;  // keep the next-fit packing
        break;
      }
      dealt[r].push_back(k);
      heap.push({load + AllToAllGroupTimeS(ctx.req.cost, ctx.shape, GroupLoad::Of(s), 1,
                                           ctx.req.cost.bw_intra_node),
                 r});
    }
  }
  if (dealt_ok) {
    for (auto& g : out) {
      if (g.first > 1) balanced.push_back(std::move(g));
    }
    for (auto& d : dealt) {
      if (!d.empty()) balanced.push_back({1, std::move(d)});
    }
  } else {
    balanced = std::move(out);
  }
  // Ranks still idle go to the slowest groups: the slowest group doubles its
  // (power-of-two) size while enough ranks are free, as the MILP would. O(N log N).
  int idle = n;
  for (const auto& g : balanced) idle -= g.first;
  auto time_of = [&](const std::pair<int, std::vector<int>>& g) {
    GroupLoad load;
    for (int k : g.second) load.Add(ctx.req.sequences[k]);
    return AllToAllGroupTimeS(ctx.req.cost, ctx.shape, load, g.first, BwFor(ctx, g.first));
  };
  std::priority_queue<std::pair<double, int>> slowest;
  for (size_t i = 0; i < balanced.size(); ++i) slowest.push({time_of(balanced[i]), static_cast<int>(i)});
  while (idle > 0 && !slowest.empty()) {
    const int i = slowest.top().second;
    slowest.pop();
    auto& g = balanced[i];
    if (2 * g.first > ctx.max_size || g.first > idle) continue;  // cannot grow: next one
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

// A micro-batch's estimate (s) as EvaluatePlan computes it for these groups
// placed largest first from rank 0: the slowest group's all-to-all time.
double MicroBatchEstimateS(const Context& ctx, Groups& groups) {
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  double worst = 0;
  int first = 0;
  for (const auto& [size, members] : groups) {
    GroupLoad load;
    for (int k : members) load.Add(ctx.req.sequences[k]);
    const bool intra = RangeOnOneNode(ctx.req.cluster, first, size);
    worst = std::max(worst, AllToAllGroupTimeS(ctx.req.cost, ctx.shape, load, size,
                                               intra ? ctx.req.cost.bw_intra_node
                                                     : ctx.req.cost.bw_inter_node));
    first += size;
  }
  return worst;
}

// bucketing_seqs: B buckets of consecutive (sorted) lengths minimising the
// padding Σ (boundary - s), boundary = the bucket's longest. Exact DP over the
// distinct lengths, or over kBoundaryCandidates quantiles when there are more.
// Returns, per bucket, its members (sorted longest first).
std::vector<std::vector<int>> Bucketize(const Context& ctx, std::vector<int> seqs) {
  auto len = [&](int k) { return ctx.req.sequences[k].length_tokens; };
  std::sort(seqs.begin(), seqs.end(), [&](int a, int b) { return len(a) < len(b); });
  // Candidate cut points: indices i where a bucket may end (after seqs[i-1]).
  std::vector<int> cuts;
  for (size_t i = 1; i <= seqs.size(); ++i) {
    if (i == seqs.size() || len(seqs[i]) != len(seqs[i - 1])) cuts.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(cuts.size()) > kBoundaryCandidates) {
    std::vector<int> thin;
    for (int q = 1; q <= kBoundaryCandidates; ++q) {
      thin.push_back(cuts[(static_cast<size_t>(q) * cuts.size()) / kBoundaryCandidates - 1]);
    }
    thin.erase(std::unique(thin.begin(), thin.end()), thin.end());
    cuts = thin;
  }
  const int c = static_cast<int>(cuts.size());
  std::vector<double> prefix(seqs.size() + 1, 0);
  for (size_t i = 0; i < seqs.size(); ++i) prefix[i + 1] = prefix[i] + static_cast<double>(len(seqs[i]));
  auto pad = [&](int from, int to) {  // positions [from, to)
    return static_cast<double>(len(seqs[to - 1])) * (to - from) - (prefix[to] - prefix[from]);
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
  explicit LpDeadlineHandler(Clock::time_point deadline) : deadline_(deadline) {}
  int event(Event which) override {
    return which == endOfIteration && Clock::now() > deadline_ ? 5 : -1;
  }
  ClpEventHandler* clone() const override { return new LpDeadlineHandler(*this); }

 private:
  Clock::time_point deadline_;
};

struct MbSolve {
  Groups groups;
  std::string status;  // optimal | time_limit | stopped | greedy(...)
};

// solve_flexSP_bucket_seqs: per micro-batch, slots g of power-of-two size c_g
// (dividing q_heads), integer n_bg = how many sequences of bucket b run in
// slot g, binary u_g, makespan z. Lengths count at their bucket's boundary
// (its longest), so the solution is safe for memory and pessimistic in time.
MbSolve SolveMicroBatch(const Context& ctx, const std::vector<int>& seqs,
                        const Groups& greedy, double seconds) {
  MbSolve result;
  result.groups = greedy;
  if (seconds < kMinMilpSeconds) {
    result.status = "greedy(no time left)";
    return result;
  }
  const Clock::time_point start = Clock::now();
  const PlanRequest& req = ctx.req;
  const int n = req.cluster.num_ranks;
  const std::vector<std::vector<int>> buckets = Bucketize(ctx, seqs);
  const int nb = static_cast<int>(buckets.size());
  std::vector<int64_t> boundary(nb);
  std::vector<double> eta(nb, 0);
  std::vector<int64_t> need(nb);
  for (int b = 0; b < nb; ++b) {
    boundary[b] = req.sequences[buckets[b].front()].length_tokens;
    for (int k : buckets[b]) eta[b] = std::max(eta[b], req.sequences[k].eta);
    need[b] = 1;
    for (int k : buckets[b]) need[b] = std::max(need[b], ctx.cp[k]);
  }
  std::vector<int> slot_size;
  for (int c = 1; c <= n && ctx.shape.q_heads % c == 0; c *= 2) {
    int fit = 0;
    for (int b = 0; b < nb; ++b) fit += need[b] <= c ? static_cast<int>(buckets[b].size()) : 0;
    const int count = std::min(fit, n / c);
    for (int i = 0; i < count; ++i) slot_size.push_back(c);
  }
  const int ns = static_cast<int>(slot_size.size());
  if (static_cast<int64_t>(ns) * (nb + 1) + 1 > kMaxMilpColumns) {
    result.status = "greedy(model too large)";
    return result;
  }
  std::vector<std::vector<int>> col(nb, std::vector<int>(ns, -1));
  int ncols = ns;
  for (int b = 0; b < nb; ++b) {
    for (int g = 0; g < ns; ++g) {
      if (need[b] <= slot_size[g]) col[b][g] = ncols++;
    }
  }
  const int z_col = ncols++;
  CoinPackedMatrix matrix(false, 0, 0);
  std::vector<double> row_lb, row_ub;
  auto add_row = [&](const std::vector<int>& idx, const std::vector<double>& val, double lb,
                     double ub) {
    matrix.appendRow(static_cast<int>(idx.size()), idx.data(), val.data());
    row_lb.push_back(lb);
    row_ub.push_back(ub);
  };
  const double inf = COIN_DBL_MAX;
  {
    std::vector<int> idx(ns);
    std::vector<double> val(ns);
    for (int g = 0; g < ns; ++g) idx[g] = g, val[g] = slot_size[g];
    add_row(idx, val, -inf, n);  // Σ c_g u_g <= N
  }
  for (int b = 0; b < nb; ++b) {  // every sequence of the bucket placed
    std::vector<int> idx;
    for (int g = 0; g < ns; ++g)
      if (col[b][g] >= 0) idx.push_back(col[b][g]);
    add_row(idx, std::vector<double>(idx.size(), 1.0), static_cast<double>(buckets[b].size()),
            static_cast<double>(buckets[b].size()));
  }
  for (int g = 0; g < ns; ++g) {
    const int c = slot_size[g];
    const double bw = BwFor(ctx, c);
    const double fixed = AllToAllGroupTimeS(req.cost, ctx.shape, GroupLoad{}, c, bw);
    std::vector<int> t_idx, m_idx;
    std::vector<double> t_val, m_val;
    for (int b = 0; b < nb; ++b) {
      if (col[b][g] < 0) continue;
      const Sequence s{boundary[b], eta[b]};
      t_idx.push_back(col[b][g]);
      t_val.push_back(AllToAllGroupTimeS(req.cost, ctx.shape, GroupLoad::Of(s), c, bw) - fixed);
      m_idx.push_back(col[b][g]);
      m_val.push_back(static_cast<double>(boundary[b]));
      // n_bg <= |bucket| u_g
      add_row({col[b][g], g}, {1.0, -static_cast<double>(buckets[b].size())}, -inf, 0.0);
    }
    m_idx.push_back(g), m_val.push_back(-c * ctx.headroom_tokens);
    add_row(m_idx, m_val, -inf, 0.0);  // memory
    t_idx.push_back(g), t_val.push_back(fixed);
    t_idx.push_back(z_col), t_val.push_back(-1.0);
    add_row(t_idx, t_val, -inf, 0.0);  // makespan
    if (g + 1 < ns && slot_size[g + 1] == c) add_row({g, g + 1}, {1.0, -1.0}, 0.0, inf);
  }
  std::vector<double> col_lb(ncols, 0.0), col_ub(ncols, 1.0), obj(ncols, 0.0);
  for (int b = 0; b < nb; ++b)
    for (int g = 0; g < ns; ++g)
      if (col[b][g] >= 0) col_ub[col[b][g]] = static_cast<double>(buckets[b].size());
  col_ub[z_col] = inf;
  obj[z_col] = 1.0;
  matrix.setDimensions(static_cast<int>(row_lb.size()), ncols);

  // Warm start: the greedy packing as bucket counts, when it maps onto slots
  // and respects the bucketed memory rows.
  // (The greedy packing redone on boundary lengths, so it satisfies the
  // bucketed memory rows.)
  std::unordered_map<int, int> bucket_of;
  std::unordered_map<int, int64_t> padded;
  for (int b = 0; b < nb; ++b)
    for (int k : buckets[b]) bucket_of[k] = b, padded[k] = boundary[b];
  const Groups warm = GreedyPacking(ctx, seqs, &padded);
  std::vector<double> warm_sol(ncols, 0.0);
  std::vector<int> next_of_size(n + 1, 0);
  bool warm_ok = !warm.empty();
  double warm_z = 0;
  for (const auto& [size, members] : warm) {
    int g = -1;
    for (int s = 0, seen = 0; s < ns; ++s) {
      if (slot_size[s] == size && seen++ == next_of_size[size]) {
        g = s;
        break;
      }
    }
    if (g < 0) {
      warm_ok = false;
      break;
    }
    ++next_of_size[size];
    warm_sol[g] = 1.0;
    double tokens = 0;
    GroupLoad load;
    for (int k : members) {
      const int b = bucket_of[k];
      if (col[b][g] < 0) {
        warm_ok = false;
        break;
      }
      warm_sol[col[b][g]] += 1.0;
      tokens += static_cast<double>(boundary[b]);
      load.Add({boundary[b], eta[b]});
    }
    if (!warm_ok || tokens > size * ctx.headroom_tokens) {
      warm_ok = false;
      break;
    }
    warm_z = std::max(warm_z, AllToAllGroupTimeS(req.cost, ctx.shape, load, size, BwFor(ctx, size)));
  }
  warm_sol[z_col] = warm_z;

  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, col_lb.data(), col_ub.data(), obj.data(), row_lb.data(),
                     row_ub.data());
  for (int c = 0; c < z_col; ++c) solver.setInteger(c);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setUseElapsedTime(true);  // wall-clock, not CPU time
  // Model building counts against the slot too.
  model.setMaximumSeconds(std::max(kMinMilpSeconds, seconds - SecondsSince(start)));
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  DeadlineHandler handler(deadline);
  model.passInEventHandler(&handler);
  LpDeadlineHandler lp_handler(deadline);
  if (auto* clp = dynamic_cast<OsiClpSolverInterface*>(model.solver())) {
    clp->getModelPtr()->passInEventHandler(&lp_handler);
  }
  // No strong branching: its LP solves sit between CBC's time checks.
  model.setNumberStrong(0);
  model.setNumberBeforeTrust(0);
  if (warm_ok) model.setBestSolution(warm_sol.data(), ncols, warm_z, true);
  model.branchAndBound();
  const double* sol = model.bestSolution();
  if (sol == nullptr) {
    result.status = "greedy(no MILP solution)";
    return result;
  }
  result.status = model.isProvenOptimal()        ? "optimal"
                  : model.isSecondsLimitReached() ? "time_limit"
                                                  : "stopped";
  // Bucket counts back to sequences: each bucket's members, longest first,
  // to its slots in slot order.
  Groups groups(ns);
  for (int g = 0; g < ns; ++g) groups[g].first = slot_size[g];
  for (int b = 0; b < nb; ++b) {
    size_t next = 0;
    for (int g = 0; g < ns; ++g) {
      if (col[b][g] < 0) continue;
      const int count = static_cast<int>(std::llround(sol[col[b][g]]));
      for (int i = 0; i < count && next < buckets[b].size(); ++i) {
        groups[g].second.push_back(buckets[b][next++]);
      }
    }
    if (next != buckets[b].size()) {  // numerically off: keep the greedy plan
      result.status = "greedy(MILP rounding)";
      return result;
    }
  }
  result.groups.clear();
  for (auto& g : groups) {
    if (!g.second.empty()) result.groups.push_back(std::move(g));
  }
  return result;
}

// chunk_globalbatch('sort_consec'): the batch sorted longest first, cut into
// at most `m` consecutive chunks minimising the largest chunk's tokens. The
// optimum of that min-max is found by bisection on the bound with a greedy cut
// over prefix sums (O(m log K) per probe, O(m log K log Σs) in all) instead of
// Galvatron's O(K²·m) DP; the optimum value is the same. Returns the chunk
// ends (exclusive); m >= K gives one sequence per chunk.
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
      // Furthest end with prefix[end] - prefix[at] <= cap (at least one item).
      const auto it = std::upper_bound(prefix.begin() + at + 1, prefix.end(), prefix[at] + cap);
      const int end = std::max(at + 1, static_cast<int>(it - prefix.begin()) - 1);
      ends.push_back(end);
      at = end;
    }
    return true;
  };
  double lo = 0, hi = prefix[k];
  for (int i = 0; i < k; ++i) lo = std::max(lo, prefix[i + 1] - prefix[i]);
  while (lo < hi) {  // integer token bounds
    const double mid = std::floor((lo + hi) / 2);
    if (cut(mid)) hi = mid;
    else lo = mid + 1;
  }
  FCP_CHECK(cut(hi));
  return ends;
}

// Whether GreedyPacking of sorted[from, to) fits on N ranks, without
// building it (O(to - from), no allocation).
bool GreedyFits(const Context& ctx, const std::vector<int>& sorted, int from, int to) {
  int64_t used = 0;
  double open_tokens = -1;  // < 0: no single rank open
  for (int i = from; i < to; ++i) {
    const int k = sorted[i];
    const double len = static_cast<double>(ctx.req.sequences[k].length_tokens);
    if (ctx.cp[k] > 1) {
      used += ctx.cp[k];
    } else if (open_tokens >= 0 && open_tokens + len <= ctx.headroom_tokens) {
      open_tokens += len;
    } else {
      ++used;
      open_tokens = len;
    }
    if (used > ctx.req.cluster.num_ranks) return false;
  }
  return true;
}

}  // namespace

Plan FlexSpStrategy::Solve(const PlanRequest& request, const PlanOptions& options) const {
  const Clock::time_point start = Clock::now();
  const double deadline_s = options.time_limit_s;
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  bool fallback = false;
  Context ctx{request, ShapeOrDefault(request, &fallback), std::vector<int64_t>(k_total), 0};
  ctx.headroom_tokens = request.cost.mem_per_token > 0
                            ? (request.cost.mem_capacity - request.cost.mem_static) /
                                  request.cost.mem_per_token * (1 - 1e-9)
                            : 1e300;
  // Ulysses rule: a group size is a power of two dividing q_heads (and <= N).
  int64_t max_pow2 = 1;
  while (max_pow2 * 2 <= n && ctx.shape.q_heads % (max_pow2 * 2) == 0) max_pow2 *= 2;
  ctx.max_size = max_pow2;
  for (int k = 0; k < k_total; ++k) {
    ctx.cp[k] = DcpDegree(request.cost, request.sequences[k].length_tokens);
    if (ctx.cp[k] > max_pow2) {
      return InfeasiblePlan(name(), request, k,
                            "sequences[" + std::to_string(k) + "] needs a Ulysses group of " +
                                std::to_string(ctx.cp[k]) +
                                " ranks but the largest allowed size (power of two <= N "
                                "dividing q_heads = " +
                                std::to_string(ctx.shape.q_heads) + ") is " +
                                std::to_string(max_pow2));
    }
  }
  std::vector<int> sorted(k_total);
  std::iota(sorted.begin(), sorted.end(), 0);
  std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) {
    return request.sequences[a].length_tokens > request.sequences[b].length_tokens;
  });
  // get_min_valid_microbatch_num: the fewest chunks whose greedy packing fits
  // on N ranks, by bisection between the token bound and K (m = K, one
  // sequence per chunk, always packs; `hi` only ever holds a valid count).
  double tokens = 0;
  for (const Sequence& s : request.sequences) tokens += static_cast<double>(s.length_tokens);
  std::vector<double> prefix(k_total + 1, 0);
  for (int i = 0; i < k_total; ++i) {
    prefix[i + 1] = prefix[i] + static_cast<double>(request.sequences[sorted[i]].length_tokens);
  }
  auto valid = [&](int m) {
    int at = 0;
    for (int end : ChunkEnds(prefix, m)) {
      if (!GreedyFits(ctx, sorted, at, end)) return false;
      at = end;
    }
    return true;
  };
  int lo = static_cast<int>(
      std::clamp(std::ceil(tokens / (n * ctx.headroom_tokens)), 1.0, static_cast<double>(k_total)));
  int hi = k_total;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (valid(mid)) hi = mid;
    else lo = mid + 1;
  }
  const int m_min = lo;

  // solve_flexSP_globalbatch_mp_gbmb: m_min .. m_min + 4 micro-batches; the
  // best total estimate wins. First every option's greedy packing (bounded,
  // O(K) each), then the MILPs share what is left of the deadline equally
  // (Galvatron runs the options in parallel processes, one SCIP time limit
  // each); a MILP result replaces the greedy packing of its micro-batch only
  // if its estimate is lower.
  struct Option {
    int m = 0;
    bool ok = true;
    std::vector<std::vector<int>> chunks;
    std::vector<Groups> groups;
    std::vector<double> est_s;
    double total_s = 0;
  };
  std::vector<Option> opts;
  for (int i = 0; i < kMicroBatchOptions && m_min + i <= k_total; ++i) {
    Option o;
    o.m = m_min + i;
    int at = 0;
    for (int end : ChunkEnds(prefix, o.m)) {
      o.chunks.emplace_back(sorted.begin() + at, sorted.begin() + end);
      at = end;
    }
    for (const auto& c : o.chunks) {
      o.groups.push_back(GreedyPacking(ctx, c));
      if (o.groups.back().empty()) {
        o.ok = false;  // this count does not pack: not an option
        break;
      }
      o.est_s.push_back(MicroBatchEstimateS(ctx, o.groups.back()));
      o.total_s += o.est_s.back();
    }
    if (o.ok) opts.push_back(std::move(o));
  }
  FCP_CHECK(!opts.empty());  // m_min packs by construction
  // Time to turn one option into the plan, measured on the greedy phase,
  // kept free at the end so that the deadline holds set-up included.
  const double reserve_s = SecondsSince(start) / static_cast<double>(opts.size() + 1);
  int milps_left = 0;
  for (const Option& o : opts) milps_left += static_cast<int>(o.chunks.size());
  int optimal_count = 0, milp_count = 0;
  std::string statuses;
  for (Option& o : opts) {
    for (size_t c = 0; c < o.chunks.size(); ++c, --milps_left) {
      const double left = deadline_s - SecondsSince(start) - reserve_s;
      MbSolve r = SolveMicroBatch(ctx, o.chunks[c], o.groups[c], 0.9 * left / milps_left);
      ++milp_count;
      optimal_count += r.status == "optimal" ? 1 : 0;
      if (statuses.find(r.status) == std::string::npos) {
        statuses += (statuses.empty() ? "" : ",") + r.status;
      }
      const double est = MicroBatchEstimateS(ctx, r.groups);
      if (est < o.est_s[c]) {
        o.total_s += est - o.est_s[c];
        o.est_s[c] = est;
        o.groups[c] = std::move(r.groups);
      }
    }
  }
  Option* best = &opts.front();
  std::string tried;
  for (Option& o : opts) {
    tried += (tried.empty() ? "" : ",") + std::to_string(o.m) + ":" +
             FormatDouble(1000.0 * o.total_s, 5) + "ms";
    if (o.total_s < best->total_s) best = &o;
  }
  Plan plan;
  plan.num_ranks = n;
  for (Groups& groups : best->groups) {
    MicroBatchPlan mb;
    int first = 0;  // largest first (MicroBatchEstimateS sorted them): aligned
    for (auto& [size, members] : groups) {
      mb.groups.push_back({RankRange(first, size), std::move(members), CommKind::kAllToAll, 0, 0});
      first += size;
    }
    FCP_CHECK(first <= n);
    plan.micro_batches.push_back(std::move(mb));
  }
  plan.notes["milp_status"] = optimal_count == milp_count ? "optimal" : statuses;
  plan.notes["milp_time_limit_s"] = FormatDouble(options.time_limit_s, 4);
  plan.notes["micro_batches"] = std::to_string(best->m);
  plan.notes["micro_batch_counts_tried"] = tried;
  plan.notes["q_heads"] = std::to_string(ctx.shape.q_heads) +
                          (fallback ? " (model absent: default preset " + ctx.shape.name + ")" : "");
  return plan;
}

}  // namespace fcp::baselines
