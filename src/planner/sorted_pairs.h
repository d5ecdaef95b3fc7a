// A sorted set of (key, index) pairs for the planner's best-fit loops.
// Thread-safety: a value type.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fcp::planner {

// (key, index) pairs in one sorted vector, in the order of
// std::set<std::pair<double, int>> (by key, then index), which the best-fit
// loops (TryTau, BestFitDecreasing) used. Their few hundred entries are
// re-keyed tens of thousands of times per plan; a binary search over
// contiguous memory and a memmove of the entries in between beat a tree walk,
// a rebalance and a node allocation.
class SortedPairs {
 public:
  struct Entry {  // trivially copyable: shifts are one memmove
    double key;
    int index;
  };
  bool empty() const { return entries_.empty(); }
  void Reserve(size_t n) { entries_.reserve(n); }
  size_t size() const { return entries_.size(); }
  const Entry& operator[](size_t i) const { return entries_[i]; }
  const Entry& back() const { return entries_.back(); }
  // Position of the first entry whose key is >= `key` (size() when none):
  // std::set's lower_bound({key, -1}), indices being >= 0. Searched outward
  // from `hint` (any value): a few comparisons when the answer is near it, as
  // for consecutive items of similar size (the best-fit loops' answers move by
  // well under one place on average).
  size_t LowerBound(double key, size_t hint) const {
    const size_t n = entries_.size();
    auto below = [&](size_t i) {
      return entries_[i].key < key;
    };              // true on a prefix
    size_t lo, hi;  // the answer lies in [lo, hi]
    hint = std::min(hint, n);
    if (hint < n && below(hint)) {
      lo = hint + 1;
      size_t probe = lo, step = 1;
      while (probe < n && below(probe)) {
        lo = probe + 1;
        probe = lo + step;
        step *= 2;
      }
      hi = std::min(probe, n);
    } else {
      hi = hint;
      lo = 0;
      for (size_t step = 1; hi > 0; step *= 2) {
        const size_t probe = hi > step ? hi - step : 0;
        if (below(probe)) {
          lo = probe + 1;
          break;
        }
        hi = probe;
      }
    }
    return std::partition_point(entries_.begin() + lo, entries_.begin() + hi,
                                [key](const Entry& e) { return e.key < key; }) -
           entries_.begin();
  }
  void Insert(const Entry& e) {
    entries_.insert(PlaceOf(e, entries_.begin(), entries_.end()), e);
  }
  // Gives the entry at `i` the key `key`, moving it to its place in the order.
  void Rekey(size_t i, double key) {
    const Entry e{key, entries_[i].index};
    const auto at = entries_.begin() + static_cast<std::ptrdiff_t>(i);
    if (Less(e, *at)) {
      const auto to = PlaceOfBefore(e, entries_.begin(), at);
      std::move_backward(to, at, at + 1);
      *to = e;
    } else {
      const auto to = PlaceOfAfter(e, at + 1, entries_.end());
      std::move(at + 1, to, at);
      *(to - 1) = e;
    }
  }

 private:
  using Iterator = std::vector<Entry>::iterator;
  static bool Less(const Entry& a, const Entry& b) {
    return a.key < b.key || (a.key == b.key && a.index < b.index);
  }
  // std::lower_bound(first, last, e, Less) on a sorted range: a search on the
  // key alone, then past the (rare) equal keys with smaller indices.
  static Iterator PlaceOf(const Entry& e, Iterator first, Iterator last) {
    return PlaceIn(e, first, last, last);
  }
  // PlaceOf, given that the first key >= e.key lies in [lo, hi]: a search on
  // the key alone there, then past the (rare) equal keys with smaller indices
  // (up to `last`).
  static Iterator PlaceIn(const Entry& e, Iterator lo, Iterator hi,
                          Iterator last) {
    Iterator it = std::partition_point(
        lo, hi, [&](const Entry& x) { return x.key < e.key; });
    while (it != last && it->key == e.key && it->index < e.index) ++it;
    return it;
  }
  // PlaceOf on [first, last), searched from `last` backward (re-keyed entries
  // mostly move a few places): the galloping steps narrow the range that
  // holds the first key >= e.key, then the equal keys are walked as there.
  static Iterator PlaceOfBefore(const Entry& e, Iterator first, Iterator last) {
    Iterator hi = last;  // the first key >= e.key is in [first, hi]
    for (std::ptrdiff_t step = 1; hi - first > step; step *= 2) {
      const Iterator probe = hi - step;
      if (probe->key < e.key) {
        first = probe + 1;
        break;
      }
      hi = probe;
    }
    return PlaceIn(e, first, hi, last);
  }
  // The same searched from `first` forward.
  static Iterator PlaceOfAfter(const Entry& e, Iterator first, Iterator last) {
    Iterator lo = first;  // the first key >= e.key is in [lo, last]
    Iterator hi = last;
    for (std::ptrdiff_t step = 1; hi - lo > step; step *= 2) {
      const Iterator probe = lo + (step - 1);
      if (!(probe->key < e.key)) {
        hi = probe;
        break;
      }
      lo = probe + 1;
    }
    return PlaceIn(e, lo, hi, last);
  }
  std::vector<Entry> entries_;
};

}  // namespace fcp::planner
