// FirstFitChunks picks the chunk a scan of every chunk picks (the first whose
// tokens plus the item's stay within a capacity, else a new one), for random
// items, capacities and item orders; and an item that fits no chunk, even an
// empty one, still opens a new one.
#include "planner/first_fit.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace fcp::planner {
namespace {

TEST(FirstFitChunksTest, MatchesTheScan) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const int items = std::uniform_int_distribution<int>(1, 300)(rng);
    const double capacity =
        std::uniform_int_distribution<int>(1, 5000)(rng) * 0.5;
    std::uniform_int_distribution<int> size_of(1, seed % 3 == 0 ? 10 : 2000);
    FirstFitChunks first_fit(static_cast<size_t>(items));
    std::vector<double> tokens;  // the scan's chunks
    for (int i = 0; i < items; ++i) {
      const double size = size_of(rng);
      size_t want = 0;
      while (want < tokens.size() && tokens[want] + size > capacity) ++want;
      const size_t got = first_fit.Find(
          [&](double chunk_tokens) { return chunk_tokens + size <= capacity; });
      ASSERT_EQ(got, want) << "seed " << seed << ", item " << i;
      if (want == tokens.size()) tokens.push_back(0);
      tokens[want] += size;
      first_fit.Add(got, size);
    }
  }
}

TEST(FirstFitChunksTest, AnItemThatFitsNowhereOpensAChunk) {
  FirstFitChunks first_fit(3);
  const auto never = [](double) { return false; };
  EXPECT_EQ(first_fit.Find(never), 0u);
  first_fit.Add(0, 5);
  EXPECT_EQ(first_fit.Find(never), 1u);
  first_fit.Add(1, 5);
  EXPECT_EQ(first_fit.Find(never), 2u);
}

}  // namespace
}  // namespace fcp::planner
