// `fcp eval noise` (include/fcp/eval.h): re-planning under perturbed
// coefficients, simulated.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <tuple>

#include "fcp/eval.h"
#include "fcp/types.h"

namespace fcp {
namespace {

NoiseEvalOptions TinyNoise() {
  NoiseEvalOptions o;
  o.batch_sequences = 48;
  o.batches = 2;
  o.trials = 2;
  o.rank_counts = {16, 32};
  o.noise_levels = {0.0, 0.5};
  return o;
}

// Zero noise re-plans with identical coefficients: every plan must match and
// the simulated time must not change (the planner is deterministic).
TEST(NoiseEvalTest, ZeroNoiseReproducesPlansAndLargeNoiseIsReported) {
  const NoiseEvalReport r = RunNoiseEval(TinyNoise());
  ASSERT_EQ(r.rows.size(), 4u);
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.plans, 4);
    EXPECT_GE(row.cp_match, 0.0);
    EXPECT_LE(row.cp_match, 1.0);
    if (row.noise == 0.0) {
      EXPECT_EQ(row.cp_match, 1.0) << row.ranks;
      EXPECT_EQ(row.time_change_mean, 0.0) << row.ranks;
    }
  }
  EXPECT_EQ(r.rows[3].ranks, 32);
  EXPECT_DOUBLE_EQ(r.rows[3].paper_cp_match, 0.913);  // paper Table 4, 50%
  const auto j = nlohmann::json::parse(NoiseEvalToJson(r));
  EXPECT_EQ(j["times"], "simulated");
  EXPECT_EQ(j["rows"].size(), 4u);
}

TEST(NoiseEvalTest, BadOptionsNameTheField) {
  NoiseEvalOptions o = TinyNoise();
  o.rank_counts = {1000};
  try {
    RunNoiseEval(o);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "ranks[0]");
  }
  o = TinyNoise();
  o.dataset = "nope";
  EXPECT_THROW(RunNoiseEval(o), InputError);
}

// Perturbing nothing leaves every plan as it was, at any noise; perturbing
// one coefficient uses the same draws as perturbing all (an ablation), so the
// all-coefficient run equals the default one.
TEST(NoiseEvalTest, PerturbSelectsCoefficients) {
  NoiseEvalOptions none = TinyNoise();
  none.perturb.clear();
  for (const auto& row : RunNoiseEval(none).rows) {
    EXPECT_EQ(row.cp_match, 1.0) << row.ranks << " " << row.noise;
    EXPECT_EQ(row.time_change_mean, 0.0) << row.ranks << " " << row.noise;
  }
  NoiseEvalOptions listed = TinyNoise();
  listed.perturb = {"alpha3_home",
                    "gamma_serial",
                    "gamma_inter",
                    "gamma_intra",
                    "attn_overhead_tokens",
                    "beta2",
                    "alpha3",
                    "beta1",
                    "alpha2",
                    "alpha1"};  // all of them, another order
  const NoiseEvalReport a = RunNoiseEval(TinyNoise()), b = RunNoiseEval(listed);
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    EXPECT_EQ(a.rows[i].time_change_mean, b.rows[i].time_change_mean) << i;
    EXPECT_EQ(a.rows[i].cp_match, b.rows[i].cp_match) << i;
  }
  NoiseEvalOptions bad = TinyNoise();
  bad.perturb = {"alpha1", "alpha9"};
  try {
    RunNoiseEval(bad);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "perturb[1]");
  }
}

// Feedback: with no coefficient error the base plans and every "perturbed"
// plan learn from the same steps alike, so nothing changes; learning keeps
// the zero-noise rows exact and the options are checked.
TEST(NoiseEvalTest, FeedbackStepsLearnAlikeAndAreChecked) {
  NoiseEvalOptions o = TinyNoise();
  o.feedback_steps = 2;
  for (const auto& row : RunNoiseEval(o).rows) {
    if (row.noise != 0.0) continue;
    EXPECT_EQ(row.cp_match, 1.0) << row.ranks;
    EXPECT_EQ(row.time_change_mean, 0.0) << row.ranks;
  }
  const auto j = nlohmann::json::parse(NoiseEvalToJson(RunNoiseEval(o)));
  EXPECT_EQ(j["feedback_steps"], 2);
  for (auto [steps, sigma, field] : {std::tuple{65, 0.2, "feedback_steps"},
                                     std::tuple{-1, 0.2, "feedback_steps"},
                                     std::tuple{1, 0.0, "prior_sigma"}}) {
    o.feedback_steps = steps;
    o.recalibration.prior_sigma = sigma;
    try {
      RunNoiseEval(o);
      ADD_FAILURE() << field;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), field);
    }
  }
}

}  // namespace
}  // namespace fcp
