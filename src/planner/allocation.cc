#include "planner/allocation.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "fcp/check.h"
#include "planner/heap.h"

namespace fcp::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Canonical degrees for a known optimal makespan: the fewest ranks per group
// whose time is within the makespan. Exact comparison is safe because the
// makespan is one of the T values the same function produced.
std::vector<int> CanonicalDegrees(const std::vector<AllocGroup>& groups,
                                  int num_ranks, double makespan_s,
                                  const GroupTimeFn& time) {
  std::vector<int> degrees(groups.size());
  for (size_t p = 0; p < groups.size(); ++p) {
    int d = static_cast<int>(groups[p].min_degree);
    while (time(groups[p], d) > makespan_s) {
      ++d;
      FCP_CHECK(d <= num_ranks);
    }
    degrees[p] = d;
  }
  return degrees;
}

bool MinDegreesFit(const std::vector<AllocGroup>& groups, int num_ranks) {
  int64_t sum = 0;
  for (const auto& g : groups) {
    sum += g.min_degree;
    if (sum > num_ranks) return false;
  }
  return true;
}

}  // namespace

GroupTimeFn BestCaseTime(const CostModel& cm, const Cluster& cluster) {
  return [cm, cluster](const AllocGroup& g, int degree) {
    return g.inter_node ? GroupTimeS(cm, g.load, degree, Link::kInterNode)
                        : GroupTimeBestS(cm, cluster, g.load, degree);
  };
}

Allocation AllocateDp(const std::vector<AllocGroup>& groups, int num_ranks,
                      const GroupTimeFn& time) {
  Allocation result;
  if (!MinDegreesFit(groups, num_ranks)) return result;
  result.feasible = true;
  const size_t k = groups.size();
  if (k == 0) return result;
  const int n = num_ranks;
  // dp[i][j]: best makespan of groups [0, i] using exactly j ranks.
  std::vector<std::vector<double>> dp(k, std::vector<double>(n + 1, kInf));
  int64_t min_before = 0;  // Σ d_min of groups before i
  int64_t min_after = 0;   // Σ d_min of groups after i
  for (const auto& g : groups) min_after += g.min_degree;
  for (size_t i = 0; i < k; ++i) {
    min_after -= groups[i].min_degree;
    const int d_lo = static_cast<int>(groups[i].min_degree);
    std::vector<double> t(n + 1, kInf);
    for (int d = d_lo; d <= n - min_before - min_after; ++d)
      t[d] = time(groups[i], d);
    for (int j = static_cast<int>(min_before) + d_lo; j <= n - min_after; ++j) {
      double best = kInf;
      for (int d = d_lo; d <= j - min_before; ++d) {
        const double prev = i == 0 ? (j == d ? 0.0 : kInf) : dp[i - 1][j - d];
        best = std::min(best, std::max(prev, t[d]));
      }
      dp[i][j] = best;
    }
    min_before += groups[i].min_degree;
  }
  double best = kInf;
  for (int j = 0; j <= n; ++j) best = std::min(best, dp[k - 1][j]);
  FCP_CHECK(best < kInf);
  result.makespan_s = best;
  result.degrees = CanonicalDegrees(groups, n, best, time);
  return result;
}

Allocation AllocateFast(const std::vector<AllocGroup>& groups, int num_ranks,
                        const GroupTimeFn& time) {
  Allocation result;
  if (!MinDegreesFit(groups, num_ranks)) return result;
  result.feasible = true;
  const size_t k = groups.size();
  if (k == 0) return result;
  int64_t used = 0;
  // Per group: granted ranks, the envelope value T̂ at that grant, and T at
  // d_min (one allocation for all of it: this runs ~100 times per plan).
  struct State {
    int granted;
    bool settled;
    double envelope;
    double at_min_degree;
  };
  std::vector<State> state(k);
  using Entry =
      std::pair<double, int>;  // (T̂, -index): max-heap, lowest index on ties
  std::vector<Entry> heap(k);
  for (size_t p = 0; p < k; ++p) {
    State& g = state[p];
    g.granted = static_cast<int>(groups[p].min_degree);
    g.envelope = time(groups[p], g.granted);
    g.at_min_degree = g.envelope;
    used += g.granted;
    heap[p] = {g.envelope, -static_cast<int>(p)};
  }
  std::make_heap(heap.begin(), heap.end(), PairLess());
  // Every grant in order (T̂ after it, group): the canonical degrees are read
  // from it instead of evaluating T again (CanonicalDegrees).
  std::vector<Entry> grants;
  grants.reserve(static_cast<size_t>(std::max<int64_t>(0, num_ranks - used)));
  while (used < num_ranks) {
    // The bottleneck gets the rank; its T̂ can only fall, so it sinks in place.
    const int p = -heap.front().second;
    State& g = state[p];
    ++g.granted;
    ++used;
    g.envelope = std::min(g.envelope, time(groups[p], g.granted));
    ReplaceHeapTop(heap, Entry{g.envelope, -p}, PairLess());
    grants.push_back({g.envelope, p});
  }
  result.makespan_s = heap.front().first;
  // Canonical degrees: the first d >= d_min with T(G, d) <= makespan, i.e. the
  // first d at which the running minimum T̂ is <= makespan (same values, same
  // exact comparison as CanonicalDegrees). It is at most the granted degree,
  // whose T̂ is <= the makespan (the heap's maximum).
  result.degrees.resize(k);
  for (size_t p = 0; p < k; ++p) {
    result.degrees[p] = static_cast<int>(groups[p].min_degree);
    state[p].settled = state[p].at_min_degree <= result.makespan_s;
  }
  for (const auto& [envelope_after, p] : grants) {
    if (state[p].settled) continue;
    ++result.degrees[p];
    state[p].settled = envelope_after <= result.makespan_s;
  }
  return result;
}

ResumedAllocator::ResumedAllocator(const std::vector<AllocGroup>& groups,
                                   const std::vector<int>& degrees,
                                   const std::vector<double>& times,
                                   int num_ranks, const GroupTimeFn& time)
    : groups_(groups),
      time_(time),
      num_ranks_(num_ranks),
      degrees_(degrees),
      times_(times),
      by_time_(groups.size()),
      removed_(groups.size(), 0) {
  for (int d : degrees_) used_ += d;
  std::iota(by_time_.begin(), by_time_.end(), 0);
  std::sort(by_time_.begin(), by_time_.end(),
            [&](int a, int b) { return times_[a] > times_[b]; });
}

double ResumedAllocator::Makespan(const std::vector<int>& removed,
                                  const std::vector<AllocGroup>& added) {
  int64_t used = used_;
  for (int p : removed) used -= degrees_[p];
  for (const AllocGroup& g : added) used += g.min_degree;
  if (used > num_ranks_) return kInf;
  for (int p : removed) removed_[p] = 1;
  // Groups that got a rank here, and the added ones: (T̂, degree, group),
  // group >= 0 an original one, -1 - a the added one a. A max-heap; the
  // untouched groups wait in by_time_ order, the next one at `next`.
  struct Head {
    double envelope;
    int degree;
    int group;
    bool operator<(const Head& o) const { return envelope < o.envelope; }
  };
  std::vector<Head> touched;
  touched.reserve(added.size() + 8);
  for (size_t a = 0; a < added.size(); ++a) {
    const int d = static_cast<int>(added[a].min_degree);
    touched.push_back({time_(added[a], d), d, -1 - static_cast<int>(a)});
  }
  std::make_heap(touched.begin(), touched.end());
  size_t next = 0;
  auto skip_removed = [&] {
    while (next < by_time_.size() && removed_[by_time_[next]]) ++next;
  };
  skip_removed();
  for (; used < num_ranks_; ++used) {
    if (next >= by_time_.size() && touched.empty())
      break;  // no groups: no grants
    // The current bottleneck (ties either way: the makespan is the same).
    Head h;
    if (next < by_time_.size() &&
        (touched.empty() ||
         times_[by_time_[next]] > touched.front().envelope)) {
      const int p = by_time_[next++];
      skip_removed();
      h = {times_[p], degrees_[p], p};
    } else {
      std::pop_heap(touched.begin(), touched.end());
      h = touched.back();
      touched.pop_back();
    }
    ++h.degree;
    const AllocGroup& g = h.group >= 0 ? groups_[h.group] : added[-1 - h.group];
    h.envelope = std::min(h.envelope, time_(g, h.degree));
    touched.push_back(h);
    std::push_heap(touched.begin(), touched.end());
  }
  double makespan = touched.empty() ? 0 : touched.front().envelope;
  if (next < by_time_.size())
    makespan = std::max(makespan, times_[by_time_[next]]);
  for (int p : removed) removed_[p] = 0;
  return makespan;
}

}  // namespace fcp::planner
