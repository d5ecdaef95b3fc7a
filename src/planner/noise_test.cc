// Planning for what the estimate leaves out: group-time noise
// (PlanRequest::group_time_sigma: the expected step against the log-normal
// integral, the fixed draws, fcp ranking its candidates by it) and the
// creation of new communicators (PlanRequest::communicators).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fcp/io.h"
#include "fcp/scheduler.h"
#include "planner/balanced_static.h"
#include "planner/schedule_testing.h"
#include "testing/random_batch.h"
#include "testing/sample_size.h"

namespace fcp {
namespace {

using testing::Group;
using testing::GroupsJson;

PlanRequest RandomRequestMaybeSync(uint64_t seed, uint64_t salt) {
  return testing::RandomRequestMaybeSync(seed, salt, 40);
}

// Asserts that no balanced static ring plan of `req` scores below `fcp_ms`.
template <class Score>
void ExpectNoStaticPlanScoresLower(const PlanRequest& req, double fcp_ms,
                                   Score&& score, uint64_t seed) {
  for (int cp = 1; cp <= req.cluster.num_ranks; ++cp) {
    if (req.cluster.num_ranks % cp) continue;
    auto mbs = planner::BalancedStaticMicroBatches(req, cp, CommKind::kRing);
    if (!mbs) continue;
    EstimateMicroBatches(req, *mbs);
    ASSERT_LE(fcp_ms, score(*mbs) * (1 + 1e-9))
        << "seed " << seed << " cp " << cp;
  }
}

// One micro-batch of groups on one rank each, with these estimates (ms).
std::vector<MicroBatchPlan> OneMicroBatch(const std::vector<double>& est_ms) {
  std::vector<MicroBatchPlan> mbs(1);
  for (size_t i = 0; i < est_ms.size(); ++i) {
    mbs[0].groups.push_back(Group({static_cast<int>(i)}, est_ms[i]));
  }
  return mbs;
}

// E[max_g t_g·F_g] for independent F_g = exp(sigma·Z - sigma²/2), by the
// trapezoid rule on E[X] = ∫ (1 - Π_g P(t_g·F_g <= x)) dx.
double ExpectedMaxByIntegral(const std::vector<double>& t, double sigma) {
  auto cdf = [&](double x) {
    double p = 1;
    for (double tg : t) {
      const double z = (std::log(x / tg) + 0.5 * sigma * sigma) / sigma;
      p *= 0.5 * std::erfc(-z / std::sqrt(2.0));
    }
    return p;
  };
  const double top =
      *std::max_element(t.begin(), t.end()) * std::exp(8 * sigma);
  const int steps = 200000;
  const double h = top / steps;
  double sum = 0.5 * (1 - 0) + 0.5 * (1 - cdf(top));
  for (int i = 1; i < steps; ++i) sum += 1 - cdf(i * h);
  return sum * h;
}

TEST(GroupNoiseTest, ZeroSigmaIsTheExactEstimate) {
  std::vector<MicroBatchPlan> mbs(2);
  mbs[0].groups = {Group({0, 1}, 10), Group({2, 3}, 4)};
  mbs[1].groups = {Group({0, 1, 2, 3}, 6)};
  GroupTimeNoise none(0);
  const GradientSync sync{
      .collective_s = 0.020, .buckets = 4, .forward_share = 0.25};
  EXPECT_DOUBLE_EQ(ExpectedStepMs(4, mbs, nullptr, none),
                   ListScheduleMs(4, mbs));
  EXPECT_DOUBLE_EQ(ExpectedStepMs(4, mbs, &sync, none), StepMs(4, mbs, sync));
}

TEST(GroupNoiseTest, ExpectedMaxAgainstTheLogNormalIntegral) {
  // Independent groups in one micro-batch: the expected step is E[max].
  // 4,096 draws put the standard error near 0.3 % of the mean.
  for (double sigma : {0.1, 0.2, 0.5}) {
    for (const std::vector<double>& t :
         {std::vector<double>{10}, std::vector<double>{10, 10},
          std::vector<double>(16, 10),
          std::vector<double>{12, 10, 10, 9, 5, 5, 5, 1}}) {
      GroupTimeNoise noise(sigma, 4096);
      const double mc = ExpectedStepMs(static_cast<int>(t.size()),
                                       OneMicroBatch(t), nullptr, noise);
      const double exact = ExpectedMaxByIntegral(t, sigma);
      EXPECT_NEAR(mc, exact, 0.015 * exact)
          << "sigma " << sigma << " groups " << t.size();
    }
  }
  // The max grows with the number of near-tied groups (why fewer groups can
  // win).
  GroupTimeNoise noise(0.2);
  EXPECT_LT(ExpectedStepMs(2, OneMicroBatch({10, 10}), nullptr, noise),
            ExpectedStepMs(16, OneMicroBatch(std::vector<double>(16, 10)),
                           nullptr, noise));
}

TEST(GroupNoiseTest, DrawsDependOnlyOnSampleAndGroup) {
  // Common random numbers: a factor is fixed by (sample, group index),
  // whatever was drawn before; every factor has mean 1.
  GroupTimeNoise in_order(0.3, 512), backwards(0.3, 512);
  std::vector<double> late(10);
  for (size_t k = 10; k-- > 0;) late[k] = backwards.Factor(5, k);
  for (size_t k = 0; k < 10; ++k)
    EXPECT_EQ(in_order.Factor(5, k), late[k]) << k;
  GroupTimeNoise many(0.3, 20000);
  double mean = 0;
  for (int s = 0; s < many.samples(); ++s)
    mean += many.Factor(s, 3) / many.samples();
  EXPECT_NEAR(mean, 1.0, 0.01);
}

// The mean over `noise`'s draws of one schedule per draw, each group's est_ms
// times its factor: ExpectedStepMs by its definition. A group with a delay
// runs after a stand-in group of that many ms on its ranks (the makespan
// alone: a stand-in would count as a rank's first group in StepMs).
double MeanOverDraws(int num_ranks, const std::vector<MicroBatchPlan>& mbs,
                     const GradientSync* sync, GroupTimeNoise& noise,
                     const std::vector<double>& delays = {}) {
  double sum = 0;
  for (int s = 0; s < noise.samples(); ++s) {
    std::vector<MicroBatchPlan> draw(mbs.size());
    size_t k = 0;
    for (size_t m = 0; m < mbs.size(); ++m) {
      for (GroupPlan g : mbs[m].groups) {
        if (k < delays.size() && delays[k] > 0)
          draw[m].groups.push_back(testing::Group(g.ranks, delays[k]));
        g.est_ms *= noise.Factor(s, k++);
        draw[m].groups.push_back(std::move(g));
      }
    }
    sum +=
        sync ? StepMs(num_ranks, draw, *sync) : ListScheduleMs(num_ranks, draw);
  }
  return sum / noise.samples();
}

TEST(GroupNoiseTest, ExpectedStepIsTheMeanOfOneSchedulePerDraw) {
  // ExpectedStepMs runs every draw's schedule at once (and one micro-batch of
  // disjoint groups group by group): against one schedule per draw, on fcp's
  // plans of random batches (one micro-batch or several, idle ranks or not,
  // with and without a sync).
  int one_micro_batch = 0, several = 0;
  for (uint64_t seed = 1; seed <= testing::SampleSize(60); ++seed) {
    const PlanRequest req = RandomRequestMaybeSync(seed, 7727);
    const Plan plan = MakePlan(req, {.strategy = "fcp"});
    if (plan.status != PlanStatus::kOk) continue;
    (plan.micro_batches.size() == 1 ? one_micro_batch : several)++;
    const int n = req.cluster.num_ranks;
    GroupTimeNoise noise(0.05 + 0.3 * static_cast<double>(seed % 4), 64);
    for (const GradientSync* sync :
         {static_cast<const GradientSync*>(nullptr),
          req.grad_sync ? &*req.grad_sync : nullptr}) {
      const double want = MeanOverDraws(n, plan.micro_batches, sync, noise);
      EXPECT_NEAR(ExpectedStepMs(n, plan.micro_batches, sync, noise), want,
                  1e-12 * want)
          << "seed " << seed << (sync ? " with sync" : "");
    }
  }
  EXPECT_GT(one_micro_batch, 0);
  EXPECT_GT(several, 0);
  // Hand-made: no group at all, an idle rank (3), a sync, creation delays.
  const GradientSync sync{
      .collective_s = 0.020, .buckets = 4, .forward_share = 0.25};
  GroupTimeNoise noise(0.4, 32);
  const std::vector<MicroBatchPlan> none(1);
  EXPECT_DOUBLE_EQ(ExpectedStepMs(4, none, &sync, noise),
                   MeanOverDraws(4, none, &sync, noise));
  std::vector<MicroBatchPlan> mbs(1);
  mbs[0].groups = {testing::Group({0, 1}, 10), testing::Group({2}, 4)};
  const double want = MeanOverDraws(4, mbs, &sync, noise);
  EXPECT_NEAR(ExpectedStepMs(4, mbs, &sync, noise), want, 1e-12 * want);
  mbs.push_back(mbs[0]);
  mbs[1].groups.push_back(testing::Group({3, 2}, 3));
  const std::vector<double> delays = {0, 2, 0, 0, 5};
  const double delayed = MeanOverDraws(4, mbs, nullptr, noise, delays);
  EXPECT_NEAR(ExpectedStepMs(4, mbs, nullptr, noise, delays), delayed,
              1e-12 * delayed);
  EXPECT_GT(delayed, MeanOverDraws(4, mbs, nullptr, noise));
}

TEST(GroupNoiseTest, FcpIsNeverWorseThanAnyBalancedStaticPlanInExpectedStep) {
  // Every balanced static ring plan is one of fcp's candidates, scored like
  // fcp's own plans by the expected step over the same draws: fcp's plan must
  // score no worse than any of them.
  int total = 0, differs = 0;
  for (uint64_t seed = 1; seed <= testing::SampleSize(150); ++seed) {
    PlanRequest req = RandomRequestMaybeSync(seed, 6151);
    req.group_time_sigma = 0.05 + 0.45 * static_cast<double>(seed % 10) / 9;
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    if (fcp.status != PlanStatus::kOk) continue;
    ++total;
    const GradientSync* sync = req.grad_sync ? &*req.grad_sync : nullptr;
    GroupTimeNoise noise(req.group_time_sigma);
    const double fcp_ms =
        ExpectedStepMs(req.cluster.num_ranks, fcp.micro_batches, sync, noise);
    ASSERT_EQ(fcp.notes.count("expected_step_ms"), 1u);
    EXPECT_NEAR(std::stod(fcp.notes.at("expected_step_ms")), fcp_ms,
                1e-5 * fcp_ms)
        << seed;
    ExpectNoStaticPlanScoresLower(
        req, fcp_ms,
        [&](const std::vector<MicroBatchPlan>& mbs) {
          return ExpectedStepMs(req.cluster.num_ranks, mbs, sync, noise);
        },
        seed);
    PlanRequest exact = req;
    exact.group_time_sigma = 0;
    differs +=
        GroupsJson(MakePlan(exact, {.strategy = "fcp"})) != GroupsJson(fcp);
  }
  std::printf(
      "noise-ranked fcp: %d batches, %d differ from the exact-ranked plan\n",
      total, differs);
  EXPECT_GT(total, testing::SampleSize(50));
  EXPECT_GT(differs, 0);  // the ranking must matter somewhere
}

TEST(CommunicatorTest, DelaysAgainstAHandComputedSchedule) {
  // 4 ranks, creation 2 ms; {0,1} exists. Micro-batch 0: A on {1,0} 10 ms
  // (exists, any order), B on {2,3} 4 ms (new: starts at 2); micro-batch 1:
  // C on {3,2} 6 ms (created by B: no delay), D on {0} 1 ms (one rank: none),
  // E on {1} 1 ms. B ends at 6, C runs 6..12; A ends at 10, D and E 10..11.
  std::vector<MicroBatchPlan> mbs(2);
  mbs[0].groups = {Group({1, 0}, 10), Group({2, 3}, 4)};
  mbs[1].groups = {Group({3, 2}, 6), Group({0}, 1), Group({1}, 1)};
  const CommunicatorCache cache{.create_s = 0.002, .existing = {{0, 1}}};
  const std::vector<double> delays = NewCommunicatorDelaysMs(mbs, cache);
  EXPECT_EQ(delays, (std::vector<double>{0, 2, 0, 0, 0}));
  GroupTimeNoise none(0);
  EXPECT_DOUBLE_EQ(ExpectedStepMs(4, mbs, nullptr, none, delays), 12);
  EXPECT_DOUBLE_EQ(ExpectedStepMs(4, mbs, nullptr, none),
                   ListScheduleMs(4, mbs));
  EXPECT_DOUBLE_EQ(ListScheduleMs(4, mbs), 11);
}

TEST(CommunicatorTest, FcpChargesOnlyNewCommunicators) {
  // Told that creation is dear and no communicator exists, fcp scores no
  // worse than any balanced static plan charged alike; holding every
  // communicator of its uncharged plan, it is charged nothing for that plan
  // and can only move to another plan that creates none.
  int total = 0, differs = 0, charged_differs = 0;
  for (uint64_t seed = 1; seed <= testing::SampleSize(150); ++seed) {
    const PlanRequest req = RandomRequestMaybeSync(seed, 3571);
    const Plan plain = MakePlan(req, {.strategy = "fcp"});
    if (plain.status != PlanStatus::kOk) continue;
    ++total;
    PlanRequest charged = req;
    charged.communicators = CommunicatorCache{
        .create_s = LowerBoundMs(req) / 4000.0, .existing = {}};
    const Plan fcp = MakePlan(charged, {.strategy = "fcp"});
    ASSERT_EQ(fcp.status, PlanStatus::kOk);
    const GradientSync* sync = req.grad_sync ? &*req.grad_sync : nullptr;
    GroupTimeNoise none(0);
    auto score = [&](const std::vector<MicroBatchPlan>& mbs) {
      return ExpectedStepMs(
          req.cluster.num_ranks, mbs, sync, none,
          NewCommunicatorDelaysMs(mbs, *charged.communicators));
    };
    const double fcp_ms = score(fcp.micro_batches);
    charged_differs += GroupsJson(fcp) != GroupsJson(plain);
    ASSERT_EQ(fcp.notes.count("step_ms"), 1u);
    EXPECT_NEAR(std::stod(fcp.notes.at("step_ms")), fcp_ms, 1e-5 * fcp_ms)
        << seed;
    ExpectNoStaticPlanScoresLower(req, fcp_ms, score, seed);
    // Every communicator of the plain plan already exists: nothing to charge.
    PlanRequest held = charged;
    for (const MicroBatchPlan& mb : plain.micro_batches) {
      for (const GroupPlan& g : mb.groups)
        held.communicators->existing.push_back(g.ranks);
    }
    const Plan again = MakePlan(held, {.strategy = "fcp"});
    // The plain plan scores as before and nothing else got cheaper, so the
    // choice can only move to another plan whose groups all exist too.
    const auto delays =
        NewCommunicatorDelaysMs(again.micro_batches, *held.communicators);
    if (GroupsJson(again) != GroupsJson(plain)) {
      ++differs;
      EXPECT_TRUE(std::all_of(delays.begin(), delays.end(), [](double d) {
        return d == 0;
      })) << seed;
    }
  }
  std::printf(
      "communicator-charged fcp: %d batches, %d plans changed by the charge, "
      "%d held "
      "plans changed\n",
      total, charged_differs, differs);
  EXPECT_GT(total, testing::SampleSize(50));
  EXPECT_GT(charged_differs, 0);  // the charge must matter somewhere
}

TEST(CommunicatorTest, SyncBoundFcpKeepsHeldRankSets) {
  // Where the gradient sync hides every one-group-per-rank plan, any such
  // plan's step is the sync's floor (2 x collective) and a new communicator
  // only adds its creation (issue 32: fcp 1 ms behind the static plan, which
  // reuses its groups). Batch B is batch A with every sequence a little
  // shorter, so A's one-micro-batch plan runs B on communicators that exist
  // (A's) at the floor: fcp, charged for new ones, must not score above it.
  int compared = 0, floor_hits = 0;
  for (uint64_t seed = 2; seed <= 120; seed += 2) {
    PlanRequest a = RandomRequestMaybeSync(seed, 7919);
    a.grad_sync.reset();
    const Plan plan_a = MakePlan(a, {.strategy = "fcp"});
    if (plan_a.status != PlanStatus::kOk || plan_a.micro_batches.size() != 1)
      continue;
    PlanRequest b = a;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> shrink(0.8, 1.0);
    for (Sequence& s : b.sequences) {
      s.length_tokens = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(s.length_tokens) *
                                  shrink(rng)));
    }
    b.grad_sync =
        GradientSync{.collective_s = 10 * plan_a.est_ms / 1000.0, .buckets = 4};
    b.communicators =
        CommunicatorCache{.create_s = LowerBoundMs(b) / 4000.0, .existing = {}};
    for (const GroupPlan& g : plan_a.micro_batches[0].groups)
      b.communicators->existing.push_back(g.ranks);
    GroupTimeNoise none(0);
    auto score = [&](std::vector<MicroBatchPlan> mbs) {
      EstimateMicroBatches(b, mbs);
      return ExpectedStepMs(b.cluster.num_ranks, mbs, &*b.grad_sync, none,
                            NewCommunicatorDelaysMs(mbs, *b.communicators));
    };
    const double held_ms = score(plan_a.micro_batches);
    const double floor_ms = 2000.0 * b.grad_sync->collective_s;
    ASSERT_GE(held_ms, floor_ms * (1 - 1e-12)) << seed;
    floor_hits += held_ms <= floor_ms * (1 + 1e-12);
    const Plan fcp = MakePlan(b, {.strategy = "fcp"});
    ASSERT_EQ(fcp.status, PlanStatus::kOk) << seed;
    EXPECT_LE(score(fcp.micro_batches), held_ms * (1 + 1e-12)) << seed;
    ++compared;
  }
  std::printf(
      "sync-bound fcp vs A's plan on held communicators: %d batches, "
      "%d at the floor\n",
      compared, floor_hits);
  EXPECT_GT(compared, 10);
  EXPECT_GT(floor_hits, 10);
}

// The field MakePlan's InputError names for `req`, or "" when it plans.
std::string FieldOf(const PlanRequest& req) {
  try {
    MakePlan(req, {.strategy = "fcp"});
  } catch (const InputError& e) {
    return e.field();
  }
  return "";
}

TEST(GroupNoiseTest, BadSigmaNamesTheField) {
  PlanRequest req = RandomRequestMaybeSync(1, 1);
  req.cluster = {8, 8};
  auto field = [&](double sigma) {
    req.group_time_sigma = sigma;
    return FieldOf(req);
  };
  EXPECT_EQ(field(-0.1), "group_time_sigma");
  EXPECT_EQ(field(2.5), "group_time_sigma");
  EXPECT_EQ(field(std::nan("")), "group_time_sigma");
  EXPECT_EQ(field(std::numeric_limits<double>::infinity()), "group_time_sigma");
  EXPECT_EQ(field(0.3), "");
  EXPECT_THROW(GroupTimeNoise(0.1, 0), InputError);
  req.group_time_sigma = 0;
  auto comm_field = [&](CommunicatorCache cache) {
    req.communicators = cache;
    return FieldOf(req);
  };
  EXPECT_EQ(comm_field({.create_s = -1, .existing = {}}),
            "communicators.create_s");
  EXPECT_EQ(comm_field({.create_s = std::nan(""), .existing = {}}),
            "communicators.create_s");
  EXPECT_EQ(comm_field({.create_s = 0.001, .existing = {{0, 1}, {2, 8}}}),
            "communicators.existing[1][1]");
  EXPECT_EQ(comm_field({.create_s = 0.001, .existing = {{0, 1}, {2, 3}}}), "");
}

}  // namespace
}  // namespace fcp
