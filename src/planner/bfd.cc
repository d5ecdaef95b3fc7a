#include "planner/bfd.h"

#include <algorithm>

#include "fcp/cost_model.h"
#include "planner/sorted_pairs.h"

namespace fcp::planner {

std::vector<std::vector<int>> BestFitDecreasing(
    const std::vector<Sequence>& seqs, const std::vector<int>& members,
    const CostModel& cm) {
  std::vector<int> order = members;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return seqs[a].length_tokens > seqs[b].length_tokens;
  });
  const double headroom = cm.mem_capacity - cm.mem_static;
  std::vector<std::vector<int>> bins;
  // (remaining activation bytes, bin id); best fit = smallest remaining >=
  // need.
  SortedPairs open;
  size_t hint = 0;  // the previous answer: lengths descend, so the next is near
  for (int idx : order) {
    const double need =
        cm.mem_per_token * static_cast<double>(seqs[idx].length_tokens);
    const size_t it = hint = open.LowerBound(need, hint);
    if (it < open.size()) {
      bins[open[it].index].push_back(idx);
      open.Rekey(it, open[it].key - need);
      continue;
    }
    const int64_t d_min = MinDegree(cm, GroupLoad::Of(seqs[idx]));
    const double capacity = static_cast<double>(d_min) * headroom;
    bins.push_back({idx});
    open.Insert({capacity - need, static_cast<int>(bins.size()) - 1});
  }
  return bins;
}

}  // namespace fcp::planner
