// A binary-heap step the standard library lacks: lowering the top's priority
// in place. std::priority_queue needs a pop and a push for it (two passes over
// the heap); the planner's greedy loops (the fast allocator, the balanced
// dealing) do it once per rank or sequence. Thread-safety: pure function.
#pragma once

#include <utility>
#include <vector>

namespace fcp::planner {

// `heap` is a heap under `less` (std::make_heap order: no element is less than
// its children, so the greatest is at index 0). Replaces the top with
// `value`, which must not be greater than the old top, and sifts it down.
// With distinct keys every valid heap has the same top, so the sequence of
// tops is the same as with std::priority_queue.
template <class T, class Less>
void ReplaceHeapTop(std::vector<T>& heap, T value, Less less) {
  const size_t size = heap.size();
  size_t at = 0;
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= size) break;
    if (child + 1 < size && less(heap[child], heap[child + 1])) ++child;
    if (!less(value, heap[child])) break;
    heap[at] = std::move(heap[child]);
    at = child;
  }
  heap[at] = std::move(value);
}

// std::less<> and std::greater<> on (key, index) pairs with a floating-point
// key that is never NaN: the same order, compared directly (std::pair's
// comparison goes through operator<=> and a partial ordering, several more
// instructions in the planner's hottest heaps).
struct PairLess {
  template <class Pair>
  bool operator()(const Pair& a, const Pair& b) const {
    return a.first < b.first || (!(b.first < a.first) && a.second < b.second);
  }
};
struct PairGreater {
  template <class Pair>
  bool operator()(const Pair& a, const Pair& b) const {
    return b.first < a.first || (!(a.first < b.first) && b.second < a.second);
  }
};

}  // namespace fcp::planner
