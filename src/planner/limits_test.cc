// Numeric limits of MakePlan (issue 8): regression tests for inputs that used
// to abort the process (FCP_CHECK on a non-finite estimate) or cast an
// out-of-range double to int64 (UB), and the extremes that must plan.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "fcp/scheduler.h"

namespace fcp {
namespace {

PlanRequest Request(std::vector<int64_t> lengths, int ranks = 64,
                    int per_node = 16) {
  PlanRequest r;
  r.cluster = {ranks, per_node};
  r.cost = {.alpha1 = 1.2e-11,
            .alpha2 = 2.5e-6,
            .beta1 = 1e-3,
            .alpha3 = 1.3e5,
            .beta2 = 1e-4,
            .bw_intra_node = 1.96e11,
            .bw_inter_node = 5e10,
            .mem_per_token = 4.5e5,
            .mem_static = 2.2e10,
            .mem_capacity = 6.4e10};
  for (int64_t len : lengths) r.sequences.push_back({len, 0.0});
  return r;
}

// The field named by the InputError MakePlan throws ("" when it does not).
std::string RejectedField(const PlanRequest& req, const char* strategy) {
  try {
    MakePlan(req, {.strategy = strategy});
  } catch (const InputError& e) {
    return e.field();
  }
  return "";
}

TEST(LimitsTest, TimesThatOverflowAreRejectedNotAborted) {
  for (const char* strategy : {"fcp", "fcp-paper"}) {
    PlanRequest huge_alpha1 = Request({int64_t{1} << 40});
    huge_alpha1.cost.alpha1 = 1e300;
    huge_alpha1.cost.mem_per_token = 1e-9;
    EXPECT_EQ(RejectedField(huge_alpha1, strategy), "cost_model") << strategy;

    for (double CostModel::*field :
         {&CostModel::alpha1, &CostModel::alpha2, &CostModel::beta1,
          &CostModel::alpha3, &CostModel::beta2}) {
      PlanRequest req = Request({4096, 131072});
      req.cost.*field = 1e308;
      EXPECT_EQ(RejectedField(req, strategy), "cost_model") << strategy;
    }
    // Found by fuzz/planner_fuzz: alpha3 · Σs · (d - 1) overflowed inside
    // GroupTimeS although the final time (divided by d and bw) would not;
    // fcp-paper's DP then found no finite makespan (FCP_CHECK best < kInf).
    std::vector<int64_t> lengths(19, 50);
    lengths.push_back(9967640);
    PlanRequest huge_alpha3 = Request(lengths, 247, 30);
    huge_alpha3.cost.alpha3 = 1e300;
    huge_alpha3.cost.bw_intra_node = 8.5e11;
    huge_alpha3.cost.bw_inter_node = 2.125e11;
    huge_alpha3.cost.mem_per_token = 2.125e6;
    huge_alpha3.cost.mem_static = 8.5e10;
    huge_alpha3.cost.mem_capacity = 2.71e11;
    EXPECT_EQ(RejectedField(huge_alpha3, strategy), "cost_model") << strategy;

    PlanRequest slow_link = Request({4096, 131072});
    slow_link.cost.bw_intra_node = 1e-320;  // denormal: alpha3 * s / bw = inf
    EXPECT_EQ(RejectedField(slow_link, strategy), "cost_model") << strategy;

    PlanRequest slow_launch = Request({4096, 131072});
    slow_launch.cost.gamma_serial = 1e307;  // (d - 1) · gamma_serial = inf
    EXPECT_EQ(RejectedField(slow_launch, strategy), "cost_model") << strategy;
  }
}

TEST(LimitsTest, SubnormalTimeCoefficientsAreRejected) {
  // Found by fuzz/planner_fuzz: alpha2 = 5e-324 and every other time
  // coefficient 0: the lower bound (work / N) and the group estimates were
  // computed in subnormal numbers and the bound came out above the estimate.
  std::vector<int64_t> lengths(5, 8372157);
  lengths.push_back(4);
  lengths.push_back(4);
  PlanRequest req = Request(lengths, 247, 24);
  req.cost.alpha1 = req.cost.beta1 = req.cost.alpha3 = req.cost.beta2 = 0;
  req.cost.alpha2 = 5e-324;
  req.cost.mem_per_token = 1623039.2;
  req.cost.mem_static = 1.0387e11;
  req.cost.mem_capacity = 2.0775e11;
  for (const char* strategy : {"fcp", "fcp-paper"}) {
    EXPECT_EQ(RejectedField(req, strategy), "cost_model") << strategy;
  }
  req.cost.alpha2 =
      1e-280;  // the smallest accepted: plans, bound below the estimate
  const Plan plan = MakePlan(req, {.strategy = "fcp"});
  ASSERT_EQ(plan.status, PlanStatus::kOk);
  EXPECT_EQ(ValidatePlan(req, plan), "");
}

TEST(LimitsTest, DenormalBandwidthWithZeroAlpha3IsRejectedByEveryStrategy) {
  // Found by fuzz/baselines_fuzz: with alpha3 = 0 the ring's transfer time is
  // 0 / bw = 0, but the all-to-all cost divides bytes by (d - 1) / (s per
  // byte) = 0, and 0 / 0 made flexsp's group estimate NaN (FCP_CHECK).
  std::vector<int64_t> lengths(8, 146462);
  lengths.insert(lengths.begin(), 801845);
  PlanRequest req = Request(lengths, 58, 22);
  req.cost.alpha3 = 0;
  req.cost.mem_per_token = 595611.33;
  req.cost.mem_static = 1.35e11;
  req.cost.mem_capacity = 2.7e11;
  for (double CostModel::*bw :
       {&CostModel::bw_intra_node, &CostModel::bw_inter_node}) {
    PlanRequest slow = req;
    slow.cost.*bw = 5e-324;
    for (const std::string& strategy : StrategyNames()) {
      EXPECT_EQ(RejectedField(slow, strategy.c_str()), "cost_model")
          << strategy;
    }
  }
}

TEST(LimitsTest, MemoryBeyondInt64IsRejected) {
  PlanRequest req = Request({4096, int64_t{1} << 40});
  req.cost.mem_per_token = 1e290;
  req.cost.mem_static = 0;
  req.cost.mem_capacity = 1e300;  // mem_bytes would not fit an int64
  EXPECT_EQ(RejectedField(req, "fcp"), "cost_model.mem_capacity");
  req.cost.mem_capacity = 0x1p62;
  req.cost.mem_per_token = 1e3;
  const Plan plan = MakePlan(req, {.strategy = "fcp"});
  ASSERT_EQ(plan.status, PlanStatus::kOk);
  EXPECT_EQ(ValidatePlan(req, plan), "");
  // A plan read from a file need not respect the capacity: a group's memory
  // must still fit an int64 (plan_file_fuzz: mem_per_token 4.6e17).
  PlanRequest small = Request({49, 304, 786});
  small.cost.mem_capacity = 64e9;
  small.cost.mem_per_token = 4.6e17;
  EXPECT_EQ(RejectedField(small, "fcp"), "cost_model.mem_per_token");
}

TEST(LimitsTest, ExtremesWithinRangePlan) {
  // 2^40-token sequences with little memory per token; R not dividing N; N
  // up to 65,536; zero time coefficients.
  for (const char* strategy : {"fcp", "fcp-paper"}) {
    PlanRequest req =
        Request({int64_t{1} << 40, int64_t{1} << 40, 1, 7}, 65536, 7);
    req.cost.mem_per_token = 1e-3;
    Plan plan = MakePlan(req, {.strategy = strategy});
    ASSERT_EQ(plan.status, PlanStatus::kOk) << strategy;
    EXPECT_EQ(ValidatePlan(req, plan), "") << strategy;
    EXPECT_TRUE(std::isfinite(plan.est_ms)) << strategy;

    PlanRequest zero = Request({4096, 131072, 7}, 12, 5);
    zero.cost.alpha1 = zero.cost.alpha2 = zero.cost.beta1 = zero.cost.alpha3 =
        zero.cost.beta2 = 0;
    plan = MakePlan(zero, {.strategy = strategy});
    ASSERT_EQ(plan.status, PlanStatus::kOk) << strategy;
    EXPECT_EQ(ValidatePlan(zero, plan), "") << strategy;
    EXPECT_EQ(plan.est_ms, 0.0) << strategy;
  }
}

TEST(LimitsTest, ZeroWorkSequencesStillSplitIntoMicroBatches) {
  // Found by fuzz/planner_fuzz: with every time coefficient 0 the
  // work-balancing micro-batch split left micro-batches empty at every count
  // and aborted (FCP_CHECK count < k). 18 long sequences need 125 of 247 ranks
  // each.
  std::vector<int64_t> lengths(18, 8372157);
  for (int i = 0; i < 24; ++i) lengths.push_back(4);
  lengths.push_back(8176);
  lengths.push_back(8372157);
  for (const char* strategy : {"fcp", "fcp-paper"}) {
    PlanRequest req = Request(lengths, 247, 24);
    req.cost = {.alpha1 = 0,
                .alpha2 = 0,
                .beta1 = 0,
                .alpha3 = 0,
                .beta2 = 3.1425556161221793e-4,
                .bw_intra_node = 841024588991.495,
                .bw_inter_node = 2.125e11,
                .mem_per_token = 2124999.999999998,
                .mem_static = 64921568627.45098,
                .mem_capacity = 207749019607.84314};
    const Plan plan = MakePlan(req, {.strategy = strategy});
    ASSERT_EQ(plan.status, PlanStatus::kOk) << strategy;
    EXPECT_EQ(ValidatePlan(req, plan), "") << strategy;
    EXPECT_GE(plan.micro_batches.size(), 19u)
        << strategy;  // one long sequence each
  }
}

TEST(LimitsTest, InfeasibleIsAStatusNotAnError) {
  PlanRequest req = Request({131072, 5}, 1, 1);  // 131072 tokens need 2 ranks
  const Plan plan = MakePlan(req, {.strategy = "fcp"});
  EXPECT_EQ(plan.status, PlanStatus::kInfeasible);
  EXPECT_EQ(plan.infeasible_sequence, 0);
  EXPECT_TRUE(plan.micro_batches.empty());
}

}  // namespace
}  // namespace fcp
