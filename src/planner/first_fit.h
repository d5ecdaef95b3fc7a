// FirstFitChunks: first fit by tokens in O(log K) per item.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace fcp::planner {

// First fit of sequences into memory-bounded chunks (a lane's micro-batches)
// in O(log K) per sequence (issue 30: scanning every chunk was O(K · chunks),
// quadratic for one lane of everything on a small cluster). A chunk's memory
// depends only on its tokens and grows with them (every rounding step is
// monotone), so a range of chunks has one with room exactly when its least
// filled one has: a segment tree of the least tokens finds the first such
// chunk. Chunks not yet opened count as taking anything, as a new chunk does.
// Used by LaneMicroBatches (lanes.h), LptPack's fallback by size
// (microbatch.h) and the reference heuristics' lanes.
class FirstFitChunks {
 public:
  explicit FirstFitChunks(size_t max_chunks) {
    while (leaves_ < max_chunks) leaves_ *= 2;
    least_.assign(2 * leaves_, kUnopened);
  }
  // The first chunk c with fits(tokens of c), or the first unopened one.
  template <class Fits>
  size_t Find(Fits&& fits) const {
    size_t node = 1;
    while (node < leaves_) {
      const double least = least_[2 * node];
      node = least == kUnopened || fits(least) ? 2 * node : 2 * node + 1;
    }
    return node - leaves_;
  }
  void Add(size_t chunk, double tokens) {
    size_t node = leaves_ + chunk;
    least_[node] = (least_[node] == kUnopened ? 0.0 : least_[node]) + tokens;
    for (node /= 2; node >= 1; node /= 2)
      least_[node] = std::min(least_[2 * node], least_[2 * node + 1]);
  }

 private:
  static constexpr double kUnopened = -std::numeric_limits<double>::infinity();
  size_t leaves_ = 1;
  std::vector<double> least_;  // [1, 2·leaves): the tree, leaves at the end
};

}  // namespace fcp::planner
