// DualApprox (refine.h) shares one preparation and one cache of priced times
// between the degree rules LaneGroupings runs (free, node-aligned, even). The
// grouping a rule gets must not depend on which rules ran before it: on
// seeded random batches with memory relaxed as for lanes, every rule's
// grouping from one shared DualApprox, run in two orders, equals the
// grouping of a DualApprox used for that rule alone. And memory_decided():
// where it says memory decided nothing, the same search with memory relaxed
// (the oracle: run it) returns the same grouping.
#include "planner/refine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "fcp/cost_model.h"
#include "testing/random_batch.h"

namespace fcp::planner {
namespace {

using Grouping = std::optional<std::vector<std::vector<int>>>;

// `req` with memory relaxed as LaneGroupings relaxes it (every sequence's
// activations fit on one rank beside the others').
PlanRequest Relaxed(const PlanRequest& req) {
  PlanRequest relaxed = req;
  relaxed.cost.mem_capacity =
      req.cost.mem_static + (req.cost.mem_capacity - req.cost.mem_static) *
                                static_cast<double>(req.sequences.size());
  return relaxed;
}

// A bound some rules meet and some do not: 1.5 times the average work per
// rank (s).
double TightUpperS(const PlanRequest& req) {
  double work_s = 0;
  for (const Sequence& s : req.sequences)
    work_s += WorkS(req.cost, GroupLoad::Of(s));
  return 1.5 * work_s / req.cluster.num_ranks + req.cost.beta1;
}

// Each rule's grouping from one DualApprox that runs `rules` in order.
std::vector<Grouping> RunShared(const PlanRequest& relaxed,
                                const std::vector<int>& members,
                                const CostModel& real,
                                const std::vector<DualRule>& rules,
                                double upper_s) {
  DualApprox shared(relaxed, members, &real);
  std::vector<Grouping> out;
  for (const DualRule& rule : rules) out.push_back(shared.Group(upper_s, rule));
  return out;
}

// The degree rules the tests run, one of each kind.
constexpr DualRule kRules[] = {{},
                               {.aligned_degrees = true},
                               {.multiple_of = 2},
                               {.all_to_all_only = true},
                               {.roomiest_too = true}};

TEST(DualApproxTest, ARuleGroupsAsAloneWhateverRanBefore) {
  const std::vector<DualRule> rules(std::begin(kRules), std::end(kRules));
  const std::vector<DualRule> reversed(rules.rbegin(), rules.rend());
  int groupings = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const PlanRequest req = testing::RandomRequestMaybeSync(seed, 6007, 48);
    const PlanRequest relaxed = Relaxed(req);
    std::vector<int> members(req.sequences.size());
    std::iota(members.begin(), members.end(), 0);
    for (double upper_s :
         {std::numeric_limits<double>::infinity(), TightUpperS(req)}) {
      const auto forward =
          RunShared(relaxed, members, req.cost, rules, upper_s);
      const auto backward =
          RunShared(relaxed, members, req.cost, reversed, upper_s);
      for (size_t i = 0; i < rules.size(); ++i) {
        const Grouping alone =
            DualApprox(relaxed, members, &req.cost).Group(upper_s, rules[i]);
        EXPECT_EQ(forward[i], alone) << "seed " << seed << ", rule " << i;
        EXPECT_EQ(backward[rules.size() - 1 - i], alone)
            << "seed " << seed << ", rule " << i << " run first";
        groupings += alone.has_value();
      }
    }
  }
  EXPECT_GT(groupings, 200);
}

// LaneGroupings searches with fcp's one-micro-batch preparation, made on the
// real request and run there first (PlanSplit), giving each rule the relaxed
// request for its memory checks: every rule's grouping equals that of a
// preparation on the relaxed request with the real minimum degrees, on
// batches with repeated sequences (whose tries the search skips).
TEST(DualApproxTest, AnotherRequestsMemoryGroupsAsAPreparationOnIt) {
  int groupings = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    PlanRequest req = testing::RandomRequestMaybeSync(seed, 3001, 40);
    for (size_t i = 0, n = req.sequences.size(); i < n; i += 2)
      req.sequences.push_back(req.sequences[i]);
    const PlanRequest relaxed = Relaxed(req);
    std::vector<int> all(req.sequences.size());
    std::iota(all.begin(), all.end(), 0);
    const double upper_s = TightUpperS(req);
    DualApprox prepared(req, all);
    prepared.Group(upper_s, {});
    for (size_t i = 0; i < std::size(kRules); ++i) {
      const Grouping found = prepared.Group(upper_s, kRules[i], &relaxed);
      EXPECT_EQ(found,
                DualApprox(relaxed, all, &req.cost).Group(upper_s, kRules[i]))
          << "seed " << seed << ", rule " << i;
      groupings += found.has_value();
    }
  }
  EXPECT_GT(groupings, 200);
}

// PlanSplit hands its dual grouping to the lanes' free rule when memory
// decided nothing in it (fcp_strategies.cc): the claim checked against the
// relaxed search itself, on members in a shuffled order (the grouping must
// not depend on it), at the bound PlanSplit would give and a looser one. It
// fails when either memory check stops setting the flag (seeds 172 and 254
// need the groups' check) or when ties follow the members' order.
TEST(DualApproxTest, UndecidedByMemoryGroupsAsWithMemoryRelaxed) {
  int undecided = 0, decided = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    PlanRequest req = testing::RandomRequestMaybeSync(seed, 7919, 40);
    // Copies of a few sequences: ties in work, which an order by member
    // index would break differently from an order by position.
    const size_t distinct = req.sequences.size();
    for (size_t i = 0; i < std::min<size_t>(distinct, 8); ++i)
      req.sequences.push_back(req.sequences[i]);
    const PlanRequest relaxed = Relaxed(req);
    std::vector<int> all(req.sequences.size());
    std::iota(all.begin(), all.end(), 0);
    std::vector<int> shuffled = all;
    std::mt19937_64 rng(seed);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const double tight_s = TightUpperS(req);
    for (double upper_s : {tight_s, 2 * tight_s}) {
      DualApprox real(req, shuffled);
      const Grouping found = real.Group(upper_s, {});
      if (!found) continue;
      if (real.memory_decided()) {
        ++decided;
        continue;
      }
      ++undecided;
      EXPECT_EQ(found, DualApprox(relaxed, all, &req.cost).Group(upper_s, {}))
          << "seed " << seed << ", upper " << upper_s << " s";
    }
  }
  // Both answers occur, so both branches above are exercised.
  EXPECT_GT(undecided, 80);
  EXPECT_GT(decided, 80);
}

}  // namespace
}  // namespace fcp::planner
