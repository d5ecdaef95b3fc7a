#include "planner/placement.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>

#include "fcp/check.h"

namespace fcp::planner {
namespace {

std::vector<int> ByDegreeDescending(const std::vector<int>& degrees) {
  std::vector<int> order(degrees.size());
  const int max_degree =
      degrees.empty() ? 0 : *std::max_element(degrees.begin(), degrees.end());
  const bool counting =
      !degrees.empty() &&
      *std::min_element(degrees.begin(), degrees.end()) >= 0 &&
      max_degree <= 4 * static_cast<int>(degrees.size()) + 64;
  if (!counting) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return degrees[a] > degrees[b]; });
    return order;
  }
  // The same order as the stable sort, by counting: degrees are small.
  std::vector<int> slot(max_degree + 2,
                        0);  // slot[max_degree - d + 1]: count of d
  for (int d : degrees) ++slot[max_degree - d + 1];
  for (size_t i = 1; i < slot.size(); ++i) slot[i] += slot[i - 1];
  for (size_t p = 0; p < degrees.size(); ++p) {
    order[slot[max_degree - degrees[p]]++] = static_cast<int>(p);
  }
  return order;
}

std::vector<int> Sequential(const std::vector<int>& degrees,
                            const std::vector<int>& order) {
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
  // Best fit: the node with the least room >= d, the lowest index on ties.
  // With few ranks per node, a bitset of nodes per room value finds it in
  // O(R + nodes / 64) instead of a scan of every node for every group.
  const bool bucketed = r <= 64;
  const int words = (num_nodes + 63) / 64;
  std::vector<uint64_t> nodes_with_room;  // [room * words + k / 64], bit k % 64
  auto flip = [&](int room, int k) {
    nodes_with_room[static_cast<size_t>(room) * words + k / 64] ^= uint64_t{1}
                                                                   << (k % 64);
  };
  if (bucketed) {
    nodes_with_room.assign(static_cast<size_t>(r + 1) * words, 0);
    for (int k = 0; k < num_nodes; ++k) flip(node_end[k] - free_begin[k], k);
  }
  for (int p : order) {
    if (degrees[p] > r) continue;
    int best = -1;
    if (bucketed) {
      for (int room = std::max(degrees[p], 0); room <= r && best < 0; ++room) {
        for (int w = 0; w < words; ++w) {
          const uint64_t bits =
              nodes_with_room[static_cast<size_t>(room) * words + w];
          if (bits != 0) {
            best = w * 64 + std::countr_zero(bits);
            break;
          }
        }
      }
    } else {
      for (int k = 0; k < num_nodes; ++k) {
        const int room = node_end[k] - free_begin[k];
        if (room >= degrees[p] &&
            (best < 0 || room < node_end[best] - free_begin[best])) {
          best = k;
        }
      }
    }
    if (best < 0) return std::nullopt;
    if (bucketed) {
      const int room = node_end[best] - free_begin[best];
      flip(room, best);
      flip(room - degrees[p], best);
    }
    first[p] = free_begin[best];
    free_begin[best] += degrees[p];
  }
  return first;
}

// `by_degree` with the groups of unaligned degree (neither dividing R nor a
// multiple of it) moved behind the aligned ones, each part still by degree
// descending. Laid out in this order the aligned groups start on node
// boundaries (while each degree divides the one before), where an unaligned
// one before them would shift every later group across a boundary (issue 32:
// lanes of 12, 5 and 4 ranks on 4-rank nodes, NodeAligned finding no node for
// the 4 behind the 5).
std::vector<int> AlignedFirst(const std::vector<int>& degrees,
                              const std::vector<int>& by_degree,
                              const Cluster& cluster) {
  std::vector<int> order = by_degree;
  std::stable_partition(order.begin(), order.end(), [&](int p) {
    return degrees[p] <= 0 || AlignedDegree(cluster, degrees[p]);
  });
  return order;
}

}  // namespace

bool AlignedDegree(const Cluster& cluster, int degree) {
  const int r = cluster.ranks_per_node;
  return degree <= r ? r % degree == 0 : degree % r == 0;
}

std::vector<int> PlaceGroups(const std::vector<int>& degrees,
                             const Cluster& cluster,
                             const PlacedTimeFn& placed_time,
                             double* max_placed_time, double beat) {
  FCP_CHECK(std::accumulate(degrees.begin(), degrees.end(), int64_t{0}) <=
            cluster.num_ranks);
  std::vector<std::vector<int>> candidates;
  const auto aligned = NodeAligned(degrees, cluster);
  if (aligned) candidates.push_back(*aligned);
  const std::vector<int> by_degree = ByDegreeDescending(degrees);
  candidates.push_back(Sequential(degrees, by_degree));
  // Where NodeAligned keeps every small group inside a node this adds little.
  if (!aligned) {
    candidates.push_back(
        Sequential(degrees, AlignedFirst(degrees, by_degree, cluster)));
  }
  std::vector<int> given(degrees.size());
  std::iota(given.begin(), given.end(), 0);
  candidates.push_back(Sequential(degrees, given));

  size_t best = 0;
  double best_time = beat;
  // Each group's last costed start and time: layouts agree on many groups
  // (those with d > R always), and placed_time is a function of its arguments.
  std::vector<int> costed_first(degrees.size(), -1);
  std::vector<double> costed_time(degrees.size(), 0.0);
  for (size_t c = 0; c < candidates.size(); ++c) {
    // A layout equal to an earlier one has its max time and cannot win.
    if (std::find(candidates.begin(), candidates.begin() + c, candidates[c]) !=
        candidates.begin() + c) {
      continue;
    }
    double worst = 0;
    for (size_t p = 0; p < degrees.size(); ++p) {
      const int first = candidates[c][p];
      if (costed_first[p] != first) {
        costed_first[p] = first;
        costed_time[p] = placed_time(static_cast<int>(p), first, degrees[p]);
      }
      worst = std::max(worst, costed_time[p]);
      // The max only grows: once it reaches the best, this layout has lost.
      if (!(worst < best_time)) break;
    }
    if (worst < best_time) {
      best_time = worst;
      best = c;
    }
  }
  if (max_placed_time != nullptr) *max_placed_time = best_time;
  return candidates[best];
}

}  // namespace fcp::planner
