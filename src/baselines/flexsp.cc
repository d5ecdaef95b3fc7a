#include "baselines/flexsp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <coin/CbcModel.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include "baselines/common.h"
#include "baselines/dynamic.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {
namespace {

using Clock = std::chrono::steady_clock;

// A micro-batch's memory-feasible packing: power-of-two groups for sequences
// that need > 1 rank, single ranks (first fit by tokens) for the others.
struct Packing {
  int free_ranks = 0;
  std::vector<std::pair<int, std::vector<int>>> groups;  // (size, members)
  std::vector<double> group_tokens;
  double work = 0;  // Σ s^2, for balancing micro-batches
};

bool TryAdd(const PlanRequest& req, Packing& p, int k, int64_t cp) {
  const double len = static_cast<double>(req.sequences[k].length_tokens);
  if (cp > 1) {
    if (p.free_ranks < cp) return false;
    p.free_ranks -= static_cast<int>(cp);
    p.groups.push_back({static_cast<int>(cp), {k}});
    p.group_tokens.push_back(len);
  } else {
    bool placed = false;
    for (size_t g = 0; g < p.groups.size() && !placed; ++g) {
      if (p.groups[g].first != 1 || !FitsOnLoad(req.cost, p.group_tokens[g] + len, 1))
        continue;
      p.groups[g].second.push_back(k);
      p.group_tokens[g] += len;
      placed = true;
    }
    if (!placed) {
      if (p.free_ranks < 1) return false;
      --p.free_ranks;
      p.groups.push_back({1, {k}});
      p.group_tokens.push_back(len);
    }
  }
  p.work += len * len;
  return true;
}

struct MbResult {
  std::vector<std::pair<int, std::vector<int>>> groups;  // (size, members)
  std::string status;
};

// Solves one micro-batch's MILP; falls back to `warm` if CBC finds nothing.
MbResult SolveMicroBatch(const PlanRequest& req, const ModelShape& shape,
                         const std::vector<int>& seqs, const Packing& warm,
                         double time_limit_s) {
  const int n = req.cluster.num_ranks;
  const int m = static_cast<int>(seqs.size());
  // Slots: sizes 1, 2, 4, ... <= N; per size min(#sequences that fit, N/size).
  std::vector<int> slot_size;
  for (int c = 1; c <= n && shape.q_heads % c == 0; c *= 2) {
    int fit = 0;
    for (int k : seqs) fit += FitsOn(req, {k}, c) ? 1 : 0;
    const int count = std::min(fit, n / c);
    for (int i = 0; i < count; ++i) slot_size.push_back(c);
  }
  const int num_slots = static_cast<int>(slot_size.size());
  // Columns: u_g (num_slots), x_{k,g} (only where k fits alone), z.
  std::vector<std::vector<int>> x_col(m, std::vector<int>(num_slots, -1));
  int ncols = num_slots;
  for (int i = 0; i < m; ++i) {
    for (int g = 0; g < num_slots; ++g) {
      if (FitsOn(req, {seqs[i]}, slot_size[g])) x_col[i][g] = ncols++;
    }
  }
  const int z_col = ncols++;
  auto bw_for = [&](int c) {
    const bool intra = c <= req.cluster.ranks_per_node && req.cluster.ranks_per_node % c == 0;
    return intra ? req.cost.bw_intra_node : req.cost.bw_inter_node;
  };
  CoinPackedMatrix matrix(false, 0, 0);
  std::vector<double> row_lb, row_ub;
  auto add_row = [&](const std::vector<int>& idx, const std::vector<double>& val,
                     double lb, double ub) {
    matrix.appendRow(static_cast<int>(idx.size()), idx.data(), val.data());
    row_lb.push_back(lb);
    row_ub.push_back(ub);
  };
  const double inf = COIN_DBL_MAX;
  {  // Σ size_g u_g <= N
    std::vector<int> idx(num_slots);
    std::vector<double> val(num_slots);
    for (int g = 0; g < num_slots; ++g) idx[g] = g, val[g] = slot_size[g];
    add_row(idx, val, -inf, n);
  }
  for (int i = 0; i < m; ++i) {  // each sequence exactly once
    std::vector<int> idx;
    for (int g = 0; g < num_slots; ++g)
      if (x_col[i][g] >= 0) idx.push_back(x_col[i][g]);
    add_row(idx, std::vector<double>(idx.size(), 1.0), 1.0, 1.0);
  }
  const bool disaggregate = static_cast<int64_t>(m) * num_slots <= 20000;
  const double headroom_tokens =
      req.cost.mem_per_token > 0 ? (req.cost.mem_capacity - req.cost.mem_static) /
                                       req.cost.mem_per_token * (1 - 1e-9)
                                 : 1e30;
  for (int g = 0; g < num_slots; ++g) {
    const int c = slot_size[g];
    const double bw = bw_for(c);
    const double fixed = AllToAllGroupTimeS(req.cost, shape, GroupLoad{}, c, bw);
    std::vector<int> t_idx, m_idx;
    std::vector<double> t_val, m_val;
    for (int i = 0; i < m; ++i) {
      const int col = x_col[i][g];
      if (col < 0) continue;
      const Sequence& s = req.sequences[seqs[i]];
      const double t = AllToAllGroupTimeS(req.cost, shape, GroupLoad::Of(s), c, bw) - fixed;
      t_idx.push_back(col), t_val.push_back(t);
      m_idx.push_back(col), m_val.push_back(static_cast<double>(s.length_tokens));
      if (disaggregate) add_row({col, g}, {1.0, -1.0}, -inf, 0.0);  // x <= u
    }
    if (!disaggregate && !t_idx.empty()) {  // Σ_k x_kg <= m u_g
      std::vector<int> idx = t_idx;
      std::vector<double> val(idx.size(), 1.0);
      idx.push_back(g), val.push_back(-static_cast<double>(m));
      add_row(idx, val, -inf, 0.0);
    }
    // memory: Σ s x <= c * headroom_tokens * u
    m_idx.push_back(g), m_val.push_back(-c * headroom_tokens);
    add_row(m_idx, m_val, -inf, 0.0);
    // makespan: Σ t x + fixed u - z <= 0
    t_idx.push_back(g), t_val.push_back(fixed);
    t_idx.push_back(z_col), t_val.push_back(-1.0);
    add_row(t_idx, t_val, -inf, 0.0);
    if (g + 1 < num_slots && slot_size[g + 1] == c) add_row({g, g + 1}, {1.0, -1.0}, 0.0, inf);
  }
  std::vector<double> col_lb(ncols, 0.0), col_ub(ncols, 1.0), obj(ncols, 0.0);
  col_ub[z_col] = inf;
  obj[z_col] = 1.0;
  matrix.setDimensions(static_cast<int>(row_lb.size()), ncols);

  // Warm start from the packing (slots of each size taken in order).
  std::vector<double> warm_sol(ncols, 0.0);
  std::vector<int> pos_of(m, -1);
  std::vector<int> local(req.sequences.size(), -1);
  for (int i = 0; i < m; ++i) local[seqs[i]] = i;
  std::vector<int> next_slot(n + 1, 0);
  double warm_obj = 0;
  bool warm_ok = true;
  for (const auto& [size, members] : warm.groups) {
    int g = -1;
    for (int s = 0, seen = 0; s < num_slots; ++s) {
      if (slot_size[s] != size) continue;
      if (seen++ == next_slot[size]) {
        g = s;
        break;
      }
    }
    if (g < 0) {
      warm_ok = false;
      break;
    }
    ++next_slot[size];
    warm_sol[g] = 1.0;
    GroupLoad load;
    for (int k : members) {
      const int col = x_col[local[k]][g];
      if (col < 0) {
        warm_ok = false;
        break;
      }
      warm_sol[col] = 1.0;
      load.Add(req.sequences[k]);
    }
    warm_obj = std::max(warm_obj, AllToAllGroupTimeS(req.cost, shape, load, size, bw_for(size)));
  }
  warm_sol[z_col] = warm_obj;

  MbResult result;
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, col_lb.data(), col_ub.data(), obj.data(), row_lb.data(),
                     row_ub.data());
  for (int c = 0; c < z_col; ++c) solver.setInteger(c);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setUseElapsedTime(true);  // wall-clock, not CPU time
  model.setMaximumSeconds(std::max(0.01, time_limit_s));
  if (warm_ok) model.setBestSolution(warm_sol.data(), ncols, warm_obj, true);
  model.branchAndBound();
  const double* sol = model.bestSolution();
  if (sol == nullptr) {
    result.status = "no_solution(greedy)";
    result.groups = warm.groups;
    return result;
  }
  result.status = model.isProvenOptimal() ? "optimal"
                  : model.isSecondsLimitReached() ? "time_limit"
                                                  : "stopped";
  for (int g = 0; g < num_slots; ++g) {
    std::vector<int> members;
    for (int i = 0; i < m; ++i) {
      if (x_col[i][g] >= 0 && sol[x_col[i][g]] > 0.5) members.push_back(seqs[i]);
    }
    if (!members.empty()) result.groups.push_back({slot_size[g], std::move(members)});
  }
  return result;
}

}  // namespace

Plan FlexSpStrategy::Solve(const PlanRequest& request, const PlanOptions& options) const {
  const auto start = Clock::now();
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  bool fallback = false;
  const ModelShape shape = ShapeOrDefault(request, &fallback);
  // Ulysses rule: a group size is a power of two dividing q_heads (and <= N).
  int64_t max_pow2 = 1;
  while (max_pow2 * 2 <= n && shape.q_heads % (max_pow2 * 2) == 0) max_pow2 *= 2;
  std::vector<int64_t> cp(k_total);
  for (int k = 0; k < k_total; ++k) {
    cp[k] = DcpDegree(request.cost, request.sequences[k].length_tokens);
    if (cp[k] > max_pow2) {
      return InfeasiblePlan(name(), request, k,
                            "sequences[" + std::to_string(k) + "] needs a Ulysses group of " +
                                std::to_string(cp[k]) +
                                " ranks but the largest allowed size (power of two <= N "
                                "dividing q_heads = " + std::to_string(shape.q_heads) +
                                ") is " + std::to_string(max_pow2));
    }
  }
  // Micro-batches: longest first into the least-work micro-batch whose
  // packing still holds it; a new micro-batch when none does.
  std::vector<int> order(k_total);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return request.sequences[a].length_tokens > request.sequences[b].length_tokens;
  });
  std::vector<Packing> packs;
  std::vector<std::vector<int>> members;
  for (int k : order) {
    std::vector<size_t> idx(packs.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return packs[a].work < packs[b].work; });
    bool placed = false;
    for (size_t i : idx) {
      if (TryAdd(request, packs[i], k, cp[k])) {
        members[i].push_back(k);
        placed = true;
        break;
      }
    }
    if (!placed) {
      packs.push_back(Packing{n, {}, {}, 0});
      members.emplace_back();
      FCP_CHECK(TryAdd(request, packs.back(), k, cp[k]));
      members.back().push_back(k);
    }
  }
  Plan plan;
  plan.num_ranks = n;
  std::string statuses;
  int optimal_count = 0;
  for (size_t i = 0; i < packs.size(); ++i) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double left = std::max(0.0, options.time_limit_s - elapsed);
    MbResult r = SolveMicroBatch(request, shape, members[i], packs[i],
                                 left / static_cast<double>(packs.size() - i));
    optimal_count += r.status == "optimal" ? 1 : 0;
    if (statuses.find(r.status) == std::string::npos) {
      statuses += (statuses.empty() ? "" : ",") + r.status;
    }
    // Place largest groups first: power-of-two sizes stay aligned.
    std::stable_sort(r.groups.begin(), r.groups.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    MicroBatchPlan mb;
    int first = 0;
    for (auto& [size, seqs] : r.groups) {
      mb.groups.push_back({RankRange(first, size), seqs, CommKind::kAllToAll, 0, 0});
      first += size;
    }
    FCP_CHECK(first <= n);
    plan.micro_batches.push_back(std::move(mb));
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  plan.notes["milp_status"] = optimal_count == static_cast<int>(packs.size())
                                  ? "optimal"
                                  : statuses;
  plan.notes["milp_time_s"] = FormatDouble(total_s, 4);
  plan.notes["milp_time_limit_s"] = FormatDouble(options.time_limit_s, 4);
  plan.notes["micro_batches"] = std::to_string(packs.size());
  plan.notes["q_heads"] = std::to_string(shape.q_heads) +
                          (fallback ? " (model absent: default preset " + shape.name + ")" : "");
  return plan;
}

}  // namespace fcp::baselines
