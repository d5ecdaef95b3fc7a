// `megatron-dcp`: Megatron-Core's hybrid CP scheduler (BalancedCPScheduler),
// ported rule by rule; docs/baselines.md cites each rule's function. The
// Python original rescans lists at every step (O(K·N) per placement); this
// port keeps the same decisions with ordered sets and a Fenwick tree so that
// planning stays near-linear in the number of sequences.
#include "baselines/megatron_dcp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "baselines/common.h"
#include "fcp/check.h"
#include "fcp/cost_model.h"

namespace fcp::baselines {
namespace {

// Balance slack of next_hdp_group (delta = 0.05) and bucket overshoot of
// make_buckets_equal (target * 1.1).
constexpr double kBalanceSlack = 0.05;
constexpr double kBucketOvershoot = 1.1;

// Prefix sums of work and counts over "positions": the sorted order of the
// batch, then one new position per trimmed sequence appended at the end
// (Megatron appends trimmed sub-samples to the leftovers).
class Fenwick {
 public:
  explicit Fenwick(int size) : work_(size + 1, 0.0), count_(size + 1, 0) {}
  int size() const { return static_cast<int>(count_.size()) - 1; }
  void Add(int pos, double work, int count) {
    for (int i = pos + 1; i <= size(); i += i & -i)
      work_[i] += work, count_[i] += count;
  }
  double WorkBefore(int pos) const {  // Σ work of positions < pos
    double s = 0;
    for (int i = pos; i > 0; i -= i & -i) s += work_[i];
    return s;
  }
  int CountBefore(int pos) const {
    int s = 0;
    for (int i = pos; i > 0; i -= i & -i) s += count_[i];
    return s;
  }
  // Position of the item with 0-based ordinal `ordinal` among present items.
  int PositionOfOrdinal(int ordinal) const {
    int pos = 0, left = ordinal + 1;
    for (int step = HighBit(); step > 0; step >>= 1) {
      if (pos + step <= size() && count_[pos + step] < left) {
        pos += step;
        left -= count_[pos];
      }
    }
    return pos;  // 0-based position
  }
  // Smallest position p with Σ work of positions <= p > x (size() if none).
  int FirstPrefixAbove(double x) const {
    int pos = 0;
    double acc = 0;
    for (int step = HighBit(); step > 0; step >>= 1) {
      if (pos + step <= size() && acc + work_[pos + step] <= x) {
        pos += step;
        acc += work_[pos];
      }
    }
    return pos;
  }

 private:
  int HighBit() const {
    int b = 1;
    while (b * 2 <= size()) b *= 2;
    return b;
  }
  std::vector<double> work_;
  std::vector<int> count_;
};

int Log2(int64_t power_of_two) {
  int l = 0;
  while ((int64_t{1} << l) < power_of_two) ++l;
  return l;
}

// T_mem: tokens of one sequence that fit on one rank (the memory ceiling of
// max_seqlen_per_dp_cp_rank).
int64_t MemoryTokensPerRank(const PlanRequest& request) {
  int64_t longest = 1;
  for (const Sequence& s : request.sequences)
    longest = std::max(longest, s.length_tokens);
  const CostModel& cm = request.cost;
  if (cm.mem_per_token <= 0) return longest;
  const double t =
      std::floor((cm.mem_capacity - cm.mem_static) / cm.mem_per_token);
  return static_cast<int64_t>(std::clamp(t, 1.0, static_cast<double>(longest)));
}

}  // namespace

std::vector<int64_t> DcpMaxSeqlenCandidates(const PlanRequest& request) {
  const int64_t t_mem = MemoryTokensPerRank(request);
  int64_t longest = 1;
  for (const Sequence& s : request.sequences)
    longest = std::max(longest, s.length_tokens);
  std::vector<int64_t> out = {t_mem};
  for (int64_t p = 1; p <= request.cluster.num_ranks; p *= 2) {
    out.push_back(std::clamp<int64_t>((longest + p - 1) / p, 1, t_mem));
    out.push_back(std::max<int64_t>(1, t_mem / p));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> LongestFirst(const PlanRequest& request) {
  std::vector<int> order(request.sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return request.sequences[a].length_tokens >
           request.sequences[b].length_tokens;
  });
  return order;
}

// Long because: a rule-by-rule port of Megatron's BalancedCPScheduler loop,
// whose steps share the scheduler's state as the original does.
DcpSchedule ScheduleHybridCp(const PlanRequest& request,
                             int64_t max_seqlen_per_rank,
                             const std::vector<int>* longest_first) {
  FCP_CHECK(max_seqlen_per_rank >= 1);
  const int n = request.cluster.num_ranks;
  const int k_total = static_cast<int>(request.sequences.size());
  DcpSchedule out;
  // gpus_needed: max(1, 2^ceil(log2(s / max_seqlen))). The memory model, not
  // the token cap, is what the validator checks: if the cap is at the memory
  // limit and floor() left it a token too generous, double once more.
  std::vector<int64_t> needed(k_total);
  std::vector<double> work(k_total);
  for (int k = 0; k < k_total; ++k) {
    const int64_t len = request.sequences[k].length_tokens;
    int64_t cp =
        NextPowerOfTwo((len + max_seqlen_per_rank - 1) / max_seqlen_per_rank);
    const int64_t d_min =
        MinDegree(request.cost, GroupLoad::Of(request.sequences[k]));
    while (cp < d_min && cp < (int64_t{1} << 62)) cp *= 2;
    if (cp > n) {
      out.infeasible_sequence = k;
      return out;
    }
    needed[k] = cp;
    // get_total_workload: s^2 / cp_size, the scheduler's workload estimate.
    work[k] = static_cast<double>(len) * static_cast<double>(len) /
              static_cast<double>(cp);
  }
  // get_groups_and_subsamples: sort by length, descending (stable).
  const std::vector<int> order =
      longest_first ? *longest_first : LongestFirst(request);
  const int64_t trim_cap = static_cast<int64_t>(k_total) + 64;
  Fenwick fw(static_cast<int>(k_total + trim_cap));
  std::vector<int> item_at(fw.size(), -1);
  for (int p = 0; p < k_total; ++p) {
    item_at[p] = order[p];
    fw.Add(p, work[order[p]], 1);
  }
  int next_position = k_total;
  int remaining = k_total;
  const int num_sizes = Log2(NextPowerOfTwo(n)) + 1;
  std::vector<int> remaining_of_size(num_sizes, 0);
  for (int k = 0; k < k_total; ++k) ++remaining_of_size[Log2(needed[k])];

  while (remaining > 0) {
    // ---- make_buckets_equal: as many buckets as distinct CP sizes, closed
    // when the next sequence would exceed 1.1 x the per-bucket work target or
    // when the sequences left are needed to open the remaining buckets.
    int k_buckets = 0;
    for (int c : remaining_of_size) k_buckets += c > 0 ? 1 : 0;
    const double target = fw.WorkBefore(fw.size()) / k_buckets;
    struct Bucket {
      int head;  // position of its first remaining item
      int end;   // one past its last position
    };
    std::vector<Bucket> buckets;
    {
      int remaining_k = k_buckets;
      int a = 0;  // ordinal of the bucket's first item
      while (a < remaining) {
        const int start = fw.PositionOfOrdinal(a);
        const int over = fw.FirstPrefixAbove(fw.WorkBefore(start) +
                                             target * kBucketOvershoot);
        int close = over >= fw.size() ? remaining
                                      : std::max(a + 1, fw.CountBefore(over));
        const int reserve = remaining_k - static_cast<int>(buckets.size());
        close = std::min(close, std::max(a + 1, remaining - reserve));
        close = std::min(close, remaining);
        const int end =
            close >= remaining ? fw.size() : fw.PositionOfOrdinal(close);
        buckets.push_back({start, end});
        if (close < remaining) --remaining_k;
        a = close;
      }
    }
    size_t first_bucket = 0;  // buckets before it are empty and popped

    // ---- next_hdp_group: place bucket heads on CP groups.
    struct Group {
      int size;
      double load = 0;
      std::vector<int> members;
    };
    std::vector<Group> groups;
    std::vector<std::set<std::pair<double, int>>> by_size(num_sizes +
                                                          1);  // (load, gid)
    std::set<std::pair<double, int>> all_loads;                // (load, gid)
    int free_ranks = n;
    int64_t prev_needed = 0;
    bool check_balance = false;
    auto set_load = [&](int gid, double load) {
      Group& g = groups[gid];
      const int level = Log2(NextPowerOfTwo(g.size));
      by_size[level].erase({g.load, gid});
      all_loads.erase({g.load, gid});
      g.load = load;
      by_size[level].insert({g.load, gid});
      all_loads.insert({g.load, gid});
    };
    auto bucket_empty = [&](const Bucket& b) { return b.head >= b.end; };
    while (first_bucket < buckets.size()) {
      int pick_bucket = -1;
      for (size_t b = first_bucket; b < buckets.size() && pick_bucket < 0;
           ++b) {
        if (bucket_empty(buckets[b])) continue;
        const int64_t need = needed[item_at[buckets[b].head]];
        if (!by_size[Log2(need)].empty() || free_ranks >= need)
          pick_bucket = static_cast<int>(b);
      }
      if (pick_bucket < 0) break;  // no remaining head fits: close this step
      Bucket& bucket = buckets[pick_bucket];
      const int k = item_at[bucket.head];
      const int64_t need = needed[k];
      if (prev_needed == 0) prev_needed = need;
      // A new group on free GPUs has load 0 < any existing group's load, so
      // it wins whenever enough GPUs are free; else the least-loaded group of
      // exactly this size (first created on ties).
      int gid;
      if (free_ranks >= need) {
        gid = static_cast<int>(groups.size());
        groups.push_back({static_cast<int>(need), 0.0, {}});
        by_size[Log2(need)].insert({0.0, gid});
        all_loads.insert({0.0, gid});
        free_ranks -= static_cast<int>(need);
      } else {
        gid = by_size[Log2(need)].begin()->second;
      }
      groups[gid].members.push_back(k);
      set_load(gid, groups[gid].load + work[k]);
      ++out.placements;
      // popleft, then the next remaining item of the bucket becomes its head.
      fw.Add(bucket.head, -work[k], -1);
      --remaining;
      --remaining_of_size[Log2(need)];
      const int rank_of_next = fw.CountBefore(bucket.head);
      bucket.head = rank_of_next < remaining
                        ? fw.PositionOfOrdinal(rank_of_next)
                        : fw.size();
      while (first_bucket < buckets.size() &&
             bucket_empty(buckets[first_bucket]))
        ++first_bucket;
      if (need < prev_needed) check_balance = true;
      if (check_balance && first_bucket < buckets.size()) {
        const double max_load = all_loads.rbegin()->first;
        const double min_load = free_ranks > 0 ? 0.0 : all_loads.begin()->first;
        if (max_load - min_load <= kBalanceSlack * max_load) break;
      }
    }

    // ---- trim_overload: pop the most recent sequence of the most loaded
    // group while that reduces the max-min slack (never below one sequence
    // per group, never while GPUs are idle).
    while (out.trims < trim_cap && !all_loads.empty()) {
      const double cur_max = all_loads.rbegin()->first;
      const double cur_min = free_ranks > 0 ? 0.0 : all_loads.begin()->first;
      const double cur_slack = cur_max - cur_min;
      if (cur_slack <= kBalanceSlack * cur_max || cur_min == 0) break;
      // The first GPU with the maximum load belongs to the earliest-created
      // group of that load (groups sit on ranks in creation order).
      auto it = all_loads.lower_bound({cur_max, -1});
      const int gid = it->second;
      Group& g = groups[gid];
      if (g.members.size() <= 1) break;
      const int k = g.members.back();
      const double projected = g.load - work[k];
      double proj_max = projected, proj_min = projected;
      if (all_loads.size() > 1) {
        auto first = all_loads.begin();
        if (first->second == gid) ++first;
        auto last = all_loads.rbegin();
        if (last->second == gid) ++last;
        proj_max = std::max(proj_max, last->first);
        proj_min = std::min(proj_min, first->first);
      }
      if (!(proj_max - proj_min < cur_slack)) break;
      g.members.pop_back();
      set_load(gid, projected);
      // Back to the leftovers, after every remaining sequence.
      item_at[next_position] = k;
      fw.Add(next_position, work[k], 1);
      ++next_position;
      ++remaining;
      ++remaining_of_size[Log2(needed[k])];
      ++out.trims;
    }

    // ---- fill_empty_gpus: while GPUs are idle, the first group of the
    // smallest size grows to min(2 x size, N); later groups shift right.
    std::map<int, std::set<int>> gids_of_size;  // size -> gids (creation order)
    for (size_t gid = 0; gid < groups.size(); ++gid) {
      gids_of_size[groups[gid].size].insert(static_cast<int>(gid));
    }
    std::set<int> sizes_present;
    for (const Group& g : groups) sizes_present.insert(g.size);
    while (free_ranks > 0 && !sizes_present.empty()) {
      const int min_size = *sizes_present.begin();
      const int grown = std::min(2 * min_size, n);
      // Megatron asserts enough idle GPUs here; with N not a power of two it
      // can fail. We stop and leave the remaining GPUs idle instead.
      if (grown - min_size > free_ranks || grown == min_size) break;
      std::set<int>& smallest = gids_of_size[min_size];
      const int gid = *smallest.begin();
      smallest.erase(smallest.begin());
      if (smallest.empty())
        sizes_present.erase(min_size), gids_of_size.erase(min_size);
      groups[gid].size = grown;
      gids_of_size[grown].insert(gid);
      sizes_present.insert(grown);
      free_ranks -= grown - min_size;
      ++out.expansions;
    }

    // Ranks: groups in creation order from rank 0.
    std::vector<DcpCpGroup> step;
    double step_s = 0;
    int first = 0;
    for (Group& g : groups) {
      if (!g.members.empty()) {
        const bool intra = RangeOnOneNode(request.cluster, first, g.size);
        const Link link = intra ? Link::kIntraNode : Link::kInterNode;
        double t = 0;
        for (int k : g.members) {
          t += GroupTimeS(request.cost, GroupLoad::Of(request.sequences[k]),
                          g.size, link);
        }
        step_s = std::max(step_s, t);
        step.push_back({first, g.size, std::move(g.members)});
      }
      first += g.size;
    }
    FCP_CHECK(!step.empty());  // the first head always opens a group
    out.est_s += step_s;
    out.steps.push_back(std::move(step));
  }
  return out;
}

// The plan: step j of the schedule becomes micro-batches j.0, j.1, ...; micro-
// batch j.i holds the i-th sequence of every CP group of step j, on that
// group's ranks. Each sequence is then its own group (memory not summed, one
// forward/backward each, as Megatron runs sub-samples), and a CP group's
// sequences run back to back on the same ranks. The simulator lets a group
// start as soon as its ranks are free, so it times each CP group's chain as
// the planner's est_ms (the list-schedule makespan) does. notes.hdp_est_ms is
// the schedule's own estimate with Megatron's barrier after each hdp group
// (>= est_ms, which lets a next step's group start once its ranks are free);
// max_seqlen is tuned on it, as Megatron runs the steps.
// PlanOptions::max_seqlen_per_rank > 0 fixes the setting (a real user sets it
// once in the config; `fcp simulate` tunes it on the warm-up batches by
// simulated time and then fixes it); 0 tunes it per batch.
Plan MegatronDcpStrategy::Solve(const PlanRequest& request,
                                const PlanOptions& options) const {
  const bool fixed = options.max_seqlen_per_rank > 0;
  const std::vector<int64_t> candidates =
      fixed ? std::vector<int64_t>{options.max_seqlen_per_rank}
            : DcpMaxSeqlenCandidates(request);
  DcpSchedule best;
  int64_t best_t = 0;
  std::string tried;
  int last_bad = -1;  // from the largest setting that fails
  // Settings that give every sequence the same CP size schedule alike: one
  // run per distinct size vector (compared by a 64-bit FNV-1a hash).
  std::set<uint64_t> seen;
  const std::vector<int> order = LongestFirst(request);
  for (int64_t t : candidates) {
    uint64_t hash = 1469598103934665603ULL;
    for (const Sequence& seq : request.sequences) {
      hash = (hash ^ static_cast<uint64_t>(
                         NextPowerOfTwo((seq.length_tokens + t - 1) / t))) *
             1099511628211ULL;
    }
    if (!seen.insert(hash).second) continue;
    DcpSchedule s = ScheduleHybridCp(request, t, &order);
    if (s.infeasible_sequence >= 0) {
      last_bad = s.infeasible_sequence;
      continue;
    }
    if (!tried.empty()) tried += ",";
    tried += std::to_string(t) + ":" + FormatDouble(1000.0 * s.est_s, 5) + "ms";
    if (best_t == 0 || s.est_s < best.est_s) {
      best = std::move(s);
      best_t = t;
    }
  }
  if (best_t == 0) {
    return InfeasiblePlan(
        name(), request, std::max(0, last_bad),
        "sequences[" + std::to_string(std::max(0, last_bad)) +
            "] needs a power-of-two CP group larger than N = " +
            std::to_string(request.cluster.num_ranks) +
            (fixed ? " at max_seqlen_per_dp_cp_rank " +
                         std::to_string(options.max_seqlen_per_rank)
                   : std::string()));
  }
  Plan plan;
  plan.num_ranks = request.cluster.num_ranks;
  for (const auto& step : best.steps) {
    size_t depth = 0;
    for (const DcpCpGroup& g : step)
      depth = std::max(depth, g.sequences.size());
    for (size_t i = 0; i < depth; ++i) {
      MicroBatchPlan mb;
      for (const DcpCpGroup& g : step) {
        if (i < g.sequences.size()) {
          mb.groups.push_back({RankRange(g.first_rank, g.size),
                               {g.sequences[i]},
                               CommKind::kRing,
                               0,
                               0});
        }
      }
      plan.micro_batches.push_back(std::move(mb));
    }
  }
  plan.notes["max_seqlen_per_dp_cp_rank"] = std::to_string(best_t);
  plan.notes["max_seqlen_source"] =
      fixed ? std::string("fixed (--max-seqlen)")
            : "tuned (smallest hdp_est_ms among " +
                  std::to_string(candidates.size()) + " candidates)";
  plan.notes["max_seqlen_candidates"] = tried;
  plan.notes["hdp_groups"] = std::to_string(best.steps.size());
  plan.notes["hdp_est_ms"] = FormatDouble(1000.0 * best.est_s, 9);
  plan.notes["micro_batches"] = std::to_string(plan.micro_batches.size());
  return plan;
}

}  // namespace fcp::baselines
