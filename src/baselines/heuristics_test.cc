// The reference heuristics (heuristics.h): valid plans, and fcp never behind
// any of them in its own model (issue 32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "fcp/datasets.h"
#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "testing/random_batch.h"
#include "testing/sample_size.h"

namespace fcp {
namespace {

const char* const kHeuristics[] = {"ref-share", "ref-bisect", "ref-grow"};

// The score fcp ranks by: the step estimate with a gradient sync, else the
// plan estimate.
double ScoreMs(const PlanRequest& req, const Plan& plan) {
  return req.grad_sync
             ? StepMs(req.cluster.num_ranks, plan.micro_batches, *req.grad_sync)
             : plan.est_ms;
}

// `max_sequences` on up to `max_ranks` ranks, which need not fit one
// micro-batch; half of them ranked by the step estimate.
PlanRequest RandomCase(std::mt19937_64& rng, int i, int max_sequences = 24,
                       int max_ranks = 16) {
  testing::RandomInstanceOptions opt;
  opt.max_sequences = max_sequences;
  opt.max_ranks = max_ranks;
  opt.one_micro_batch_feasible = false;
  PlanRequest req = testing::RandomRequest(rng, opt);
  if (i % 2 == 1) {
    req.grad_sync = GradientSync{.collective_s = 0.05 * (1 + i % 5),
                                 .buckets = 1 + i % 4,
                                 .forward_share = 0.25};
  }
  return req;
}

// fcp against every reference heuristic in its own model on random
// instances.
struct Comparison {
  int compared = 0, strictly_better = 0, behind = 0;
  double worst = 1;  // fcp's score over the heuristic's, where behind
};
Comparison CompareOnRandomCases(uint64_t seed, int instances, int max_sequences,
                                int max_ranks) {
  std::mt19937_64 rng(seed);
  Comparison out;
  for (int i = 0; i < instances; ++i) {
    const PlanRequest req = RandomCase(rng, i, max_sequences, max_ranks);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    if (fcp.status != PlanStatus::kOk) continue;
    const double fcp_ms = ScoreMs(req, fcp);
    for (const char* name : kHeuristics) {
      const Plan ref = MakePlan(req, {.strategy = name});
      EXPECT_EQ(ref.status, PlanStatus::kOk) << name << " instance " << i;
      if (ref.status != PlanStatus::kOk) continue;
      const double ref_ms = ScoreMs(req, ref);
      ++out.compared;
      out.strictly_better += fcp_ms < ref_ms * (1 - 1e-9);
      if (fcp_ms > ref_ms * (1 + 1e-9)) {
        ++out.behind;
        out.worst = std::max(out.worst, fcp_ms / ref_ms);
        std::printf("  behind %s on instance %d: %.4fx (N=%d, %zu sequences)\n",
                    name, i, fcp_ms / ref_ms, req.cluster.num_ranks,
                    req.sequences.size());
      }
    }
  }
  std::printf(
      "fcp vs reference heuristics: better in %d, behind in %d of %d "
      "comparisons (worst %.4fx)\n",
      out.strictly_better, out.behind, out.compared, out.worst);
  return out;
}

TEST(ReferenceHeuristics, PlansValidate) {
  std::mt19937_64 rng(3201);
  for (int i = 0; i < 300; ++i) {
    const PlanRequest req = RandomCase(rng, i);
    for (const char* name : kHeuristics) {
      const Plan plan = MakePlan(req, {.strategy = name});
      if (plan.status != PlanStatus::kOk) continue;
      EXPECT_EQ(ValidatePlan(req, plan), "") << name << " instance " << i;
    }
  }
}

// In its own model (the score it ranks candidates by) fcp against every
// reference heuristic on random small instances. Issue 32's goal is "never
// worse"; it is not met yet (docs/planner/reference-heuristics.md), so these
// guard what holds today. On 3,000 instances of up to 24 sequences on 16
// ranks fcp is behind in 3 of 6,474 comparisons, worst 0.031 % (4 before
// the static plans were polished as lanes; 5, worst 0.75 %, before the
// time-screened reshaping; 40, worst 8.2 %, before the exact deal, the packed
// all-to-all pricing and the lanes polished where the winner runs none).
// Tighten both when the search closes the gap.
TEST(ReferenceHeuristics, FcpIsRarelyBehindInItsOwnModel) {
  const Comparison c =
      CompareOnRandomCases(3202, testing::SampleSize(3000), 24, 16);
  EXPECT_GT(c.compared, 2 * testing::SampleSize(3000));
  EXPECT_LE(c.behind, c.compared / 1000);
  EXPECT_LE(c.worst, 1.001);
}

// Wider instances, up to 48 sequences on 32 ranks of 1 to 32 per node, where
// topology and lanes of several groups matter more: on 1,000 of them fcp is
// behind in 3 of 2,457 comparisons, worst 0.05 % (5 before rises clear of
// the makespan stopped counting against a polishing change and reshaped
// lanes were polished again, 8 before memory-tight micro-batches were packed
// by size where LPT by work leaves a sequence no room, 9 before the runner-up
// lanes were polished; 10, worst 0.15 %, before lanes of several
// micro-batches were dealt below the makespan; 16, worst 7.6 %, before the
// all-to-all lane grouping, the time-screened reshaping, the nearer probes of
// the dual approximation and the rank moves out of a straddling group).
TEST(ReferenceHeuristics, FcpIsRarelyBehindOnWiderInstances) {
  const Comparison c =
      CompareOnRandomCases(3203, testing::SampleSize(1000), 48, 32);
  EXPECT_GT(c.compared, 2 * testing::SampleSize(1000));
  EXPECT_LE(c.behind, c.compared / 200);
  EXPECT_LE(c.worst, 1.002);
}

// A 32-layer model of `q_heads` query and `kv_heads` key/value heads of 128.
ModelShape RandomShape(int q_heads, int kv_heads) {
  return {.name = "random",
          .layers = 32,
          .hidden = q_heads * 128,
          .q_heads = q_heads,
          .kv_heads = kv_heads,
          .head_dim = 128};
}

// `lengths_and_eta` appended to `req`'s sequences.
void AddSequences(
    PlanRequest& req,
    std::initializer_list<std::pair<int64_t, double>> lengths_and_eta) {
  for (const auto& [length, eta] : lengths_and_eta)
    req.sequences.push_back({.length_tokens = length, .eta = eta});
}

// fcp's score (its own model) at most `heuristic`'s on `req`.
void ExpectFcpNotBehind(const PlanRequest& req, const char* heuristic) {
  const Plan fcp = MakePlan(req, {.strategy = "fcp"});
  const Plan ref = MakePlan(req, {.strategy = heuristic});
  ASSERT_EQ(fcp.status, PlanStatus::kOk);
  ASSERT_EQ(ref.status, PlanStatus::kOk);
  EXPECT_LE(ScoreMs(req, fcp), ScoreMs(req, ref) * (1 + 1e-9)) << heuristic;
}

// 26 ranks on nodes of 16 and 10: the groupings fcp searched (by the
// allocator's placement-blind makespan) put the longest sequence with three
// short ones on 13 ranks, and two long ones on 5 each, all the 10-rank
// node holds; each long sequence alone with the short ones together places
// 10, 6 | 6, 3, 1 inside the nodes, 3.4 % faster (issue 32: ref-grow was
// ahead by that much on a wider random sample, seed 3205).
TEST(ReferenceHeuristics, HeavySequencesAloneWhereTheNodesAreUneven) {
  PlanRequest req;
  req.cluster = {.num_ranks = 26, .ranks_per_node = 16};
  req.cost.alpha1 = 8.85e-9;
  req.cost.alpha2 = 4.14e-4;
  req.cost.beta1 = 8.83e-4;
  req.cost.alpha3 = 8.67e6;
  req.cost.beta2 = 4.89e-6;
  req.cost.bw_intra_node = 1.376e11;
  req.cost.bw_inter_node = 9.91e9;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.cost.mem_per_token = 1.234e6;
  req.model = RandomShape(12, 4);
  AddSequences(req, {{960, 0.707},
                     {136, 0.228},
                     {53626, 0},
                     {64259, 0.793},
                     {168, 0.271},
                     {99, 0},
                     {113, 0},
                     {95, 0},
                     {22656, 0},
                     {433, 0.568},
                     {2297, 0},
                     {822, 0.679},
                     {1231, 0},
                     {51979, 0},
                     {4295, 0}});
  req.grad_sync =
      GradientSync{.collective_s = 0.1, .buckets = 2, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-grow");
}

// 30 ranks on nodes of 2: lanes of 12 all-to-all ranks (the longest
// sequence and three short ones), 4, 4, 4, 3 and 3 run 4.45 s; the lanes'
// dual approximation, filling each group best fit, gave up on a 499-token
// sequence after three 4-rank lanes a few percent too full while the
// 12-rank one was a fifth empty, and met no target below 4.85 s (issue 32:
// ref-bisect 6.3 % ahead on a wider random sample, seed 3203).
TEST(ReferenceHeuristics, ShortSequencesFillTheRoomiestLane) {
  PlanRequest req;
  req.cluster = {.num_ranks = 30, .ranks_per_node = 2};
  req.cost.alpha1 = 4.965e-9;
  req.cost.alpha2 = 7.468e-5;
  req.cost.beta1 = 6.368e-3;
  req.cost.alpha3 = 3.515e6;
  req.cost.beta2 = 1.750e-4;
  req.cost.bw_intra_node = 1.572e11;
  req.cost.bw_inter_node = 1.832e10;
  req.cost.mem_per_token = 6.484e6;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(48, 8);
  AddSequences(
      req,
      {{4122, 0.595}, {199, 0.504}, {3924, 0},    {35814, 0.385}, {618, 0.979},
       {105, 0},      {499, 0.632}, {468, 0},     {84, 0},        {4830, 0},
       {1159, 0},     {17542, 0},   {2586, 0},    {176, 0.018},   {929, 0.840},
       {356, 0.880},  {74, 0},      {91, 0.833},  {1033, 0},      {2801, 0},
       {23796, 0},    {1223, 0},    {159, 0},     {6850, 0},      {1337, 0},
       {5912, 0},     {17844, 0},   {106, 0},     {22673, 0},     {25591, 0},
       {1225, 0},     {103, 0},     {721, 0.194}, {451, 0}});
  req.grad_sync =
      GradientSync{.collective_s = 0.25, .buckets = 2, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-bisect");
}

// 27 ranks on nodes of 6: the three longest sequences (37k, 37k and 28k
// tokens) one after another on 16 all-to-all ranks, the others on 4, run
// 7.80 s. The lanes' dual approximation priced an all-to-all group of 16
// ranks at the inter-node link alone (8.55 s for the three, above the
// 8.41 s to beat); placed from a node boundary (6, 6 and 4 ranks per node)
// part of each rank's traffic stays on its node, and the lanes priced so
// find it (issue 32: ref-bisect 8.3 % ahead on a wider random sample, seed
// 3203).
TEST(ReferenceHeuristics, AllToAllLanesPricedPackedAcrossNodes) {
  PlanRequest req;
  req.cluster = {.num_ranks = 27, .ranks_per_node = 6};
  req.cost.alpha1 = 1.739e-8;
  req.cost.alpha2 = 1.267e-4;
  req.cost.beta1 = 7.387e-3;
  req.cost.alpha3 = 7.539e6;
  req.cost.beta2 = 4.857e-5;
  req.cost.bw_intra_node = 3.725e11;
  req.cost.bw_inter_node = 5.404e10;
  req.cost.mem_per_token = 1.708e7;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(32, 8);
  AddSequences(req, {{4430, 0.974},
                     {6148, 0.728},
                     {91, 0},
                     {28100, 0},
                     {1171, 0.794},
                     {37340, 0},
                     {206, 0},
                     {535, 0},
                     {6034, 0.703},
                     {5424, 0},
                     {2699, 0},
                     {2427, 0},
                     {37785, 0},
                     {5938, 0},
                     {8171, 0.707},
                     {1297, 0},
                     {5838, 0}});
  req.grad_sync =
      GradientSync{.collective_s = 0.2, .buckets = 4, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-bisect");
}

// 21 ranks on nodes of 16, ranked by step time: lanes of 4 ranks, one
// holding 31k- and 29k-token sequences back to back and another 25k, 22k
// and 14k, run 9.74 s. The lanes' dual approximation opened each long
// sequence at the fewest (even) ranks that meet the target, 2 each for the
// 25k and 22k ones, too narrow to hold both, and found no grouping within
// the 21 ranks, so fcp kept two micro-batches at 9.99 s (issue 32: ref-bisect
// 2.5 % ahead on a wider random sample, seed 3206).
TEST(ReferenceHeuristics, LongSequencesShareWiderLanes) {
  PlanRequest req;
  req.cluster = {.num_ranks = 21, .ranks_per_node = 16};
  req.cost.alpha1 = 2.453e-9;
  req.cost.alpha2 = 5.647e-4;
  req.cost.beta1 = 1.817e-5;
  req.cost.alpha3 = 2.999e6;
  req.cost.beta2 = 1.813e-4;
  req.cost.bw_intra_node = 3.346e11;
  req.cost.bw_inter_node = 3.693e10;
  req.cost.mem_per_token = 3.384e6;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(8, 2);
  AddSequences(req,
               {{12231, 0.432}, {466, 0},       {29469, 0},    {316, 0.329},
                {25179, 0},     {72, 0},        {271, 0.260},  {303, 0},
                {21933, 0},     {13829, 0.236}, {173, 0.930},  {50418, 0.065},
                {856, 0},       {50362, 0},     {1313, 0.139}, {4660, 0},
                {47176, 0},     {2144, 0},      {181, 0},      {2962, 0},
                {1053, 0.062},  {1831, 0},      {773, 0},      {126, 0},
                {2743, 0.387},  {730, 0},       {608, 0},      {343, 0},
                {76, 0},        {300, 0.696},   {31281, 0},    {530, 0},
                {107, 0},       {2833, 0.914},  {3401, 0},     {101, 0.013}});
  req.grad_sync =
      GradientSync{.collective_s = 0.15, .buckets = 2, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-bisect");
}

// 18 ranks on nodes of 8, ranked by step time: lanes of 8, 8, 1 and 1
// ranks won among the lane plans, and polished and reshaped they stayed at
// a step of 8.35 s, 0.12 % behind ref-share's lanes of 7, 5, 3 and 3; the
// best lane plan on other rank sets, polished and reshaped too, ends at 8,
// 6, 3 and 1 ranks and 8.15 s (issue 32: a wider random sample, seed 3204).
TEST(ReferenceHeuristics, RunnerUpLanesPolishedToo) {
  PlanRequest req;
  req.cluster = {.num_ranks = 18, .ranks_per_node = 8};
  req.cost.alpha1 = 5.1089491750745e-9;
  req.cost.alpha2 = 1.0306322162004e-4;
  req.cost.beta1 = 1.4768512566158e-5;
  req.cost.alpha3 = 5.6463600020136e6;
  req.cost.beta2 = 1.1573698876553e-4;
  req.cost.bw_intra_node = 1.5005879542453e11;
  req.cost.bw_inter_node = 5.8826636101315e10;
  req.cost.mem_per_token = 6.9134741249583e5;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(2, 2);
  AddSequences(req, {{88, 0},
                     {17152, 0},
                     {202, 0},
                     {6456, 0},
                     {52979, 0.098797053907052},
                     {324, 0},
                     {2640, 0},
                     {103, 0},
                     {75, 0},
                     {1202, 0},
                     {162, 0},
                     {5544, 0},
                     {10663, 0},
                     {4504, 0},
                     {12244, 0},
                     {8199, 0},
                     {107, 0.36237077748879},
                     {890, 0.23124260555490},
                     {42383, 0.95284312355921},
                     {495, 0},
                     {1116, 0},
                     {2794, 0.52400104732709},
                     {65482, 0.73551781656116},
                     {54528, 0.94615745174387},
                     {699, 0.28357617850458},
                     {275, 0},
                     {209, 0},
                     {9412, 0},
                     {25452, 0},
                     {13518, 0},
                     {713, 0}});
  req.grad_sync =
      GradientSync{.collective_s = 0.2, .buckets = 4, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-share");
}

// 512 real Go-source lengths on Ascend 910C (nodes of 16), where lanes run
// several micro-batches: fcp dealt lanes below the makespan one group each,
// so memory-bound lanes were left to the polishing, and stopped 0.29 % (64
// ranks) and 0.31 % (128 ranks) above ref-share's and ref-grow's deals on
// the same degrees (issue 32, `fcp eval search --lengths`). Within the
// lanes' bisection step (0.02 %) of every heuristic now.
TEST(ReferenceHeuristics, LanesOfSeveralMicroBatchesDealtBelowTheMakespan) {
  const std::vector<int64_t> lengths = ReadLengthsFile(
      std::string(FCP_SOURCE_DIR) + "/data/go-src-qwen3-lengths.csv");
  const ClusterPreset& cluster = *FindClusterPreset("ascend910c-4x16");
  const ModelPreset& model = *FindModelPreset("qwen3-8b");
  for (int ranks : {64, 128}) {
    PlanRequest req;
    req.cluster = {ranks, cluster.ranks_per_node};
    req.cost = DeriveCostModel(model, cluster);
    req.model = model.shape;
    req.sequences = SampleFromLengths(lengths, 512, /*seed=*/1);
    const Plan fcp = MakePlan(req, {.strategy = "fcp"});
    ASSERT_EQ(fcp.status, PlanStatus::kOk);
    EXPECT_GT(fcp.micro_batches.size(), 1u) << ranks << " ranks";
    for (const char* heuristic : kHeuristics) {
      const Plan ref = MakePlan(req, {.strategy = heuristic});
      ASSERT_EQ(ref.status, PlanStatus::kOk);
      EXPECT_LE(fcp.est_ms, ref.est_ms * 1.0002)
          << heuristic << ", " << ranks << " ranks";
    }
  }
}

// 22 ranks on nodes of 3, ranked by step time: lanes of 14, 7 and 1 ranks,
// where moving a 177-token sequence off the 14-rank lane onto the single
// rank saves 12 ms on the makespan for 69 ms on that rank, which still ends
// 23 % below the makespan: polishing refused the move by its rule for
// rises, 0.02 % behind ref-bisect (issue 32: the wider sample, seed 3203).
// A rise that ends clear of the makespan (kPolishRiseHeadroom) is not
// counted now.
TEST(ReferenceHeuristics, RisesClearOfTheMakespanDoNotCount) {
  PlanRequest req;
  req.cluster = {.num_ranks = 22, .ranks_per_node = 3};
  req.cost.alpha1 = 2.8095995208406e-09;
  req.cost.alpha2 = 0.0003909869038646;
  req.cost.beta1 = 0.015530332107992;
  req.cost.alpha3 = 1686865.9647622;
  req.cost.beta2 = 2.7935986412871e-05;
  req.cost.bw_intra_node = 336607703188.61;
  req.cost.bw_inter_node = 39863709122.514;
  req.cost.mem_per_token = 18548913.505791;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(3, 1);
  AddSequences(req, {{279, 0.47229379651301},
                     {212, 0.59090126754201},
                     {333, 0},
                     {15440, 0.21907155696125},
                     {300, 0.64667733538814},
                     {2695, 0.89896190500183},
                     {734, 0},
                     {4066, 0},
                     {1503, 0},
                     {226, 0.96174006944995},
                     {4406, 0.092510892923496},
                     {243, 0.25362176172116},
                     {5459, 0},
                     {2986, 0},
                     {18610, 0.61528031845404},
                     {31199, 0.51771127578027},
                     {114, 0},
                     {910, 0},
                     {1393, 0.44934656780713},
                     {177, 0},
                     {1300, 0.71395482689919}});
  req.grad_sync =
      GradientSync{.collective_s = 0.1, .buckets = 2, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-bisect");
}

// 7 single-rank nodes, ranked by step time: fcp's lanes of 2, 2, 1, 1 and 1
// ranks, reshaped on their rank sets, kept a 131-token sequence on the
// slowest lane where a 114-token one of a single rank fits as well: the
// polishing ran before the reshaping's deal, 0.005 % behind ref-bisect
// (issue 32: the wider sample, seed 3203). Reshaped lanes are polished
// again.
TEST(ReferenceHeuristics, ReshapedLanesPolishedAgain) {
  PlanRequest req;
  req.cluster = {.num_ranks = 7, .ranks_per_node = 1};
  req.cost.alpha1 = 1.6272880322578e-08;
  req.cost.alpha2 = 7.0748005269561e-05;
  req.cost.beta1 = 7.1860823419342e-05;
  req.cost.alpha3 = 8833257.6517226;
  req.cost.beta2 = 0.004319995534465;
  req.cost.bw_intra_node = 318130726719.27;
  req.cost.bw_inter_node = 43253157241.824;
  req.cost.mem_per_token = 2255802.4116072;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(8, 4);
  AddSequences(req, {{11643, 0},
                     {10499, 0},
                     {2253, 0},
                     {5533, 0},
                     {17217, 0},
                     {673, 0},
                     {11682, 0},
                     {377, 0},
                     {4934, 0},
                     {299, 0.35151618154238},
                     {207, 0},
                     {456, 0},
                     {110, 0},
                     {143, 0},
                     {16119, 0.53849632299407},
                     {4511, 0.56144926020472},
                     {107, 0},
                     {526, 0},
                     {4769, 0},
                     {5936, 0},
                     {3467, 0.37333936462367},
                     {10172, 0.9943667541041},
                     {12189, 0},
                     {774, 0.41327449842725},
                     {95, 0},
                     {1934, 0},
                     {17386, 0},
                     {33569, 0},
                     {3292, 0},
                     {23609, 0},
                     {280, 0},
                     {73, 0.87476935638174},
                     {2660, 0},
                     {10658, 0},
                     {120, 0},
                     {114, 0},
                     {131, 0},
                     {1264, 0.30472016315566},
                     {22150, 0},
                     {251, 0.29962384484274},
                     {2448, 0},
                     {838, 0},
                     {13482, 0},
                     {1468, 0}});
  req.grad_sync =
      GradientSync{.collective_s = 0.15, .buckets = 4, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-bisect");
}

// 21 sequences on 16 single-rank nodes: fcp's plan (a 12- and a 4-rank lane)
// trailed ref-bisect's two 8-rank lanes over two micro-batches by 0.004 %.
// The balanced static plan of 8 ranks, dealt by work, is no faster; its
// lanes polished are (issue 32: the smaller random sample, seed 3202).
// fcp polishes the best balanced static plans of 2 to 16 lanes as well.
TEST(ReferenceHeuristics, StaticPlansPolishedAsLanes) {
  PlanRequest req;
  req.cluster = {.num_ranks = 16, .ranks_per_node = 1};
  req.cost.alpha1 = 1.5924396688924e-09;
  req.cost.alpha2 = 0.00019259512630566;
  req.cost.beta1 = 3.5813797501613e-05;
  req.cost.alpha3 = 157405.48213905;
  req.cost.beta2 = 2.4310140116081e-05;
  req.cost.bw_intra_node = 229119461295.47;
  req.cost.bw_inter_node = 28243686074.945;
  req.cost.mem_per_token = 5246253.9080907;
  req.cost.mem_static = 20e9;
  req.cost.mem_capacity = 64e9;
  req.model = RandomShape(6, 2);
  AddSequences(req, {{52847, 0},
                     {233, 0.65873645036244},
                     {1462, 0},
                     {6618, 0},
                     {197, 0.51916600693972},
                     {4341, 0},
                     {153, 0},
                     {6224, 0},
                     {5516, 0},
                     {147, 0},
                     {2124, 0},
                     {76, 0},
                     {69, 0},
                     {188, 0.83945571761987},
                     {78, 0},
                     {116, 0},
                     {1003, 0.081361870991064},
                     {27412, 0.35035301880878},
                     {171, 0},
                     {21401, 0.71614290870904},
                     {101, 0}});
  req.grad_sync =
      GradientSync{.collective_s = 0.05, .buckets = 2, .forward_share = 0.25};
  ExpectFcpNotBehind(req, "ref-bisect");
}

// A ring-only runtime against the static all-to-all plan (issue 32, goal 3):
// 64 msrvtt samples of 2-6 k tokens (the study's first measured batch of
// Ascend, 64 ranks, gbs 64, its profiled coefficients and the cp-8
// communicators fcp-ring's run holds). The static ring plan on 8 ranks wins
// dealt by work, and deepspeed's Ulysses on 8 ranks beats it; 16 lanes of 4
// ranks dealt by work end 9 % apart, polished and dealt below their
// makespan they beat both.
TEST(FcpRing, BeatsTheStaticAllToAllPlanWithBalancedLanes) {
  const PlanRequest req =
      ReadBatchJson(std::string(FCP_SOURCE_DIR) +
                    "/src/baselines/testdata/msrvtt-64-ascend-ring.json")
          .request;
  const Plan ring = MakePlan(req, {.strategy = "fcp-ring"});
  const Plan ulysses = MakePlan(req, {.strategy = "deepspeed"});
  ASSERT_EQ(ring.status, PlanStatus::kOk);
  ASSERT_EQ(ulysses.status, PlanStatus::kOk);
  for (const MicroBatchPlan& mb : ring.micro_batches)
    for (const GroupPlan& g : mb.groups) EXPECT_EQ(g.comm, CommKind::kRing);
  EXPECT_LT(ScoreMs(req, ring), ScoreMs(req, ulysses));
}

}  // namespace
}  // namespace fcp
