#include "planner/microbatch.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <functional>

#include "fcp/check.h"
#include "fcp/cost_model.h"
#include "planner/bfd.h"
#include "planner/heap.h"

namespace fcp::planner {

double SequenceWorkS(const CostModel& cm, const Sequence& s) {
  return WorkS(cm, GroupLoad::Of(s));
}

std::vector<std::vector<int>> LptPack(const std::vector<int>& order,
                                      const std::vector<double>& work,
                                      const std::vector<double>& size, double capacity,
                                      int count) {
  std::vector<std::vector<int>> bins(count);
  std::vector<double> used(count, 0.0);
  using Entry = std::pair<double, int>;  // (work, bin): a min-heap, distinct keys
  const PairGreater heap_less;           // std heap order with the least on top
  std::vector<Entry> heap(count);
  for (int m = 0; m < count; ++m) heap[m] = {0.0, m};  // ascending: already a heap
  std::vector<Entry> skipped;
  for (int idx : order) {
    const Entry top = heap.front();
    if (used[top.second] + size[idx] <= capacity || bins[top.second].empty()) {
      // The least-loaded bin takes it (the common case): its load grows, so
      // it sinks in place.
      bins[top.second].push_back(idx);
      used[top.second] += size[idx];
      ReplaceHeapTop(heap, Entry{top.first + work[idx], top.second}, heap_less);
      continue;
    }
    // Otherwise the least-loaded bin with room, as a priority queue finds it:
    // pop until one fits, then put the others back.
    skipped.clear();
    int chosen = -1;
    double chosen_work = 0;
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), heap_less);
      const Entry e = heap.back();
      heap.pop_back();
      if (used[e.second] + size[idx] <= capacity || bins[e.second].empty()) {
        chosen = e.second;
        chosen_work = e.first;
        break;
      }
      skipped.push_back(e);
    }
    for (const Entry& e : skipped) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), heap_less);
    }
    if (chosen < 0) return {};
    bins[chosen].push_back(idx);
    used[chosen] += size[idx];
    heap.push_back({chosen_work + work[idx], chosen});
    std::push_heap(heap.begin(), heap.end(), heap_less);
  }
  return bins;
}

WorkOrder MakeWorkOrder(const std::vector<Sequence>& seqs, const CostModel& cm) {
  const int k = static_cast<int>(seqs.size());
  WorkOrder w;
  w.order.resize(k);
  std::iota(w.order.begin(), w.order.end(), 0);
  w.work.resize(k);
  for (int i = 0; i < k; ++i) w.work[i] = SequenceWorkS(cm, seqs[i]);
  std::stable_sort(w.order.begin(), w.order.end(), [&](int a, int b) {
    if (w.work[a] != w.work[b]) return w.work[a] > w.work[b];
    return seqs[a].length_tokens > seqs[b].length_tokens;
  });
  return w;
}

std::vector<std::vector<int>> SplitIntoMicroBatches(
    const std::vector<Sequence>& seqs, const CostModel& cm, const Cluster& cluster, int count,
    bool check_bfd, std::vector<std::vector<std::vector<int>>>* bfd_groups,
    const WorkOrder* work_order) {
  if (bfd_groups) bfd_groups->clear();
  const int k = static_cast<int>(seqs.size());
  WorkOrder own;
  if (!work_order) {
    own = MakeWorkOrder(seqs, cm);
    work_order = &own;
  }
  const std::vector<int>& order = work_order->order;
  const std::vector<double>& work = work_order->work;
  const double capacity =
      static_cast<double>(cluster.num_ranks) * (cm.mem_capacity - cm.mem_static);
  std::vector<double> need(k);
  for (int i = 0; i < k; ++i) need[i] = cm.mem_per_token * static_cast<double>(seqs[i].length_tokens);
  std::vector<std::vector<int>> mbs = LptPack(order, work, need, capacity, count);
  if (mbs.empty()) return {};
  // Each micro-batch's members ascending: every sequence is in exactly one,
  // so one pass over the indices replaces a sort per micro-batch.
  {
    std::vector<int> mb_of(k, -1);
    for (size_t m = 0; m < mbs.size(); ++m) {
      for (int i : mbs[m]) mb_of[i] = static_cast<int>(m);
      mbs[m].clear();
    }
    for (int i = 0; i < k; ++i) {
      if (mb_of[i] >= 0) mbs[mb_of[i]].push_back(i);
    }
  }
  // Stage-1 feasibility of every micro-batch.
  std::vector<std::vector<std::vector<int>>> bfd(check_bfd ? mbs.size() : 0);
  for (size_t m = 0; m < mbs.size(); ++m) {
    auto& mb = mbs[m];
    if (mb.empty()) return {};
    if (!check_bfd) continue;
    int64_t ranks = 0;
    bfd[m] = BestFitDecreasing(seqs, mb, cm);
    for (const auto& bin : bfd[m]) {
      GroupLoad load;
      for (int i : bin) load.Add(seqs[i]);
      ranks += MinDegree(cm, load);
      if (ranks > cluster.num_ranks) return {};
    }
  }
  // Micro-batches in order (they are disjoint, so the order is strict), each
  // BFD grouping moving with its micro-batch.
  std::vector<int> by_members(mbs.size());
  std::iota(by_members.begin(), by_members.end(), 0);
  std::sort(by_members.begin(), by_members.end(), [&](int a, int b) { return mbs[a] < mbs[b]; });
  std::vector<std::vector<int>> sorted(mbs.size());
  for (size_t m = 0; m < mbs.size(); ++m) sorted[m] = std::move(mbs[by_members[m]]);
  if (bfd_groups && check_bfd) {
    bfd_groups->resize(mbs.size());
    for (size_t m = 0; m < mbs.size(); ++m) (*bfd_groups)[m] = std::move(bfd[by_members[m]]);
  }
  return sorted;
}

int MinMicroBatches(const std::vector<Sequence>& seqs, const CostModel& cm,
                    const Cluster& cluster) {
  double total_mem = 0;
  for (const auto& s : seqs) total_mem += cm.mem_per_token * static_cast<double>(s.length_tokens);
  const double capacity =
      static_cast<double>(cluster.num_ranks) * (cm.mem_capacity - cm.mem_static);
  return static_cast<int>(std::clamp(std::ceil(total_mem / capacity), 1.0,
                                     static_cast<double>(seqs.size())));
}

std::vector<std::vector<int>> SplitMicroBatches(
    const std::vector<Sequence>& seqs, const CostModel& cm, const Cluster& cluster,
    std::vector<std::vector<std::vector<int>>>* bfd_groups, const WorkOrder* work_order) {
  if (bfd_groups) bfd_groups->clear();
  const int k = static_cast<int>(seqs.size());
  int count = MinMicroBatches(seqs, cm, cluster);
  // A few exact steps, then geometric growth; count == K (one sequence per
  // micro-batch) is always feasible under the precondition.
  for (int attempt = 0;; ++attempt) {
    if (count >= k) {
      // One sequence per micro-batch, built directly: the LPT split leaves
      // micro-batches empty (and so fails) when sequences have zero work,
      // e.g. all time coefficients 0 (found by fuzz/planner_fuzz). With
      // positive work this is exactly what the LPT split returns for count K.
      std::vector<std::vector<int>> single(k);
      for (int i = 0; i < k; ++i) single[i] = {i};
      return single;
    }
    auto mbs = SplitIntoMicroBatches(seqs, cm, cluster, count, /*check_bfd=*/true, bfd_groups,
                                     work_order);
    if (!mbs.empty()) return mbs;
    count = attempt < 4 ? count + 1 : std::min(k, count + std::max(1, count / 8));
  }
}

}  // namespace fcp::planner
