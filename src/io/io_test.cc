// Parsers: batch JSON, cost-model JSON, length files, plan JSON.
#include "fcp/io.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fcp/cost_coefficients.h"
#include "fcp/presets.h"

namespace fcp {
namespace {

std::string FieldOf(const std::string& text) {
  try {
    ParseBatchJson(text);
  } catch (const InputError& e) {
    return e.field();
  }
  return "<accepted>";
}

TEST(BatchJsonTest, ParsesPresetsAndSequenceForms) {
  const BatchInput in = ParseBatchJson(
      R"({"cluster": "h100-8x8", "model": "llama3-8b",
          "sequences": [131072, {"length": 2048, "attention": "full"}, {"length": 900, "eta": 0.4, "vision_tokens": 768}]})");
  EXPECT_EQ(in.request.cluster.num_ranks, 64);
  EXPECT_EQ(in.request.cluster.ranks_per_node, 8);
  ASSERT_EQ(in.request.sequences.size(), 3u);
  EXPECT_EQ(in.request.sequences[0].vision_tokens, 0);
  EXPECT_EQ(in.request.sequences[2].vision_tokens, 768);
  EXPECT_EQ(in.request.sequences[0].length_tokens, 131072);
  EXPECT_EQ(in.request.sequences[1].eta, 1.0);
  EXPECT_EQ(in.request.sequences[2].eta, 0.4);
  ASSERT_TRUE(in.request.model.has_value());
  EXPECT_EQ(in.request.model->q_heads, 32);
  const CostModel expected = DeriveCostModel(*FindModelPreset("llama3-8b"),
                                             *FindClusterPreset("h100-8x8"));
  EXPECT_EQ(in.request.cost.alpha1, expected.alpha1);
  EXPECT_EQ(in.request.cost.mem_capacity, 80e9);
}

TEST(BatchJsonTest, CostModelKeysOverrideThePreset) {
  const BatchInput in = ParseBatchJson(
      R"({"cluster": {"ranks": 12, "ranks_per_node": 5}, "model": "qwen3-4b",
          "cost_model": {"alpha2": 1e-6, "beta1": 0.5}, "sequences": [10]})");
  EXPECT_EQ(in.request.cluster.num_ranks, 12);
  EXPECT_EQ(in.request.cluster.ranks_per_node, 5);
  EXPECT_EQ(in.request.cost.alpha2, 1e-6);
  EXPECT_EQ(in.request.cost.beta1, 0.5);
  EXPECT_GT(in.request.cost.alpha1, 0);  // from the preset
}

TEST(BatchJsonTest, CostModelV2KeysParseWithTheSameStrictness) {
  const BatchInput in = ParseBatchJson(
      R"({"cost_model": {"attn_overhead_tokens": 600, "gamma_intra": 1e-4,
          "gamma_inter": 3e-4, "gamma_serial": 2e-4, "ring_tail_steps": 1}, "sequences": [10]})");
  EXPECT_EQ(in.request.cost.gamma_serial, 2e-4);
  EXPECT_EQ(in.request.cost.attn_overhead_tokens, 600);
  EXPECT_EQ(in.request.cost.ring_tail_steps, 1);
  EXPECT_EQ(
      FieldOf(R"({"sequences": [1], "cost_model": {"ring_tail_steps": 1.5}})"),
      "cost_model.ring_tail_steps");
  EXPECT_EQ(
      FieldOf(R"({"sequences": [1], "cost_model": {"ring_tail_steps": -0.5}})"),
      "cost_model.ring_tail_steps");
  EXPECT_EQ(in.request.cost.gamma_intra, 1e-4);
  EXPECT_EQ(in.request.cost.gamma_inter, 3e-4);
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "cost_model": {"gamma_intra": -1}})"),
            "cost_model.gamma_intra");
  EXPECT_EQ(
      FieldOf(R"({"sequences": [1], "cost_model": {"gamma_inter": "1"}})"),
      "cost_model.gamma_inter");
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "cost_model": {"attn_overhead_tokens": 1e999}})"),
      "input");  // not a JSON number at all
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "cost_model": {"attn_overhead_tokens": -5}})"),
      "cost_model.attn_overhead_tokens");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "cost_model": {"gamma": 1}})"),
            "cost_model.gamma");
  // Presets carry their derived v2 terms; timing coefficients given without
  // any v2 key are the paper's model (v2 terms 0).
  const BatchInput preset =
      ParseBatchJson(R"({"model": "qwen3-8b", "sequences": [10]})");
  EXPECT_GT(preset.request.cost.attn_overhead_tokens, 0);
  EXPECT_GT(preset.request.cost.gamma_inter, 0);
  EXPECT_EQ(preset.request.cost.ring_tail_steps, 1);
  const BatchInput paper = ParseBatchJson(
      R"({"model": "qwen3-8b", "cost_model": {"alpha1": 1e-9}, "sequences": [10]})");
  EXPECT_EQ(paper.request.cost.attn_overhead_tokens, 0);
  EXPECT_EQ(paper.request.cost.gamma_intra, 0);
  EXPECT_EQ(paper.request.cost.gamma_inter, 0);
  EXPECT_EQ(paper.request.cost.ring_tail_steps, 0);
  EXPECT_EQ(paper.request.cost.gamma_serial, 0);
  const BatchInput memory_only = ParseBatchJson(
      R"({"model": "qwen3-8b", "cost_model": {"mem_capacity": 9e10}, "sequences": [10]})");
  EXPECT_EQ(memory_only.request.cost.gamma_inter,
            preset.request.cost.gamma_inter);
}

// The unset rule (docs/design.md §2): a cost_model that sets any timing
// coefficient leaves every v2 term it does not set at 0, whatever else it
// sets (issue: one v2 key used to keep the preset's other four); the sources
// say where each coefficient came from.
TEST(BatchJsonTest, UnsetV2TermsAreZeroBesideTimingCoefficients) {
  const BatchInput in = ParseBatchJson(
      R"({"model": "qwen3-8b", "cluster": "h100-8x8",
          "cost_model": {"alpha1": 1e-9, "attn_overhead_tokens": 256}, "sequences": [10]})");
  EXPECT_EQ(in.request.cost.attn_overhead_tokens, 256);
  EXPECT_EQ(in.request.cost.gamma_intra, 0);
  EXPECT_EQ(in.request.cost.gamma_inter, 0);
  EXPECT_EQ(in.request.cost.gamma_serial, 0);
  EXPECT_EQ(in.request.cost.ring_tail_steps, 0);
  ASSERT_EQ(in.cost_sources.size(), kNumCostCoefficients);
  for (size_t i = 0; i < kNumCostCoefficients; ++i) {
    const std::string_view name = kCostCoefficients[i].name;
    const CoefficientSource want =
        name == "alpha1" || name == "attn_overhead_tokens"
            ? CoefficientSource::kInput
        : kCostCoefficients[i].v2 ? CoefficientSource::kUnsetZero
                                  : CoefficientSource::kPreset;
    EXPECT_EQ(in.cost_sources[i], want) << name;
  }
  EXPECT_EQ(CostSourcesNote(in.cost_sources),
            "input: alpha1, attn_overhead_tokens; preset: alpha2, beta1, "
            "alpha3, beta2, "
            "bw_intra_node, bw_inter_node, mem_per_token, mem_static, "
            "mem_capacity; 0 (v2 term "
            "unset beside timing coefficients): gamma_intra, gamma_inter, "
            "gamma_serial, alpha3_home, ring_tail_steps, alpha2_vision");
  // ring_tail_steps alone is not a timing coefficient: the preset's h stays.
  const BatchInput tail = ParseBatchJson(
      R"({"model": "qwen3-8b", "cost_model": {"ring_tail_steps": 0.5}, "sequences": [10]})");
  EXPECT_GT(tail.request.cost.attn_overhead_tokens, 0);
  // A profile report's coefficients are marked as such; the rule applies to
  // a --cost-model file over the batch's coefficients too.
  CostSources sources = in.cost_sources;
  const CostModel over = ParseCostModelJson(
      R"({"cost_model": {"gamma_intra": 1e-5}, "wall_s": 1.0})",
      tail.request.cost, &sources);
  EXPECT_EQ(over.gamma_intra, 1e-5);
  EXPECT_EQ(over.attn_overhead_tokens, 0);
  EXPECT_EQ(sources[FindCostCoefficient("gamma_intra") - kCostCoefficients],
            CoefficientSource::kProfile);
  EXPECT_EQ(
      sources[FindCostCoefficient("attn_overhead_tokens") - kCostCoefficients],
      CoefficientSource::kUnsetZero);
}

TEST(BatchJsonTest, ErrorsNameTheField) {
  EXPECT_EQ(FieldOf(R"({"sequences": [1, 2, 0]})"), "sequences[2]");
  EXPECT_EQ(FieldOf(R"({"sequences": [1, {"length": 5, "eta": -0.1}]})"),
            "sequences[1].eta");
  EXPECT_EQ(FieldOf(R"({"sequences": [{"eta": 0.1}]})"), "sequences[0].length");
  EXPECT_EQ(FieldOf(R"({"sequences": [1099511627777]})"),
            "sequences[0]");  // 2^40 + 1
  EXPECT_EQ(FieldOf(R"({"sequences": [1e300]})"), "sequences[0]");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "cost_model": {"mem_capacity": 0}})"),
            "cost_model.mem_capacity");
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "cluster": {"ranks": 4, "ranks_per_node": 0}})"),
      "cluster.ranks_per_node");
  EXPECT_EQ(
      FieldOf(R"({"sequences": [1], "cluster": {"ranks": 4, "nodes": 2}})"),
      "cluster.nodes");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "model": 7})"), "model");
  EXPECT_EQ(FieldOf(R"({"sequences": [{"length": 5, "vision_tokens": 6}]})"),
            "sequences[0].vision_tokens");
  EXPECT_EQ(FieldOf(R"({"sequences": [{"length": 5, "vision_tokens": -1}]})"),
            "sequences[0].vision_tokens");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "sequences": [2]})"), "input");
  EXPECT_EQ(FieldOf("{\"sequences\": [1]"), "input");
  EXPECT_EQ(FieldOf(std::string(100, '[') + std::string(100, ']')), "input");
  EXPECT_EQ(FieldOf("\xff\xfe"), "input");
  EXPECT_EQ(FieldOf(R"({"sequences": [1]})"), "<accepted>");
}

TEST(BatchJsonTest, GradientSyncIsOptionalAndStrict) {
  EXPECT_FALSE(ParseBatchJson(R"({"sequences": [1]})").request.grad_sync);
  const BatchInput in = ParseBatchJson(
      R"({"sequences": [1], "grad_sync": {"collective_s": 0.3, "buckets": 4, "forward_share": 0.5}})");
  ASSERT_TRUE(in.request.grad_sync);
  EXPECT_EQ(in.request.grad_sync->collective_s, 0.3);
  EXPECT_EQ(in.request.grad_sync->buckets, 4);
  EXPECT_EQ(in.request.grad_sync->forward_share, 0.5);
  const BatchInput defaults =
      ParseBatchJson(R"({"sequences": [1], "grad_sync": {"collective_s": 0}})");
  ASSERT_TRUE(defaults.request.grad_sync);
  EXPECT_EQ(defaults.request.grad_sync->buckets, 1);
  EXPECT_EQ(defaults.request.grad_sync->forward_share, 0.25);

  EXPECT_EQ(FieldOf(R"({"sequences": [1], "grad_sync": 0.3})"), "grad_sync");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "grad_sync": {}})"),
            "grad_sync.collective_s");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "grad_sync": {"collective_s": -1}})"),
            "grad_sync.collective_s");
  EXPECT_EQ(
      FieldOf(R"({"sequences": [1], "grad_sync": {"collective_s": "1"}})"),
      "grad_sync.collective_s");
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "grad_sync": {"collective_s": 1, "buckets": 0}})"),
      "grad_sync.buckets");
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "grad_sync": {"collective_s": 1, "buckets": 1.5}})"),
      "grad_sync.buckets");
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "grad_sync": {"collective_s": 1, "forward_share": 2}})"),
      "grad_sync.forward_share");
  EXPECT_EQ(
      FieldOf(
          R"({"sequences": [1], "grad_sync": {"collective_s": 1, "bucket": 2}})"),
      "grad_sync.bucket");
}

TEST(BatchJsonTest, GroupTimeSigmaIsOptionalAndStrict) {
  EXPECT_EQ(ParseBatchJson(R"({"sequences": [1]})").request.group_time_sigma,
            0);
  const BatchInput in =
      ParseBatchJson(R"({"sequences": [1], "group_time_sigma": 0.15})");
  EXPECT_EQ(in.request.group_time_sigma, 0.15);
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "group_time_sigma": -0.1})"),
            "group_time_sigma");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "group_time_sigma": 3})"),
            "group_time_sigma");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "group_time_sigma": "0.1"})"),
            "group_time_sigma");
  EXPECT_EQ(FieldOf(R"({"sequences": [1], "group_time_sigma": null})"),
            "group_time_sigma");
}

TEST(BatchJsonTest, CommunicatorsAreOptionalAndStrict) {
  EXPECT_FALSE(ParseBatchJson(R"({"sequences": [1]})").request.communicators);
  const BatchInput in = ParseBatchJson(
      R"({"cluster": {"ranks": 8, "ranks_per_node": 4}, "sequences": [1],
          "communicators": {"create_s": 0.002, "existing": [[0, 1], [7, 4, 5]]}})");
  ASSERT_TRUE(in.request.communicators);
  EXPECT_EQ(in.request.communicators->create_s, 0.002);
  EXPECT_EQ(in.request.communicators->existing,
            (std::vector<std::vector<int>>{{0, 1}, {7, 4, 5}}));
  const std::string c8 =
      R"({"cluster": {"ranks": 8, "ranks_per_node": 4}, "sequences": [1], )";
  EXPECT_EQ(FieldOf(c8 + R"("communicators": 1})"), "communicators");
  EXPECT_EQ(FieldOf(c8 + R"("communicators": {}})"), "communicators.create_s");
  EXPECT_EQ(FieldOf(c8 + R"("communicators": {"create_s": -1}})"),
            "communicators.create_s");
  EXPECT_EQ(
      FieldOf(c8 +
              R"("communicators": {"create_s": 0, "existing": [[0, 8]]}})"),
      "communicators.existing[0][1]");
  EXPECT_EQ(
      FieldOf(c8 +
              R"("communicators": {"create_s": 0, "existing": [[0, -1]]}})"),
      "communicators.existing[0][1]");
  EXPECT_EQ(
      FieldOf(c8 + R"("communicators": {"create_s": 0, "existing": [3]}})"),
      "communicators.existing[0]");
  EXPECT_EQ(FieldOf(c8 + R"("communicators": {"create_s": 0, "exist": []}})"),
            "communicators.exist");
}

TEST(CostModelJsonTest, RoundTripsAndAcceptsWrappedForm) {
  CostModel cm;
  cm.alpha1 = 1.5e-9;
  cm.alpha2 = 2e-6;
  cm.beta1 = 0.01;
  cm.alpha3 = 5e5;
  cm.beta2 = 0.002;
  cm.bw_intra_node = 1e11;
  cm.bw_inter_node = 2e10;
  cm.mem_per_token = 3e5;
  cm.mem_static = 1e10;
  cm.mem_capacity = 6e10;
  cm.attn_overhead_tokens = 583.75;
  cm.gamma_intra = 7.2e-4;
  cm.gamma_inter = 2.16e-3;
  cm.gamma_serial = 5.6e-4;
  cm.ring_tail_steps = 1;
  const CostModel back = ParseCostModelJson(CostModelToJson(cm), CostModel{});
  EXPECT_EQ(back.alpha1, cm.alpha1);
  EXPECT_EQ(back.attn_overhead_tokens, cm.attn_overhead_tokens);
  EXPECT_EQ(back.gamma_intra, cm.gamma_intra);
  EXPECT_EQ(back.gamma_inter, cm.gamma_inter);
  EXPECT_EQ(back.ring_tail_steps, cm.ring_tail_steps);
  EXPECT_EQ(back.gamma_serial, cm.gamma_serial);
  EXPECT_EQ(back.mem_capacity, cm.mem_capacity);
  const CostModel wrapped = ParseCostModelJson(
      "{\"cost_model\": " + CostModelToJson(cm) + "}", CostModel{});
  EXPECT_EQ(wrapped.bw_inter_node, cm.bw_inter_node);
  EXPECT_THROW(ParseCostModelJson(R"({"alpha9": 1})", cm), InputError);
}

TEST(LengthsTest, PlainAndCsv) {
  EXPECT_EQ(ParseLengths("10\n20\n\n# comment\n30"),
            (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(ParseLengths("tokens,bytes,file\n5,10,a.go\n7,3,\"b,c.go\"\n"),
            (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(ParseLengths("file,tokens\nx,9\r\ny,11\r\n"),
            (std::vector<int64_t>{9, 11}));
  EXPECT_THROW(ParseLengths("10\nabc12\n"), InputError);
  EXPECT_THROW(ParseLengths("10\n-3\n"), InputError);
  EXPECT_EQ(ParseLengths("10\n0\n"),
            (std::vector<int64_t>{10}));  // empty documents skipped
  EXPECT_THROW(ParseLengths("name,bytes\nx,1\n"), InputError);
  EXPECT_THROW(ParseLengths("99999999999999999999999\n"), InputError);
  try {
    ParseLengths("1\n2\nx\n");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "line 3");
  }
}

TEST(LengthsTest, ReadsTheSharedGoSourceLengths) {
  const std::string path =
      std::string(FCP_SOURCE_DIR) + "/data/go-src-qwen3-lengths.csv";
  if (!std::ifstream(path))
    GTEST_SKIP() << "shared data not present at " << path;
  const auto lengths = ReadLengthsFile(path);
  EXPECT_EQ(lengths.size(), 7852u - 8);  // 8 empty files carry no tokens
  EXPECT_EQ(lengths[0], 137);            // Make.dist
  EXPECT_THROW(ReadLengthsFile("/nonexistent/lengths.txt"), InputError);
}

TEST(PlanJsonTest, HasTheDocumentedFields) {
  Plan plan;
  plan.strategy = "fcp";
  plan.num_ranks = 4;
  plan.est_ms = 3;
  plan.lower_bound_ms = 2;
  plan.micro_batches.push_back(
      {{{{0, 1}, {0, 2}, CommKind::kRing, 3, 100}}, 3});
  const auto j = nlohmann::json::parse(PlanToJson(plan));
  EXPECT_EQ(j["strategy"], "fcp");
  EXPECT_EQ(j["ranks"], 4);
  EXPECT_EQ(j["est_ms"], 3.0);
  EXPECT_EQ(j["lower_bound_ms"], 2.0);
  EXPECT_DOUBLE_EQ(j["gap"].get<double>(), 0.5);
  EXPECT_TRUE(j.contains("solver_ms"));
  EXPECT_EQ(j["micro_batches"][0]["groups"][0]["ranks"],
            nlohmann::json({0, 1}));
  EXPECT_EQ(j["micro_batches"][0]["groups"][0]["sequences"],
            nlohmann::json({0, 2}));
  EXPECT_EQ(j["micro_batches"][0]["groups"][0]["mem_bytes"], 100);
}

}  // namespace
}  // namespace fcp
