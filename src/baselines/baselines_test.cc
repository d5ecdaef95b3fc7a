#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>

#include "baselines/dynamic.h"
#include "baselines/optimal.h"
#include "baselines/static_cp.h"
#include "fcp/cost_model.h"
#include "fcp/scheduler.h"
#include "testing/brute_force.h"
#include "testing/random_batch.h"

namespace fcp {
namespace {

using testing::RandomInstanceOptions;
using testing::RandomRequest;

const char* const kBaselines[] = {"megatron", "deepspeed", "megatron-dcp",
                                  "flexsp",   "bytescale", "optimal"};

bool IsPow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// MakePlan without its abort-on-invalid: Solve, EvaluatePlan, and the
// request/plan checks, so that a violation is a test failure with context
// (MakePlan FCP_CHECKs the validator). Returns the plan; `violation` gets
// ValidatePlan's verdict.
Plan RunStrategy(const PlanRequest& req, const PlanOptions& po,
                 std::string* violation = nullptr) {
  ValidateRequest(req);
  const Strategy* s = FindStrategy(po.strategy);
  if (s == nullptr) ADD_FAILURE() << "unknown strategy " << po.strategy;
  Plan plan = s->Solve(req, po);
  plan.strategy = po.strategy;
  plan.num_ranks = req.cluster.num_ranks;
  if (plan.status == PlanStatus::kOk) {
    EvaluatePlan(req, plan);
    const std::string v = ValidatePlan(req, plan);
    if (violation) *violation = v;
  }
  return plan;
}

int64_t DMin(const PlanRequest& req, int k) {
  return MinDegree(req.cost, GroupLoad::Of(req.sequences[k]));
}

TEST(Registry, EveryBaselineIsRegistered) {
  const auto names = StrategyNames();
  for (const char* name : kBaselines) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    const Strategy* s = FindStrategy(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->name(), name);
    EXPECT_FALSE(s->description().empty());
  }
}

// Thousands of seeded random batches (multi-micro-batch, some infeasible):
// every plan validates, and infeasibility is only reported when the
// strategy's own rule makes a sequence unplaceable.
TEST(AllBaselines, PlansValidateOnRandomBatches) {
  std::mt19937_64 rng(20240601);
  RandomInstanceOptions opt;
  opt.max_sequences = 24;
  opt.max_ranks = 32;
  opt.max_length_tokens = 150000;
  opt.one_micro_batch_feasible = false;
  int checked = 0, infeasible = 0;
  for (int i = 0; i < 1500; ++i) {
    const PlanRequest req = RandomRequest(rng, opt);
    for (const char* name : kBaselines) {
      const std::string s = name;
      if (s == "flexsp" && i % 10 != 0) continue;  // CBC: fewer, short solves
      if (s == "optimal" && (req.sequences.size() > 8 || req.cluster.num_ranks > 16))
        continue;
      PlanOptions po;
      po.strategy = s;
      po.time_limit_s = 0.1;
      Plan plan;
      std::string violation;
      try {
        plan = RunStrategy(req, po, &violation);
      } catch (const InputError& e) {
        // Only `optimal` may refuse: batch not holdable in one micro-batch.
        ASSERT_EQ(s, "optimal") << e.what();
        EXPECT_EQ(e.field(), "sequences");
        continue;
      }
      ++checked;
      if (plan.status == PlanStatus::kInfeasible) {
        ++infeasible;
        ASSERT_GE(plan.infeasible_sequence, 0) << s;
        const int k = plan.infeasible_sequence;
        if (s == "megatron" || s == "bytescale" || s == "optimal") {
          EXPECT_GT(DMin(req, k), req.cluster.num_ranks) << s << " instance " << i;
        } else {
          // Power-of-two rules: the sequence's power-of-two degree exceeds
          // the largest allowed one.
          int max_pow2 = 1;
          while (max_pow2 * 2 <= req.cluster.num_ranks) max_pow2 *= 2;
          EXPECT_GT(baselines::DcpDegree(req.cost, req.sequences[k].length_tokens),
                    s == "megatron-dcp" ? max_pow2 : 0)
              << s << " instance " << i;
        }
        continue;
      }
      EXPECT_EQ(violation, "") << s << " instance " << i;
      EXPECT_EQ(plan.strategy, s);
      EXPECT_GT(plan.est_ms, 0);
    }
  }
  EXPECT_GT(checked - infeasible, 3000);
}

TEST(Optimal, EqualsBruteForceOnTinyInstances) {
  std::mt19937_64 rng(99);
  RandomInstanceOptions opt;
  opt.max_sequences = 6;
  opt.max_ranks = 8;
  for (int i = 0; i < 400; ++i) {
    const PlanRequest req = RandomRequest(rng, opt);
    const double brute_s = testing::BruteForceMakespanS(req);
    ASSERT_TRUE(std::isfinite(brute_s)) << i;
    PlanOptions po;
    po.strategy = "optimal";
    const Plan plan = RunStrategy(req, po);
    ASSERT_EQ(plan.status, PlanStatus::kOk);
    ASSERT_EQ(plan.micro_batches.size(), 1u);
    EXPECT_NEAR(plan.est_ms, 1000.0 * brute_s, 1e-9 * 1000.0 * brute_s) << "instance " << i;
  }
}

// No ring strategy's one-micro-batch plan beats `optimal` (all-to-all plans
// use a different communication model and one-micro-batch is optimal's
// setting, so only those plans are comparable).
TEST(Optimal, NoStrategyBeatsIt) {
  std::mt19937_64 rng(4242);
  RandomInstanceOptions opt;
  opt.max_sequences = 8;
  opt.max_ranks = 16;
  std::vector<std::string> names;
  for (const std::string& n : StrategyNames()) {
    if (n != "optimal" && n != "flexsp" && n != "deepspeed") names.push_back(n);
  }
  int compared = 0;
  for (int i = 0; i < 300; ++i) {
    const PlanRequest req = RandomRequest(rng, opt);
    PlanOptions po;
    po.strategy = "optimal";
    const Plan best = RunStrategy(req, po);
    ASSERT_EQ(best.status, PlanStatus::kOk);
    for (const std::string& n : names) {
      po.strategy = n;
      const Plan p = RunStrategy(req, po);
      if (p.status != PlanStatus::kOk || p.micro_batches.size() != 1) continue;
      // fcp runs a group as all-to-all where that is cheaper: such plans are
      // outside optimal's (ring) model.
      bool all_to_all = false;
      for (const GroupPlan& g : p.micro_batches[0].groups)
        all_to_all |= g.comm == CommKind::kAllToAll;
      if (all_to_all) continue;
      ++compared;
      EXPECT_GE(p.est_ms, best.est_ms * (1 - 1e-9)) << n << " instance " << i;
    }
  }
  EXPECT_GT(compared, 300);
}

TEST(Optimal, RefusesAboveDocumentedSize) {
  PlanRequest req;
  req.cluster = {8, 8};
  req.cost = testing::RandomCostModel(*std::make_unique<std::mt19937_64>(1));
  req.sequences.assign(baselines::kOptimalMaxSequences + 1, Sequence{100, 0.0});
  PlanOptions po;
  po.strategy = "optimal";
  try {
    MakePlan(req, po);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "sequences");
    EXPECT_NE(std::string(e.what()).find("at most 12"), std::string::npos);
  }
  req.sequences.resize(2);
  req.cluster.num_ranks = baselines::kOptimalMaxRanks + 1;
  EXPECT_THROW(MakePlan(req, po), InputError);
}

std::vector<PlanRequest> RuleInstances(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  RandomInstanceOptions opt;
  opt.max_sequences = 20;
  opt.max_ranks = 32;
  opt.one_micro_batch_feasible = false;
  std::vector<PlanRequest> out;
  for (int i = 0; i < count; ++i) out.push_back(RandomRequest(rng, opt));
  return out;
}

// megatron --dealing loader: one degree c | N for every group of every
// micro-batch, replicas on aligned blocks, each replica's sequences in
// data-loader order. (The default, balanced dealing, is tested in
// src/planner/yardstick_test.cc.)
TEST(Megatron, SingleDegreeAndDataLoaderOrder) {
  int ok = 0;
  for (const PlanRequest& req : RuleInstances(1, 400)) {
    const Plan p = RunStrategy(req, {.strategy = "megatron", .dealing = Dealing::kLoader});
    EXPECT_EQ(p.status != PlanStatus::kOk || p.notes.at("dealing") == "data-loader order", true);
    if (p.status != PlanStatus::kOk) continue;
    ++ok;
    const int c = std::stoi(p.notes.at("cp_degree"));
    EXPECT_EQ(req.cluster.num_ranks % c, 0);
    std::vector<int> last_of_block(req.cluster.num_ranks / c, -1);
    for (const auto& mb : p.micro_batches) {
      for (const auto& g : mb.groups) {
        ASSERT_EQ(g.degree(), c);
        EXPECT_EQ(g.comm, CommKind::kRing);
        EXPECT_EQ(g.ranks[0] % c, 0);
        int& last = last_of_block[g.ranks[0] / c];
        for (int k : g.sequences) {
          if (last >= 0) EXPECT_EQ(k, last + 1);  // contiguous share, in order
          last = k;
        }
      }
    }
  }
  EXPECT_GT(ok, 100);
}

// Tuning picks the best fixed degree.
TEST(Megatron, TunedDegreeIsBestOfFixedOnes) {
  for (const PlanRequest& req : RuleInstances(2, 100)) {
    const Plan tuned = RunStrategy(req, {.strategy = "megatron"});
    if (tuned.status != PlanStatus::kOk) continue;
    for (int c : baselines::MegatronDegrees(req.cluster.num_ranks)) {
      const Plan fixed = RunStrategy(req, {.strategy = "megatron", .cp_degree = c});
      if (fixed.status != PlanStatus::kOk) continue;
      EXPECT_EQ(fixed.notes.at("cp_degree"), std::to_string(c));
      EXPECT_GE(fixed.est_ms, tuned.est_ms * (1 - 1e-12));
    }
  }
  PlanRequest req = RuleInstances(3, 1)[0];
  req.cluster.num_ranks = 12;
  EXPECT_THROW(RunStrategy(req, {.strategy = "megatron", .cp_degree = 5}), InputError);
}

// deepspeed: power of two, divides q_heads and N, all-to-all.
TEST(DeepSpeed, PowerOfTwoDividingHeadCount) {
  int seen_non_pow2_heads = 0, ok = 0;
  for (PlanRequest req : RuleInstances(4, 400)) {
    const Plan p = RunStrategy(req, {.strategy = "deepspeed"});
    if (p.status != PlanStatus::kOk) continue;
    ++ok;
    const int heads = req.model->q_heads;
    seen_non_pow2_heads += IsPow2(heads) ? 0 : 1;
    for (const auto& mb : p.micro_batches) {
      for (const auto& g : mb.groups) {
        EXPECT_TRUE(IsPow2(g.degree()));
        EXPECT_EQ(heads % g.degree(), 0) << "q_heads " << heads;
        EXPECT_EQ(req.cluster.num_ranks % g.degree(), 0);
        EXPECT_EQ(g.comm, CommKind::kAllToAll);
      }
    }
  }
  EXPECT_GT(seen_non_pow2_heads, 0);
  EXPECT_GT(ok, 100);
  PlanRequest req = RuleInstances(5, 1)[0];
  req.cluster = {16, 8};
  req.model->q_heads = 24;
  req.model->kv_heads = 8;
  req.sequences = {{1000, 0.0}};
  EXPECT_EQ(baselines::UlyssesDegrees(16, 24), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_THROW(RunStrategy(req, {.strategy = "deepspeed", .cp_degree = 16}), InputError);
  EXPECT_THROW(RunStrategy(req, {.strategy = "deepspeed", .cp_degree = 3}), InputError);
  const Plan fixed8 = RunStrategy(req, {.strategy = "deepspeed", .cp_degree = 8});
  EXPECT_EQ(fixed8.status, PlanStatus::kOk);
  // Model absent: the default preset's head count applies (documented).
  req.model.reset();
  const Plan fb = RunStrategy(req, {.strategy = "deepspeed"});
  EXPECT_NE(fb.notes.at("q_heads").find("model absent"), std::string::npos);
}

// megatron-dcp: power-of-two groups, each sequence on at least its
// next-power-of-two degree.
TEST(MegatronDcp, PowerOfTwoDegreesAtLeastSequenceCp) {
  int ok = 0;
  for (const PlanRequest& req : RuleInstances(6, 400)) {
    const Plan p = RunStrategy(req, {.strategy = "megatron-dcp"});
    if (p.status != PlanStatus::kOk) continue;
    ++ok;
    for (const auto& mb : p.micro_batches) {
      for (const auto& g : mb.groups) {
        EXPECT_TRUE(IsPow2(g.degree()));
        EXPECT_EQ(g.ranks[0] % g.degree(), 0);  // aligned blocks
        for (int k : g.sequences) {
          const int64_t cp = baselines::DcpDegree(req.cost, req.sequences[k].length_tokens);
          EXPECT_TRUE(IsPow2(static_cast<int>(cp)));
          EXPECT_GE(g.degree(), cp);
          EXPECT_GE(2 * cp, DMin(req, k));  // next power of two of d_min
        }
      }
    }
  }
  EXPECT_GT(ok, 100);
}

// flexsp: power-of-two Ulysses groups dividing q_heads; reports the solver.
TEST(FlexSp, PowerOfTwoUlyssesGroupsAndSolverNotes) {
  auto instances = RuleInstances(7, 60);
  int ok = 0;
  for (const PlanRequest& req : instances) {
    const Plan p = RunStrategy(req, {.strategy = "flexsp", .time_limit_s = 0.1});
    if (p.status != PlanStatus::kOk) continue;
    ++ok;
    EXPECT_TRUE(p.notes.count("milp_status"));
    EXPECT_TRUE(p.notes.count("milp_time_s"));
    for (const auto& mb : p.micro_batches) {
      for (const auto& g : mb.groups) {
        EXPECT_TRUE(IsPow2(g.degree()));
        EXPECT_EQ(req.model->q_heads % g.degree(), 0);
        EXPECT_EQ(g.comm, CommKind::kAllToAll);
      }
    }
  }
  EXPECT_GT(ok, 15);
}

// When the MILP is solved to optimality on one micro-batch with R a power of
// two (the MILP's bandwidth then equals the placed one), flexsp is no worse
// than deepspeed's one-micro-batch plan, which lies in flexsp's search space.
TEST(FlexSp, MilpOptimumBeatsStaticUlysses) {
  std::mt19937_64 rng(8);
  RandomInstanceOptions opt;
  opt.max_sequences = 7;
  opt.max_ranks = 16;
  int compared = 0;
  for (int i = 0; i < 120; ++i) {
    PlanRequest req = RandomRequest(rng, opt);
    if (!IsPow2(req.cluster.ranks_per_node)) continue;
    const Plan f = RunStrategy(req, {.strategy = "flexsp", .time_limit_s = 0.5});
    const Plan d = RunStrategy(req, {.strategy = "deepspeed"});
    if (f.status != PlanStatus::kOk || d.status != PlanStatus::kOk) continue;
    if (f.micro_batches.size() != 1 || d.micro_batches.size() != 1) continue;
    if (f.notes.at("milp_status") != "optimal") continue;
    ++compared;
    EXPECT_LE(f.est_ms, d.est_ms * (1 + 1e-9)) << "instance " << i;
  }
  EXPECT_GT(compared, 20);
}

// bytescale: each long sequence (d_min > 1) gets exactly d_min ranks.
TEST(ByteScale, LongSequencesGetFewestRanks) {
  int longs = 0, ok = 0;
  for (const PlanRequest& req : RuleInstances(9, 400)) {
    const Plan p = RunStrategy(req, {.strategy = "bytescale"});
    if (p.status != PlanStatus::kOk) continue;
    ++ok;
    for (const auto& mb : p.micro_batches) {
      for (const auto& g : mb.groups) {
        for (int k : g.sequences) {
          if (DMin(req, k) > 1) {
            ++longs;
            EXPECT_EQ(g.degree(), DMin(req, k));
          } else {
            EXPECT_TRUE(g.degree() == 1 || g.sequences[0] != k);
          }
        }
      }
    }
  }
  EXPECT_GT(longs, 50);
  EXPECT_GT(ok, 100);
}

}  // namespace
}  // namespace fcp
