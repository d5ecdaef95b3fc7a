// DualApprox (refine.h) shares one preparation and one cache of priced times
// between the degree rules LaneGroupings runs (free, node-aligned, even). The
// grouping a rule gets must not depend on which rules ran before it: on
// seeded random batches with memory relaxed as for lanes, every rule's
// grouping from one shared DualApprox, run in two orders, equals the
// grouping of a DualApprox used for that rule alone.
#include "planner/refine.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "fcp/cost_model.h"
#include "testing/random_batch.h"

namespace fcp::planner {
namespace {

struct Rule {
  bool aligned;
  int multiple_of;
};

using Grouping = std::optional<std::vector<std::vector<int>>>;

// Each rule's grouping from one DualApprox that runs `rules` in order.
std::vector<Grouping> RunShared(const PlanRequest& relaxed,
                                const std::vector<int>& members,
                                const CostModel& real,
                                const std::vector<Rule>& rules,
                                double upper_s) {
  DualApprox shared(relaxed, members, &real);
  std::vector<Grouping> out;
  for (const Rule& rule : rules)
    out.push_back(shared.Group(upper_s, rule.aligned, rule.multiple_of));
  return out;
}

TEST(DualApproxTest, ARuleGroupsAsAloneWhateverRanBefore) {
  const std::vector<Rule> rules = {{false, 1}, {true, 1}, {false, 2}};
  const std::vector<Rule> reversed(rules.rbegin(), rules.rend());
  int groupings = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const PlanRequest req = testing::RandomRequestMaybeSync(seed, 6007, 48);
    PlanRequest relaxed = req;  // as LaneGroupings relaxes it
    relaxed.cost.mem_capacity =
        req.cost.mem_static + (req.cost.mem_capacity - req.cost.mem_static) *
                                  static_cast<double>(req.sequences.size());
    std::vector<int> members(req.sequences.size());
    std::iota(members.begin(), members.end(), 0);
    // Unbounded, and a bound some rules meet and some do not: 1.5 times the
    // average work per rank.
    double work_s = 0;
    for (const Sequence& s : req.sequences)
      work_s += WorkS(req.cost, GroupLoad::Of(s));
    const double tight_s =
        1.5 * work_s / req.cluster.num_ranks + req.cost.beta1;
    for (double upper_s : {std::numeric_limits<double>::infinity(), tight_s}) {
      const auto forward =
          RunShared(relaxed, members, req.cost, rules, upper_s);
      const auto backward =
          RunShared(relaxed, members, req.cost, reversed, upper_s);
      for (size_t i = 0; i < rules.size(); ++i) {
        const Grouping alone =
            DualApprox(relaxed, members, &req.cost)
                .Group(upper_s, rules[i].aligned, rules[i].multiple_of);
        EXPECT_EQ(forward[i], alone) << "seed " << seed << ", rule " << i;
        EXPECT_EQ(backward[rules.size() - 1 - i], alone)
            << "seed " << seed << ", rule " << i << " run first";
        groupings += alone.has_value();
      }
    }
  }
  EXPECT_GT(groupings, 200);
}

}  // namespace
}  // namespace fcp::planner
