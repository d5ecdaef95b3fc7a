// Tests of the plot module: timelines against the plan / simulation they come
// from, the Chrome trace's structure, neighbour-distinct colours against a
// brute-force pairwise check, label fitting, and the shell-free gnuplot
// runner attacked with hostile paths, planted symlinks and a missing gnuplot.
#include "fcp/plot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "fcp/io.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/simulator.h"
#include "testing/temp_dir.h"

namespace fcp::plot {
namespace {

namespace fs = std::filesystem;

GroupPlan Group(std::vector<int> ranks, std::vector<int> seqs, double ms) {
  GroupPlan g;
  g.ranks = std::move(ranks);
  g.sequences = std::move(seqs);
  g.est_ms = ms;
  return g;
}

// 8 ranks (4 per node), two micro-batches, a non-contiguous group and an idle
// one.
Plan SmallPlan() {
  Plan plan;
  plan.strategy = "test";
  plan.num_ranks = 8;
  plan.micro_batches.push_back(
      {{Group({0, 1, 2, 3, 4, 5}, {0, 1}, 30), Group({6, 7}, {2}, 12)}, 30});
  plan.micro_batches.push_back(
      {{Group({0, 2, 3}, {3}, 10), Group({1}, {}, 0)}, 10});
  return plan;
}

std::vector<Sequence> SmallBatch() {
  return {{1000, 0}, {2000, 0}, {300, 0}, {4000, 1}};
}

using fcp::testing::TempDir;

// Restores an environment variable on scope exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool IsPng(const fs::path& p) {
  return ReadAll(p).rfind("\x89PNG\r\n\x1a\n", 0) == 0;
}

TEST(PlanTimeline, GroupsLastTheirEstimateAndMicroBatchesFollowEachOther) {
  const Timeline t = PlanTimeline(SmallPlan(), SmallBatch(), 4);
  ASSERT_EQ(t.slices.size(), 3u);  // the idle group is left out
  EXPECT_EQ(t.source, "planner estimate");
  EXPECT_DOUBLE_EQ(t.slices[0].start_ms, 0);
  EXPECT_DOUBLE_EQ(t.slices[0].end_ms, 30);
  EXPECT_DOUBLE_EQ(t.slices[1].end_ms, 12);
  EXPECT_DOUBLE_EQ(t.slices[2].start_ms, 30);  // ranks 0, 2, 3 free at 30
  EXPECT_DOUBLE_EQ(t.slices[2].end_ms, 40);
  EXPECT_DOUBLE_EQ(t.end_ms, 40);
  EXPECT_EQ(t.slices[0].tokens, 3000);
  EXPECT_EQ(t.slices[2].num_sequences, 1);
  Plan bad = SmallPlan();
  bad.micro_batches[0].groups[0].sequences = {9};
  EXPECT_THROW(PlanTimeline(bad, SmallBatch(), 4), InputError);
  Plan infeasible;
  infeasible.status = PlanStatus::kInfeasible;
  EXPECT_THROW(PlanTimeline(infeasible, SmallBatch(), 4), InputError);
}

TEST(PlanTimeline, AGroupStartsWhenItsRanksAreFreeNotAtTheMicroBatchBoundary) {
  // Ranks 2 and 3 finish micro-batch 0 at 12 ms and start micro-batch 1 then;
  // the plan ends when ranks 0 and 1 do, at 30 ms (not 30 + 10).
  Plan plan;
  plan.strategy = "test";
  plan.num_ranks = 4;
  plan.micro_batches.push_back(
      {{Group({0, 1}, {0}, 30), Group({2, 3}, {1}, 12)}, 30});
  plan.micro_batches.push_back({{Group({2, 3}, {2}, 10)}, 10});
  const Timeline t = PlanTimeline(plan, SmallBatch(), 4);
  ASSERT_EQ(t.slices.size(), 3u);
  EXPECT_DOUBLE_EQ(t.slices[2].start_ms, 12);
  EXPECT_DOUBLE_EQ(t.slices[2].end_ms, 22);
  EXPECT_DOUBLE_EQ(t.end_ms, 30);
  EXPECT_DOUBLE_EQ(t.end_ms,
                   ListScheduleMs(plan.num_ranks, plan.micro_batches));
  plan.micro_batches[1].groups[0].ranks = {2, 4};
  EXPECT_THROW(PlanTimeline(plan, SmallBatch(), 4), InputError);
}

TEST(SimulatedTimeline, MatchesTheSimulatorsScheduleOnEveryRank) {
  const ModelPreset* model = FindModelPreset("qwen3-8b");
  const ClusterPreset* cluster = FindClusterPreset("ascend910c-4x16");
  ASSERT_TRUE(model && cluster);
  const sim::HardwareModel hw = sim::MakeHardwareModel(*model, *cluster, 8);
  const Plan plan = SmallPlan();
  const auto batch = SmallBatch();
  const sim::SimResult res = sim::SimulatePlan(hw, plan, batch);
  ASSERT_FALSE(res.oom);
  const Timeline t = SimulatedTimeline(plan, batch, res, 4);
  ASSERT_EQ(t.slices.size(), 3u);
  // Per rank: slices do not overlap, and the last one ends at compute_s.
  std::map<int, std::vector<std::pair<double, double>>> by_rank;
  for (const auto& s : t.slices)
    for (int r : s.ranks) by_rank[r].push_back({s.start_ms, s.end_ms});
  double last = 0;
  for (auto& [r, spans] : by_rank) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first);
    last = std::max(last, spans.back().second);
  }
  EXPECT_NEAR(last, 1e3 * res.compute_s, 1e-9 * last);
  EXPECT_NEAR(t.end_ms, 1e3 * res.compute_s, 1e-9 * last);
  // Group 0 of mb 1 shares ranks with both groups of mb 0: it starts when the
  // later of them (group 0) ends.
  EXPECT_NEAR(t.slices[2].start_ms,
              t.slices[0].end_ms + 1e3 * hw.group_create_s, 1e-9 * last);
}

TEST(Trace, OneTrackPerRankOneSlicePerGroupAndRankNodesAsProcesses) {
  const Timeline t = PlanTimeline(SmallPlan(), SmallBatch(), 4);
  const auto j = nlohmann::json::parse(TraceJson({&t, 1}));
  std::map<int, std::string> process_names;
  std::map<int, int> thread_pid;
  std::map<int, std::vector<std::pair<double, double>>> events_by_tid;
  int complete = 0;
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name")
      process_names[e.at("pid")] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "thread_name")
      thread_pid[e.at("tid")] = e.at("pid");
    if (ph != "X") continue;
    ++complete;
    const int tid = e.at("tid");
    EXPECT_EQ(e.at("pid").get<int>(), tid / 4)
        << "rank " << tid << " sits on node tid/4";
    const auto ranks = e.at("args").at("ranks").get<std::vector<int>>();
    EXPECT_NE(std::find(ranks.begin(), ranks.end(), tid), ranks.end());
    EXPECT_EQ(e.at("args").at("degree").get<int>(),
              static_cast<int>(ranks.size()));
    const double ts = e.at("ts"), dur = e.at("dur");
    events_by_tid[tid].push_back({ts, ts + dur});
  }
  EXPECT_EQ(complete, 6 + 2 + 3);  // Σ degree over non-idle groups
  EXPECT_EQ(process_names.size(), 2u);
  EXPECT_EQ(process_names[1], "test: node 1");
  EXPECT_EQ(thread_pid.size(),
            8u);  // every rank has a named track, idle ones too
  // Microseconds: group 0 of mb 1 runs 30..40 ms.
  EXPECT_DOUBLE_EQ(events_by_tid[3].back().first, 30e3);
  EXPECT_DOUBLE_EQ(events_by_tid[3].back().second, 40e3);
  for (auto& [tid, spans] : events_by_tid) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first);
  }
  // Two timelines: the second one's processes come after the first one's.
  const Timeline ts[] = {t, t};
  const auto j2 = nlohmann::json::parse(TraceJson(ts));
  std::set<int> pids;
  for (const auto& e : j2.at("traceEvents"))
    pids.insert(e.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
}

TEST(Trace, WritesAtomicallyAndRejectsBadPaths) {
  TempDir dir;
  const Timeline t = PlanTimeline(SmallPlan(), SmallBatch(), 4);
  const fs::path out = dir.path() / "trace.json";
  WriteTrace(out.string(), {&t, 1});
  EXPECT_NO_THROW((void)nlohmann::json::parse(ReadAll(out)));
  EXPECT_THROW(
      WriteTrace((dir.path() / "missing" / "t.json").string(), {&t, 1}),
      InputError);
  EXPECT_THROW(WriteTrace(dir.path().string(), {&t, 1}),
               InputError);  // a directory
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), {}),
            1);  // no temp left
}

TEST(SlicesTouch, SameRankInSequenceOrNeighbouringRanksAtTheSameTime) {
  TimelineSlice a, b;
  a.ranks = {0, 1};
  a.start_ms = 0, a.end_ms = 10;
  b.ranks = {1};
  b.start_ms = 10, b.end_ms = 20;
  EXPECT_TRUE(SlicesTouch(a, b));  // rank 1, back to back
  b.ranks = {2};
  b.start_ms = 5, b.end_ms = 7;
  EXPECT_TRUE(SlicesTouch(a, b));  // ranks 1 and 2, overlapping
  b.ranks = {3};
  EXPECT_FALSE(SlicesTouch(a, b));  // rank 3 is two rows away
  b.ranks = {2};
  b.start_ms = 11, b.end_ms = 12;
  EXPECT_FALSE(SlicesTouch(a, b));  // neighbour row, later, not adjacent
}

// Random plans: every pair of touching slices (checked pairwise, not with the
// rank index AssignColours uses) gets different colours.
TEST(AssignColours, NeighboursDifferOnRandomPlansAndOnSixtyFourGroups) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 4 + static_cast<int>(rng() % 60);
    Plan plan;
    plan.strategy = "random";
    plan.num_ranks = n;
    std::vector<Sequence> batch;
    const int mbs = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mbs; ++m) {
      MicroBatchPlan mb;
      int r = 0;
      while (r < n) {
        const int d = std::min(n - r, 1 + static_cast<int>(rng() % 6));
        std::vector<int> ranks;
        for (int k = 0; k < d; ++k) ranks.push_back(r + k);
        batch.push_back({1000, 0});
        mb.groups.push_back(Group(ranks, {static_cast<int>(batch.size()) - 1},
                                  1.0 + static_cast<double>(rng() % 100)));
        r += d;
      }
      plan.micro_batches.push_back(mb);
    }
    const Timeline t = PlanTimeline(plan, batch, 8);
    const auto colours = AssignColours(t, 12);
    for (size_t i = 0; i < t.slices.size(); ++i)
      for (size_t j = i + 1; j < t.slices.size(); ++j)
        if (SlicesTouch(t.slices[i], t.slices[j]))
          EXPECT_NE(colours[i], colours[j])
              << "trial " << trial << " slices " << i << "," << j;
  }
  // 64 one-rank groups in one micro-batch: a path of 64 neighbours.
  Plan plan;
  plan.strategy = "ulysses-64";
  plan.num_ranks = 64;
  std::vector<Sequence> batch;
  MicroBatchPlan mb;
  for (int r = 0; r < 64; ++r) {
    batch.push_back({512, 0});
    mb.groups.push_back(Group({r}, {r}, 5));
  }
  plan.micro_batches.push_back(mb);
  const Timeline t = PlanTimeline(plan, batch, 16);
  const auto colours = AssignColours(t, 12);
  for (int r = 1; r < 64; ++r) EXPECT_NE(colours[r], colours[r - 1]);
}

TEST(FitLabel, NeverWiderThanItsBoxAndShorterWhenNarrow) {
  TimelineSlice s;
  s.ranks = {0, 1, 2, 3};
  s.num_sequences = 12;
  s.tokens = 123456;
  EXPECT_EQ(FitLabel(s, 400, 40), "d=4 k=12 123.5k tok");
  EXPECT_EQ(FitLabel(s, 60, 40), "d=4 k=12");
  EXPECT_EQ(FitLabel(s, 25, 40), "d=4");
  EXPECT_EQ(FitLabel(s, 13, 40), "4");
  EXPECT_EQ(FitLabel(s, 5, 40), "");
  EXPECT_EQ(FitLabel(s, 400, 6), "");  // row too low for text
  for (double w = 0; w < 300; w += 7) {
    const std::string label = FitLabel(s, w, 20);
    EXPECT_LE(label.size() * 6.0, w);
  }
}

TEST(GnuplotQuote, CannotEndTheCommand) {
  EXPECT_EQ(GnuplotQuote("a'b"), "'a''b'");
  EXPECT_EQ(GnuplotQuote("x\ny\r;z"), "'x y ;z'");
}

// The names a shell or gnuplot would act on; none may have any effect.
const char* const kHostileNames[] = {
    "x';system('touch PWNED1');'.png",
    "a\nsystem \"touch PWNED2\"\n.png",
    "$(touch PWNED3).png",
    "`touch PWNED4`.svg",
    "q\"; touch PWNED5; \".png",
};

TEST(Gantt, HostilePathsAreJustFileNames) {
  if (!GnuplotAvailable()) GTEST_SKIP() << "no gnuplot";
  TempDir dir;
  TempDir tmp;  // TMPDIR: must be empty again afterwards
  ScopedEnv env("TMPDIR", tmp.path().string());
  const Timeline t = PlanTimeline(SmallPlan(), SmallBatch(), 4);
  // Run gnuplot from inside the target directory so that a relative `touch`
  // would land there too.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  for (const char* name : kHostileNames) {
    const fs::path out = dir.path() / name;
    ASSERT_NO_THROW(WriteGantt(out.string(), {&t, 1})) << name;
    ASSERT_TRUE(fs::is_regular_file(out)) << name;
    if (out.extension() == ".png")
      EXPECT_TRUE(IsPng(out)) << name;
    else
      EXPECT_NE(ReadAll(out).find("<svg"), std::string::npos) << name;
  }
  fs::current_path(cwd);
  for (int k = 1; k <= 5; ++k) {
    const std::string marker = "PWNED" + std::to_string(k);
    EXPECT_FALSE(fs::exists(dir.path() / marker))
        << "a command ran: " << marker;
    EXPECT_FALSE(fs::exists(cwd / marker)) << "a command ran: " << marker;
    EXPECT_FALSE(fs::exists(tmp.path() / marker))
        << "a command ran: " << marker;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), {}),
            static_cast<long>(std::size(kHostileNames)));
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), {}), 0)
      << "temp files left";
}

TEST(Gantt, PlantedSymlinksAreNeitherFollowedNorReused) {
  if (!GnuplotAvailable()) GTEST_SKIP() << "no gnuplot";
  TempDir dir;
  TempDir tmp;
  ScopedEnv env("TMPDIR", tmp.path().string());
  const fs::path victim_dir = dir.path() / "victim-dir";
  fs::create_directory(victim_dir);
  // The names the old code used ($TMPDIR/fcp-gantt-<pid>-<n>), planted as
  // symlinks to the victim directory.
  for (int n = 0; n < 4; ++n)
    fs::create_directory_symlink(
        victim_dir, tmp.path() / ("fcp-gantt-" + std::to_string(::getpid()) +
                                  "-" + std::to_string(n)));
  // The destination itself is a symlink to a victim file: replaced, not
  // followed.
  const fs::path victim_file = dir.path() / "victim.txt";
  std::ofstream(victim_file) << "precious";
  const fs::path out = dir.path() / "plot.png";
  fs::create_symlink(victim_file, out);
  const Timeline t = PlanTimeline(SmallPlan(), SmallBatch(), 4);
  WriteGantt(out.string(), {&t, 1});
  EXPECT_EQ(ReadAll(victim_file), "precious");
  EXPECT_FALSE(fs::is_symlink(out));
  EXPECT_TRUE(IsPng(out));
  EXPECT_TRUE(fs::is_empty(victim_dir));
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), {}), 4)
      << "only the planted links";
}

// The legend names the fills, the node-boundary line and the label's d / k;
// an all-to-all group is drawn hatched (a pattern fill), a ring group is not.
TEST(Gantt, LegendAndHatchedAllToAllGroups) {
  if (!GnuplotAvailable()) GTEST_SKIP() << "no gnuplot";
  TempDir dir;
  auto hatches = [&](bool a2a) {
    Plan plan = SmallPlan();
    if (a2a) plan.micro_batches[0].groups[0].comm = CommKind::kAllToAll;
    const Timeline t = PlanTimeline(plan, SmallBatch(), 4);
    const fs::path out = dir.path() / (a2a ? "a2a.svg" : "ring.svg");
    WriteGantt(out.string(), {&t, 1});
    const std::string svg = ReadAll(out);
    for (const char* legend :
         {"ring group", "all-to-all group (hatched)", "node boundary",
          "d=ranks in the group, k=its sequences"})
      EXPECT_NE(svg.find(legend), std::string::npos) << legend;
    size_t n = 0;
    for (size_t at = svg.find("url(#gpPat"); at != std::string::npos;
         at = svg.find("url(#gpPat", at + 1))
      ++n;
    return n;
  };
  EXPECT_GT(hatches(true), hatches(false));
}

TEST(Gantt, BadPathsAndFailuresAreOneLineErrors) {
  TempDir dir;
  const Timeline t = PlanTimeline(SmallPlan(), SmallBatch(), 4);
  EXPECT_THROW(WriteGantt((dir.path() / "x.pdf").string(), {&t, 1}),
               InputError);
  EXPECT_THROW(WriteGantt((dir.path() / "no" / "x.png").string(), {&t, 1}),
               InputError);
  EXPECT_THROW(WriteGantt((dir.path() / "x.png").string(), {}), InputError);
  try {
    WriteGantt((dir.path() / "no\ndir" / "x.png").string(), {&t, 1});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  if (GnuplotAvailable()) {
    GnuplotJob broken;
    broken.terminal = PngTerminal();
    broken.script = "plot 'nonexistent.dat'\n";
    try {
      RunGnuplot(broken, (dir.path() / "broken.png").string());
      ADD_FAILURE() << "no error";
    } catch (const PlotError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_NE(what.find("gnuplot failed"), std::string::npos) << what;
    }
    EXPECT_FALSE(
        fs::exists(dir.path() / "broken.png"));  // nothing half-written
  }
  GnuplotJob sneaky;
  sneaky.terminal = "png";
  sneaky.data_files = {{"../escape.dat", "1 2\n"}};
  EXPECT_THROW(RunGnuplot(sneaky, (dir.path() / "s.png").string()), PlotError);
  {
    ScopedEnv path("PATH", dir.path().string());  // no gnuplot here
    EXPECT_FALSE(GnuplotAvailable());
    EXPECT_THROW(WriteGantt((dir.path() / "x.png").string(), {&t, 1}),
                 PlotError);
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), {}), 0);
}

}  // namespace
}  // namespace fcp::plot
