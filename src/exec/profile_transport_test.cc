#include "exec/profile_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "exec/communicator.h"
#include "profile/cpu_target.h"

namespace fcp::exec {
namespace {

// Byte pattern of `rank`'s message at ring step `step`.
std::vector<char> Pattern(int rank, int step, size_t bytes) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i)
    v[i] = static_cast<char>(rank * 31 + step * 7 + i % 13);
  return v;
}

void ExpectRingMovesNeighbourBytes(int num_ranks) {
  RunFakeWorld(num_ranks, [](Communicator& c) {
    CommRingTransport t(c);
    EXPECT_EQ(t.Describe(), "fake, " + std::to_string(c.size()) + " ranks");
    const int prev = (c.rank() + c.size() - 1) % c.size();
    const size_t sizes[] = {1, 4096, 100003, 0, 65536};
    for (int step = 0; step < 5; ++step) {
      const size_t bytes = sizes[step];
      const std::vector<char> send = Pattern(c.rank(), step, bytes);
      std::vector<char> recv(bytes, 0);
      t.Start(send.data(), recv.data(), bytes);
      t.Wait();
      EXPECT_EQ(recv, Pattern(prev, step, bytes))
          << "rank " << c.rank() << " step " << step;
    }
    t.Wait();  // no pending step: no-op
    t.Sync();
    t.ResetBusy();
    EXPECT_EQ(t.busy_s(), 0.0);
  });
}

TEST(CommRingTransport, TwoRanksExchange) { ExpectRingMovesNeighbourBytes(2); }
TEST(CommRingTransport, ThreeRanksReceiveFromPrevious) {
  ExpectRingMovesNeighbourBytes(3);
}

// A single-process transport that records the bytes of every step.
class CountingTransport : public profile::RingTransport {
 public:
  void Start(const void* send, void* recv, size_t bytes) override {
    EXPECT_FALSE(pending_);
    std::memcpy(recv, send, bytes);
    total_bytes += static_cast<double>(bytes);
    ++steps;
    pending_ = true;
  }
  void Wait() override { pending_ = false; }
  double busy_s() const override { return 0; }
  void ResetBusy() override {}
  void Sync() override { ++syncs; }
  std::string Describe() const override { return "counting"; }
  double total_bytes = 0;
  int steps = 0;
  int syncs = 0;

 private:
  bool pending_ = false;
};

TEST(ProfileRingTransport,
     MeasureCpuRankSendsItsStatedTrafficThroughTheTransport) {
  const profile::CpuLayerShape shape;
  const std::vector<Sequence> seqs = {{200, 0.0}, {120, 1.0}};
  const int degree = 3, repeats = 1;
  CountingTransport t;
  const profile::CpuRankTiming r =
      profile::MeasureCpuRank(shape, seqs, degree, repeats, &t);
  // Per round (warm-up + repeats): one traffic-only pass and one overlapped
  // pass, each with (d-1) forward + (d-1) backward + 1 dKV-home steps per
  // sequence.
  const int rounds = repeats + 1;
  EXPECT_EQ(t.steps, rounds * 2 * static_cast<int>(seqs.size()) *
                         (2 * (degree - 1) + 1));
  EXPECT_DOUBLE_EQ(t.total_bytes, rounds * 2 * r.comm_bytes);
  EXPECT_EQ(t.syncs, rounds * 2);
  // d = 1: no traffic at all.
  CountingTransport t1;
  profile::MeasureCpuRank(shape, seqs, 1, repeats, &t1);
  EXPECT_EQ(t1.steps, 0);
}

TEST(ProfileRingTransport, LockstepProfileOverTwoFakeRanks) {
  ProfileOptions o;
  o.target = "cpu";
  o.lengths = {256, 512};
  o.degrees = {1, 2};
  o.repeats = 1;
  o.min_tokens_per_rank = 64;
  o.heldout_fraction = 0;
  std::mutex mu;
  std::vector<ProfileReport> reports(2);
  RunFakeWorld(2, [&](Communicator& c) {
    ProfileReport rep = RunProfileOnRing(o, c);
    std::lock_guard<std::mutex> lock(mu);
    reports[c.rank()] = std::move(rep);
  });
  for (const ProfileReport& rep : reports) {
    EXPECT_EQ(rep.transport, "fake, 2 ranks");
    EXPECT_NE(rep.hardware.find("fake, 2 ranks"), std::string::npos)
        << rep.hardware;
    ASSERT_EQ(rep.samples.size(), reports[0].samples.size());
    EXPECT_GT(rep.samples.size(), 4u);
  }
  for (size_t i = 0; i < reports[0].samples.size(); ++i) {
    const FitSample& s = reports[0].samples[i];
    EXPECT_EQ(s.degree, reports[1].samples[i].degree);
    if (s.degree > 1) {
      EXPECT_GT(s.comm_s, 0.0);  // measured through the transport
    }
  }
}

}  // namespace
}  // namespace fcp::exec
