// SortedPairs keeps std::set<std::pair<double, int>>'s order and lower_bound
// under random inserts and re-keys (ties in the key included), whatever the
// hint.
#include "planner/sorted_pairs.h"

#include <gtest/gtest.h>

#include <iterator>
#include <random>
#include <set>
#include <utility>

namespace fcp::planner {
namespace {

TEST(SortedPairsTest, MatchesStdSet) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    // Few distinct keys, so that equal keys are ordered by index.
    std::uniform_int_distribution<int> key_of(0, seed % 2 == 0 ? 8 : 1000);
    SortedPairs pairs;
    std::set<std::pair<double, int>> reference;
    int next_index = 0;
    for (int op = 0; op < 400; ++op) {
      const double key = key_of(rng) * 0.5;
      const int what = std::uniform_int_distribution<int>(0, 2)(rng);
      if (what == 0 || reference.empty()) {
        pairs.Insert({key, next_index});
        reference.insert({key, next_index});
        ++next_index;
      } else if (what == 1) {
        const size_t at =
            std::uniform_int_distribution<size_t>(0, reference.size() - 1)(rng);
        auto it = std::next(reference.begin(), static_cast<std::ptrdiff_t>(at));
        ASSERT_EQ(pairs[at].index, it->second);
        auto node = reference.extract(it);
        node.value().first = key;
        reference.insert(std::move(node));
        pairs.Rekey(at, key);
      }
      const size_t hint =
          std::uniform_int_distribution<size_t>(0, reference.size() + 2)(rng);
      const size_t found = pairs.LowerBound(key, hint);
      const auto expected = reference.lower_bound({key, -1});
      ASSERT_EQ(found,
                static_cast<size_t>(std::distance(reference.begin(), expected)))
          << "seed " << seed << " op " << op;
      ASSERT_EQ(pairs.size(), reference.size());
      size_t i = 0;
      for (const auto& [k, index] : reference) {
        ASSERT_EQ(pairs[i].key, k) << "seed " << seed << " op " << op;
        ASSERT_EQ(pairs[i].index, index) << "seed " << seed << " op " << op;
        ++i;
      }
    }
  }
}

}  // namespace
}  // namespace fcp::planner
