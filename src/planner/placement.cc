#include "planner/placement.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "fcp/check.h"

namespace fcp::planner {
namespace {

std::vector<int> ByDegreeDescending(const std::vector<int>& degrees) {
  std::vector<int> order(degrees.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return degrees[a] > degrees[b]; });
  return order;
}

std::vector<int> Sequential(const std::vector<int>& degrees, const std::vector<int>& order) {
  std::vector<int> first(degrees.size());
  int cursor = 0;
  for (int p : order) {
    first[p] = cursor;
    cursor += degrees[p];
  }
  return first;
}

// Node-aligned best-fit-decreasing; nullopt when some small group cannot be
// kept inside one node.
std::optional<std::vector<int>> NodeAligned(const std::vector<int>& degrees,
                                            const Cluster& cluster) {
  const int n = cluster.num_ranks;
  const int r = cluster.ranks_per_node;
  std::vector<int> first(degrees.size(), -1);
  const std::vector<int> order = ByDegreeDescending(degrees);
  int cursor = 0;
  for (int p : order) {
    if (degrees[p] > r) {
      first[p] = cursor;
      cursor += degrees[p];
    }
  }
  // Free segment of every node: [free_begin, node_end).
  const int num_nodes = (n + r - 1) / r;
  std::vector<int> free_begin(num_nodes), node_end(num_nodes);
  for (int k = 0; k < num_nodes; ++k) {
    const int begin = k * r;
    node_end[k] = std::min(n, begin + r);
    free_begin[k] = std::clamp(cursor, begin, node_end[k]);
  }
  for (int p : order) {
    if (degrees[p] > r) continue;
    int best = -1;
    for (int k = 0; k < num_nodes; ++k) {
      const int room = node_end[k] - free_begin[k];
      if (room >= degrees[p] &&
          (best < 0 || room < node_end[best] - free_begin[best])) {
        best = k;
      }
    }
    if (best < 0) return std::nullopt;
    first[p] = free_begin[best];
    free_begin[best] += degrees[p];
  }
  return first;
}

}  // namespace

std::vector<int> PlaceGroups(const std::vector<int>& degrees, const Cluster& cluster,
                             const PlacedTimeFn& placed_time) {
  FCP_CHECK(std::accumulate(degrees.begin(), degrees.end(), int64_t{0}) <=
            cluster.num_ranks);
  std::vector<std::vector<int>> candidates;
  if (auto aligned = NodeAligned(degrees, cluster)) candidates.push_back(*aligned);
  const std::vector<int> by_degree = ByDegreeDescending(degrees);
  candidates.push_back(Sequential(degrees, by_degree));
  std::vector<int> given(degrees.size());
  std::iota(given.begin(), given.end(), 0);
  candidates.push_back(Sequential(degrees, given));

  size_t best = 0;
  double best_time = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < candidates.size(); ++c) {
    double worst = 0;
    for (size_t p = 0; p < degrees.size(); ++p) {
      worst = std::max(worst, placed_time(static_cast<int>(p), candidates[c][p], degrees[p]));
    }
    if (worst < best_time) {
      best_time = worst;
      best = c;
    }
  }
  return candidates[best];
}

}  // namespace fcp::planner
