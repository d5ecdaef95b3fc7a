#include "exec/communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "exec/comm_cache.h"
#include "exec/dispatch.h"

namespace fcp::exec {
namespace {

TEST(FakeCommunicator, RingSendRecvIsOrdered) {
  RunFakeWorld(4, [](Communicator& c) {
    const int next = (c.rank() + 1) % c.size();
    const int prev = (c.rank() + c.size() - 1) % c.size();
    int a = c.rank() * 10, b = c.rank() * 10 + 1, ra = -1, rb = -1;
    RequestId r1 = c.Irecv(&ra, sizeof ra, prev, 7);
    RequestId r2 = c.Irecv(&rb, sizeof rb, prev, 7);
    RequestId s1 = c.Isend(&a, sizeof a, next, 7);
    RequestId s2 = c.Isend(&b, sizeof b, next, 7);
    c.Wait(r2);  // waiting out of order still matches in posting order
    c.Wait(r1);
    c.WaitAll({s1, s2});
    EXPECT_EQ(ra, prev * 10);
    EXPECT_EQ(rb, prev * 10 + 1);
  });
}

TEST(FakeCommunicator, CollectivesAndSplit) {
  RunFakeWorld(5, [](Communicator& c) {
    std::vector<float> x = {static_cast<float>(c.rank()), 1.0f};
    c.AllReduceSum(x.data(), x.size());
    EXPECT_EQ(x[0], 0 + 1 + 2 + 3 + 4);
    EXPECT_EQ(x[1], 5);
    int64_t v = c.rank() == 3 ? 42 : 0;
    c.Broadcast(&v, sizeof v, 3);
    EXPECT_EQ(v, 42);
    c.Barrier();
    // Odd ranks in one group, reversed order by key; rank 0 left out.
    const int color = c.rank() == 0 ? -1 : c.rank() % 2;
    auto sub = c.Split(color, -c.rank());
    if (c.rank() == 0) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), 2);
    // ranks {1,3} -> keys {-1,-3}: 3 first; {2,4}: 4 first.
    EXPECT_EQ(sub->rank(), (c.rank() == 3 || c.rank() == 4) ? 0 : 1);
    double y = c.rank();
    sub->AllReduceSum(&y, 1);
    EXPECT_EQ(y, c.rank() % 2 ? 4.0 : 6.0);
  });
}

TEST(CommCache, RecurringGroupsHitTheCache) {
  RunFakeWorld(4, [](Communicator& c) {
    CommCache cache(c);
    const std::vector<std::vector<int>> a = {{0, 1}, {2, 3}};
    const std::vector<std::vector<int>> b = {{2, 1, 0}};  // rank 3 idle
    Communicator* g1 = cache.Acquire(a);
    Communicator* g2 = cache.Acquire(b);
    Communicator* g3 = cache.Acquire(a);
    ASSERT_NE(g1, nullptr);
    EXPECT_EQ(g1, g3);
    EXPECT_EQ(g1->rank(), c.rank() % 2);
    if (c.rank() == 3) {
      EXPECT_EQ(g2, nullptr);
    } else {
      ASSERT_NE(g2, nullptr);
      EXPECT_EQ(g2->rank(), 2 - c.rank());  // ring order = set order
    }
    EXPECT_EQ(cache.stats().splits, 2);
    EXPECT_EQ(cache.stats().hits, 1);
    EXPECT_EQ(cache.stats().misses, c.rank() == 3 ? 1 : 2);
    EXPECT_EQ(cache.size(), 3u);
    // The cached communicator still works.
    float one = 1;
    g3->AllReduceSum(&one, 1);
    EXPECT_EQ(one, 2);
  });
}

TEST(Zigzag, ChunksCoverEverySequenceOnceWithGlobalPositions) {
  const std::vector<int64_t> lengths = {1, 7, 23, 40, 5};
  const std::vector<double> eta = {0.0, 0.0, 1.0, 0.0, 0.25};
  for (int d = 1; d <= 6; ++d) {
    const std::vector<int> ids = {4, 0, 2, 1, 3};
    auto layouts = ZigzagLayouts(lengths, eta, ids, d);
    ASSERT_EQ(layouts.size(), static_cast<size_t>(d));
    for (size_t k = 0; k < ids.size(); ++k) {
      std::vector<int> count(lengths[ids[k]], 0);
      for (int r = 0; r < d; ++r) {
        const SeqShard& s = layouts[r].seqs[k];
        EXPECT_EQ(s.seq, ids[k]);
        // Prefix of round(sqrt(eta)·s) tokens, recounted here.
        EXPECT_EQ(s.prefix_len,
                  std::llround(std::sqrt(eta[ids[k]]) * lengths[ids[k]]));
        EXPECT_TRUE(std::is_sorted(s.pos.begin(), s.pos.end()));
        for (int64_t p : s.pos) count[p]++;
        // Rank r holds exactly chunks r and 2d-1-r (independent recount).
        const int64_t len = lengths[ids[k]];
        std::vector<int64_t> expect;
        for (int64_t p = 0; p < len; ++p) {
          const int chunk = static_cast<int>(p * 2 * d / len);
          // p lies in chunk c iff c*len/(2d) <= p < (c+1)*len/(2d)
          int c = chunk;
          while (ChunkBegin(len, 2 * d, c) > p) --c;
          while (ChunkBegin(len, 2 * d, c + 1) <= p) ++c;
          if (c == r || c == 2 * d - 1 - r) expect.push_back(p);
        }
        EXPECT_EQ(s.pos, expect) << "d=" << d << " r=" << r;
      }
      for (int x : count) EXPECT_EQ(x, 1);
    }
    // Balanced: shard sizes differ by at most 2 per sequence.
    int64_t lo = INT64_MAX, hi = 0;
    for (auto& l : layouts) {
      lo = std::min(lo, l.num_tokens);
      hi = std::max(hi, l.num_tokens);
      int64_t off = 0;
      for (auto& s : l.seqs) {
        EXPECT_EQ(s.offset, off);
        off += s.size();
      }
      EXPECT_EQ(off, l.num_tokens);
    }
    EXPECT_LE(hi - lo, 2 * static_cast<int64_t>(ids.size()));
  }
}

}  // namespace
}  // namespace fcp::exec
