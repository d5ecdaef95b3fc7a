#include "planner/bfd.h"

#include <algorithm>
#include <set>

#include "fcp/cost_model.h"

namespace fcp::planner {

std::vector<std::vector<int>> BestFitDecreasing(const std::vector<Sequence>& seqs,
                                                const std::vector<int>& members,
                                                const CostModel& cm) {
  std::vector<int> order = members;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return seqs[a].length_tokens > seqs[b].length_tokens;
  });
  const double headroom = cm.mem_capacity - cm.mem_static;
  std::vector<std::vector<int>> bins;
  // (remaining activation bytes, bin id); best fit = smallest remaining >= need.
  std::set<std::pair<double, int>> open;
  for (int idx : order) {
    const double need = cm.mem_per_token * static_cast<double>(seqs[idx].length_tokens);
    auto it = open.lower_bound({need, -1});
    if (it != open.end()) {
      // Re-keyed in place (the node is reused: no allocation).
      auto node = open.extract(it);
      bins[node.value().second].push_back(idx);
      node.value().first -= need;
      open.insert(std::move(node));
      continue;
    }
    const int64_t d_min = MinDegree(cm, GroupLoad::Of(seqs[idx]));
    const double capacity = static_cast<double>(d_min) * headroom;
    bins.push_back({idx});
    open.insert({capacity - need, static_cast<int>(bins.size()) - 1});
  }
  return bins;
}

}  // namespace fcp::planner
