#include "planner/microbatch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "fcp/check.h"
#include "fcp/cost_model.h"
#include "planner/bfd.h"
#include "planner/first_fit.h"
#include "planner/heap.h"

namespace fcp::planner {

double SequenceWorkS(const CostModel& cm, const Sequence& s) {
  return WorkS(cm, GroupLoad::Of(s));
}

namespace {

// The bins of LptPack ordered by (work, bin), each with its used size, and
// per subtree the least used size: "the least-loaded bin that still has room
// for s" is one descent, O(log count). It replaces popping a heap until a bin
// fits, which cost O(count) per sequence once most bins were nearly full: fcp
// took 14 s for 400k sequences on 32 ranks (issue 30). Same choice as the
// heap: keys are distinct and fl(used + s) grows with used, so a subtree has a
// bin with used + s <= capacity exactly when its least used one does.
// A treap with fixed priorities (deterministic); empty bins have used -inf
// (they take any sequence).
class BinsByWork {
 public:
  explicit BinsByWork(int count) : nodes_(count) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int b = 0; b < count; ++b) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      nodes_[b].priority = x;
      nodes_[b].id = b;
      root_ = Merge(root_, b);  // ascending (0, b): appending keeps the order
    }
  }
  double work(int b) const { return nodes_[b].work; }
  // The least (work, bin) with used + size <= capacity, or -1.
  int LeastLoadedWithRoom(double size, double capacity) const {
    auto fits = [&](double used) { return used + size <= capacity; };
    int t = root_;
    if (t < 0 || !fits(nodes_[t].min_used)) return -1;
    for (;;) {
      const Node& n = nodes_[t];
      if (n.left >= 0 && fits(nodes_[n.left].min_used)) {
        t = n.left;
      } else if (fits(n.used)) {
        return t;
      } else {
        t = n.right;  // the subtree has one, and it is not left of here
      }
    }
  }
  void Update(int b, double work, double used) {
    root_ = Erase(root_, b);
    Node& n = nodes_[b];
    n.work = work, n.used = used, n.left = n.right = -1;
    Pull(b);
    root_ = Insert(root_, b);
  }

 private:
  struct Node {
    double work = 0, used = -std::numeric_limits<double>::infinity(),
           min_used = used;
    int id = 0, left = -1, right = -1;
    uint64_t priority = 0;
  };
  bool Less(int a, int b) const {
    return nodes_[a].work != nodes_[b].work ? nodes_[a].work < nodes_[b].work
                                            : nodes_[a].id < nodes_[b].id;
  }
  void Pull(int t) {
    Node& n = nodes_[t];
    n.min_used = n.used;
    if (n.left >= 0) n.min_used = std::min(n.min_used, nodes_[n.left].min_used);
    if (n.right >= 0)
      n.min_used = std::min(n.min_used, nodes_[n.right].min_used);
  }
  int Merge(int a, int b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (nodes_[a].priority > nodes_[b].priority) {
      nodes_[a].right = Merge(nodes_[a].right, b);
      Pull(a);
      return a;
    }
    nodes_[b].left = Merge(a, nodes_[b].left);
    Pull(b);
    return b;
  }
  // (keys below key(b), the rest); b itself is not in t.
  std::pair<int, int> Split(int t, int b) {
    if (t < 0) return {-1, -1};
    if (Less(t, b)) {
      auto [l, r] = Split(nodes_[t].right, b);
      nodes_[t].right = l;
      Pull(t);
      return {t, r};
    }
    auto [l, r] = Split(nodes_[t].left, b);
    nodes_[t].left = r;
    Pull(t);
    return {l, t};
  }
  // b (no children) into t: down to where its priority belongs, then the
  // subtree there split around it. A treap's shape depends only on its keys
  // and priorities, so this is the tree Split and Merge build, in about half
  // the steps (issue 30).
  int Insert(int t, int b) {
    if (t < 0) return b;
    if (nodes_[b].priority > nodes_[t].priority) {
      auto [less, rest] = Split(t, b);
      nodes_[b].left = less, nodes_[b].right = rest;
      Pull(b);
      return b;
    }
    if (Less(b, t)) {
      nodes_[t].left = Insert(nodes_[t].left, b);
    } else {
      nodes_[t].right = Insert(nodes_[t].right, b);
    }
    Pull(t);
    return t;
  }
  int Erase(int t, int b) {
    if (t == b) return Merge(nodes_[t].left, nodes_[t].right);
    if (Less(b, t)) {
      nodes_[t].left = Erase(nodes_[t].left, b);
    } else {
      nodes_[t].right = Erase(nodes_[t].right, b);
    }
    Pull(t);
    return t;
  }

  std::vector<Node> nodes_;
  int root_ = -1;
};

// The bins of LptPack as a binary heap by (work, bin) while the least-loaded
// bin has room for each sequence, which is most of a packing: O(log count)
// per sequence in one array, where the treap's erase and insert chase
// pointers (two thirds of fcp-paper's planning time at 10^6 sequences on 32
// ranks, issue 30). From the first sequence the least-loaded bin cannot take
// on, BinsByWork takes over. Both give the least (work, bin) with room, so the
// packing is the same.
class LptBins {
 public:
  explicit LptBins(int count)
      : work_(count, 0.0),
        used_(count, -std::numeric_limits<double>::infinity()),
        heap_(count) {
    for (int b = 0; b < count; ++b) heap_[b] = {0.0, b};  // a valid heap
  }
  double work(int b) const { return work_[b]; }
  // The least (work, bin) with used + size <= capacity, or -1.
  int LeastLoadedWithRoom(double size, double capacity) {
    if (!by_work_) {
      if (used_[heap_[0].second] + size <= capacity) return heap_[0].second;
      SwitchToTreap();
    }
    return by_work_->LeastLoadedWithRoom(size, capacity);
  }
  // `b` is the bin LeastLoadedWithRoom returned.
  void Update(int b, double work, double used) {
    if (!by_work_ && work < work_[b]) SwitchToTreap();  // sift-down only
    work_[b] = work, used_[b] = used;
    if (by_work_) {
      by_work_->Update(b, work, used);
    } else {
      heap_[0].first = work;
      SiftDownFromTop();
    }
  }

 private:
  void SiftDownFromTop() {
    const size_t n = heap_.size();
    size_t at = 0;
    const std::pair<double, int> moving = heap_[0];
    for (;;) {
      size_t child = 2 * at + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child + 1] < heap_[child]) ++child;
      if (!(heap_[child] < moving)) break;
      heap_[at] = heap_[child];
      at = child;
    }
    heap_[at] = moving;
  }
  void SwitchToTreap() {
    by_work_.emplace(static_cast<int>(work_.size()));
    for (size_t b = 0; b < work_.size(); ++b) {
      if (used_[b] != -std::numeric_limits<double>::infinity())
        by_work_->Update(static_cast<int>(b), work_[b], used_[b]);
    }
  }

  std::vector<double> work_, used_;
  std::vector<std::pair<double, int>> heap_;  // (work, bin): no indirection
  std::optional<BinsByWork> by_work_;
};

// First fit decreasing by size into at most `count` bins, or empty: where LPT
// by work spreads the large items and leaves no bin room for a later one, a
// packing by size alone still finds the fewest bins memory allows (issue 32:
// 9 sequences on 12 ranks in 3 micro-batches where 2 fit, behind ref-share).
std::vector<std::vector<int>> FirstFitBySize(const std::vector<int>& order,
                                             const std::vector<double>& size,
                                             double capacity, int count) {
  std::vector<int> by_size = order;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return size[a] > size[b]; });
  std::vector<std::vector<int>> bins(count);
  // One chunk past the bins, never opened: Find lands there when no bin has
  // room.
  FirstFitChunks first_fit(count + 1);
  for (int i : by_size) {
    const size_t b = first_fit.Find(
        [&](double tokens) { return tokens + size[i] <= capacity; });
    if (b >= bins.size()) return {};
    bins[b].push_back(i);
    first_fit.Add(b, size[i]);
  }
  return bins;
}

}  // namespace

std::vector<std::vector<int>> LptPack(const std::vector<int>& order,
                                      const std::vector<double>& work,
                                      const std::vector<double>& size,
                                      double capacity, int count) {
  // Each sequence goes to the least-loaded bin (by work) with room for it;
  // an empty bin always has room.
  if (count == 1) {  // all in order while room lasts: no heap to keep
    double used = 0;
    for (size_t j = 0; j < order.size(); ++j) {
      const double item_size = size[order[j]];
      if (j > 0 && !(used + item_size <= capacity)) return {};
      used += item_size;
    }
    return {order};
  }
  std::vector<std::vector<int>> bins(count);
  std::vector<double> used(count, 0.0);
  LptBins by_work(count);
  // Work and size in packing order first: read by index inside the loop,
  // each was a cache miss the treap's steps could not hide once K·8 bytes
  // outgrew the cache (issue 30: a 15x slower step from 10^5 to 10^6).
  std::vector<std::pair<double, double>> items(order.size());
  for (size_t j = 0; j < order.size(); ++j)
    items[j] = {work[order[j]], size[order[j]]};
  for (size_t j = 0; j < order.size(); ++j) {
    const auto [item_work, item_size] = items[j];
    const int chosen = by_work.LeastLoadedWithRoom(item_size, capacity);
    if (chosen < 0) return FirstFitBySize(order, size, capacity, count);
    bins[chosen].push_back(order[j]);
    used[chosen] += item_size;
    by_work.Update(chosen, by_work.work(chosen) + item_work, used[chosen]);
  }
  return bins;
}

WorkOrder MakeWorkOrder(const std::vector<Sequence>& seqs,
                        const CostModel& cm) {
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
    const std::vector<Sequence>& seqs, const CostModel& cm,
    const Cluster& cluster, int count, bool check_bfd,
    std::vector<std::vector<std::vector<int>>>* bfd_groups,
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
  const double capacity = static_cast<double>(cluster.num_ranks) *
                          (cm.mem_capacity - cm.mem_static);
  std::vector<double> need(k);
  for (int i = 0; i < k; ++i)
    need[i] = cm.mem_per_token * static_cast<double>(seqs[i].length_tokens);
  std::vector<std::vector<int>> mbs =
      LptPack(order, work, need, capacity, count);
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
  std::sort(by_members.begin(), by_members.end(),
            [&](int a, int b) { return mbs[a] < mbs[b]; });
  std::vector<std::vector<int>> sorted(mbs.size());
  for (size_t m = 0; m < mbs.size(); ++m)
    sorted[m] = std::move(mbs[by_members[m]]);
  if (bfd_groups && check_bfd) {
    bfd_groups->resize(mbs.size());
    for (size_t m = 0; m < mbs.size(); ++m)
      (*bfd_groups)[m] = std::move(bfd[by_members[m]]);
  }
  return sorted;
}

int MinMicroBatches(const std::vector<Sequence>& seqs, const CostModel& cm,
                    const Cluster& cluster) {
  double total_mem = 0;
  for (const auto& s : seqs)
    total_mem += cm.mem_per_token * static_cast<double>(s.length_tokens);
  const double capacity = static_cast<double>(cluster.num_ranks) *
                          (cm.mem_capacity - cm.mem_static);
  return static_cast<int>(std::clamp(std::ceil(total_mem / capacity), 1.0,
                                     static_cast<double>(seqs.size())));
}

std::vector<std::vector<int>> SplitMicroBatches(
    const std::vector<Sequence>& seqs, const CostModel& cm,
    const Cluster& cluster,
    std::vector<std::vector<std::vector<int>>>* bfd_groups,
    const WorkOrder* work_order) {
  if (bfd_groups) bfd_groups->clear();
  const int k = static_cast<int>(seqs.size());
  const int fewest = MinMicroBatches(seqs, cm, cluster);
  WorkOrder own_order;
  std::vector<std::vector<std::vector<int>>> groups;
  // The split at `count`, or empty when BFD does not fit it (its groups in
  // `groups`). count == K (one sequence per micro-batch) is always feasible
  // under the precondition and built directly: the LPT split leaves
  // micro-batches empty (and so fails) when sequences have zero work, e.g.
  // all time coefficients 0 (found by fuzz/planner_fuzz). With positive work
  // this is exactly what the LPT split returns for count K.
  auto split_at = [&](int count) -> std::vector<std::vector<int>> {
    groups.clear();
    if (count >= k) {
      std::vector<std::vector<int>> single(k);
      for (int i = 0; i < k; ++i) single[i] = {i};
      return single;
    }
    if (!work_order) {  // sorted once for every count tried
      own_order = MakeWorkOrder(seqs, cm);
      work_order = &own_order;
    }
    return SplitIntoMicroBatches(seqs, cm, cluster, count, /*check_bfd=*/true,
                                 &groups, work_order);
  };
  // The fewest micro-batches whose BFD groupings fit (the paper's rule), to
  // within CountResolution: BFD fragments nearly full micro-batches, so the
  // rejected counts above the memory bound grow with the count itself (about
  // 0.6 % of it on github-like lengths: 5 and more at 10^6 sequences on 32
  // ranks). Stepping by one from the memory bound packed all K sequences
  // once per rejected count, so the passes grew with K (issue 30); galloping
  // by a share of the count and bisecting down to that share took two
  // passes there at 10^5 and at 10^6, and takes O(log K) at worst.
  int rejected = fewest - 1;  // the largest count known to be rejected
  int step = CountResolution(fewest);
  int count = fewest;
  std::vector<std::vector<int>> best = split_at(count);
  while (best.empty()) {
    rejected = count;
    count = std::min(k, count + step);
    step *= 2;
    best = split_at(count);
  }
  std::vector<std::vector<std::vector<int>>> best_groups;
  best_groups.swap(groups);  // split_at clears `groups` on each call
  // Feasibility is not known to be monotone in the count: the bisection
  // keeps a rejected count below a feasible one, whatever lies between.
  while (count - rejected > CountResolution(rejected)) {
    const int middle = rejected + (count - rejected) / 2;
    auto mbs = split_at(middle);
    if (mbs.empty()) {
      rejected = middle;
    } else {
      count = middle;
      best = std::move(mbs);
      best_groups.swap(groups);
    }
  }
  if (bfd_groups) *bfd_groups = std::move(best_groups);
  return best;
}

int CountResolution(int count) { return std::max(1, count / 64); }

}  // namespace fcp::planner
