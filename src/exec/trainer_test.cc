#include "exec/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace fcp::exec {
namespace {

// A small corpus of repetitive C-like files of varied lengths.
std::string MakeCorpusDir() {
  namespace fs = std::filesystem;
  std::string leaf = "fcp_exec_corpus_";
  leaf += std::to_string(::getpid());
  const fs::path dir = fs::temp_directory_path() / leaf;
  fs::create_directories(dir);
  std::mt19937 rng(3);
  for (int f = 0; f < 24; ++f) {
    std::string name = "f";
    name += std::to_string(f);
    name += ".h";
    std::ofstream out(dir / name);
    const int lines = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < lines; ++i)
      out << "int f" << (i % 3) << "(int x) { return x + " << (i % 2)
          << "; }\n";
  }
  return dir.string();
}

TrainOptions SmallOptions() {
  TrainOptions o;
  o.model.dim = 16;
  o.model.heads = 2;
  o.model.layers = 1;
  o.model.ffn = 32;
  o.adam.lr = 1e-2f;
  o.max_len = 160;
  o.gbs = 6;
  o.steps = 14;
  o.seed = 5;
  // Small memory so that long sequences need CP groups of degree > 1.
  o.mem_capacity_bytes = 0;
  return o;
}

std::vector<std::vector<float>> Train(const TrainOptions& base, int N,
                                      std::vector<StepReport>* reports) {
  const std::string dir = MakeCorpusDir();
  const TextCorpus corpus = ListCorpus(dir);
  std::vector<std::vector<float>> params(N);
  RunFakeWorld(N, [&](Communicator& world) {
    TrainOptions o = base;
    Trainer trainer(world, o, corpus);
    for (int s = 0; s < o.steps; ++s) {
      StepReport r = trainer.Step(s);
      if (world.rank() == 0 && reports) reports->push_back(r);
    }
    params[world.rank()] = trainer.params();
  });
  std::filesystem::remove_all(dir);
  return params;
}

TrainOptions WithMem(TrainOptions o) {
  const CostModel cm = CpuCostModel(o.model, 1.0);
  // Room for ~100 tokens of activations per rank: 160-byte files need d >= 2.
  o.mem_capacity_bytes = cm.mem_static + 100 * cm.mem_per_token;
  return o;
}

TEST(Trainer, LossDecreasesAndRanksStayInSync) {
  std::vector<StepReport> reports;
  const TrainOptions o = WithMem(SmallOptions());
  auto params = Train(o, 4, &reports);
  ASSERT_EQ(reports.size(), static_cast<size_t>(o.steps));
  for (int r = 1; r < 4; ++r) EXPECT_EQ(params[r], params[0]);
  const double first = reports[0].loss;
  double last = 0;
  for (int i = o.steps - 3; i < o.steps; ++i) last += reports[i].loss / 3;
  EXPECT_NEAR(first, std::log(256.0), 0.2);
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  bool saw_ring = false;
  for (const auto& r : reports) {
    saw_ring |= r.layout.find_first_of("23456789") != std::string::npos;
    EXPECT_GE(r.plan_hidden_s, 0.0);
  }
  EXPECT_TRUE(saw_ring);
  EXPECT_GT(reports.back().cache.hits, 0);  // recurring groups reused
}

TEST(Trainer, AsyncPlanningDoesNotChangeTheNumbers) {
  TrainOptions o = WithMem(SmallOptions());
  o.steps = 3;
  auto a = Train(o, 3, nullptr);
  o.async_planning = false;
  auto b = Train(o, 3, nullptr);
  EXPECT_EQ(a[0], b[0]);
}

// --learn: every rank ends with the same learnt coefficients (rank 0 learns
// and shares them), different from the starting ones once a step has run;
// the group count learnt from grows; the numerics do not change beyond
// rounding (a plan changes the schedule, not the gradients).
TEST(Trainer, LearningSharesTheCoefficientsAndKeepsTheNumbers) {
  TrainOptions o = WithMem(SmallOptions());
  o.steps = 4;
  const std::string dir = MakeCorpusDir();
  const TextCorpus corpus = ListCorpus(dir);
  constexpr int kRanks = 3;
  std::vector<CostModel> start(kRanks), learnt(kRanks);
  std::vector<std::vector<StepReport>> reports(kRanks);
  RunFakeWorld(kRanks, [&](Communicator& world) {
    TrainOptions mine = o;
    mine.learn = true;
    Trainer trainer(world, mine, corpus);
    start[world.rank()] = trainer.cost();
    for (int s = 0; s < mine.steps; ++s)
      reports[world.rank()].push_back(trainer.Step(s));
    learnt[world.rank()] = trainer.cost();
  });
  std::filesystem::remove_all(dir);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(learnt[r].alpha1, learnt[0].alpha1) << r;
    EXPECT_EQ(learnt[r].alpha2, learnt[0].alpha2) << r;
    EXPECT_EQ(learnt[r].mem_per_token, start[r].mem_per_token) << r;
  }
  EXPECT_NE(learnt[0].alpha2, start[0].alpha2);
  int previous = 0;
  for (const StepReport& r : reports[0]) {
    EXPECT_GE(r.group_error_rms, 0.0);
    EXPECT_GT(r.learnt_groups, previous);
    previous = r.learnt_groups;
  }
  // Learnt coefficients depend on measured times, so the plans may differ
  // from an unlearnt run's; the losses then differ only by summation order.
  std::vector<StepReport> plain;
  Train(o, kRanks, &plain);
  ASSERT_EQ(plain.size(), reports[0].size());
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_NEAR(reports[0][i].loss, plain[i].loss, 1e-4) << i;
}

TEST(Trainer, UnknownStrategyIsAnInputError) {
  TrainOptions o = SmallOptions();
  o.strategy = "no-such-strategy";
  const std::string dir = MakeCorpusDir();
  const TextCorpus corpus = ListCorpus(dir);
  std::filesystem::remove_all(dir);
  RunFakeWorld(2, [&](Communicator& world) {
    try {
      Trainer t(world, o, corpus);
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "strategy");
    }
  });
}

TEST(Trainer, CorpusErrorsNameTheField) {
  try {
    ListCorpus("/nonexistent/dir");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "data_dir");
  }
}

// Each configuration the issue found ending in MPI_Abort is a pre-flight
// error naming the flag's field, on any rank, without communication.
TEST(Trainer, PreflightNamesTheFieldOfEachBadConfiguration) {
  const std::string dir = MakeCorpusDir();
  const TextCorpus corpus = ListCorpus(dir);
  std::filesystem::remove_all(dir);
  auto field_of = [&](TrainOptions o, int ranks) -> std::string {
    const auto e = PreflightCheck(o, corpus, ranks);
    return e ? e->substr(0, e->find(':')) : "";
  };
  TrainOptions ok = WithMem(SmallOptions());
  EXPECT_EQ(field_of(ok, 4), "");
  TrainOptions o = ok;
  o.model.dim = -8;
  EXPECT_EQ(field_of(o, 4), "model.dim");
  o = ok;
  o.mem_capacity_bytes = 0.01 * (1 << 20);
  EXPECT_EQ(field_of(o, 4), "mem_mb");
  o = ok;
  o.strategy = "optimal";
  o.gbs = 16;
  EXPECT_EQ(field_of(o, 4), "gbs");
  o = ok;
  o.strategy = "megatron";
  o.cp_degree = 3;
  EXPECT_EQ(field_of(o, 4), "cp_degree");
  // The longest sequence cannot fit on the ranks there are.
  o = ok;
  const CostModel cm = CpuCostModel(o.model, o.mem_capacity_bytes);
  o.mem_capacity_bytes = cm.mem_static + cm.mem_per_token * 2;  // 2 tokens/rank
  EXPECT_EQ(field_of(o, 4), "mem_mb");
}

TEST(Trainer, LengthsCorpusTakesTheLengthsAndRealBytes) {
  const std::string dir = MakeCorpusDir();
  const TextCorpus text = ListCorpus(dir);
  int64_t longest = 0;
  for (int64_t s : text.sizes_bytes) longest = std::max(longest, s);
  const std::vector<int64_t> want = {5, 17, longest + 1000, 3};
  const TextCorpus c = LengthsCorpus(want, text);
  ASSERT_EQ(c.sizes_bytes.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(c.sizes_bytes[i], std::min(want[i], longest));
    EXPECT_GE(std::filesystem::file_size(c.paths[i]),
              static_cast<uintmax_t>(c.sizes_bytes[i]));
  }
  const GlobalBatch b = LoadBatch(c, {0, 1, 2, 3}, 1 << 20);
  EXPECT_EQ(b.sequences[2].size(), static_cast<size_t>(longest));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fcp::exec
