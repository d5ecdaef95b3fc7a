// MPI tests (run by CTest under `mpirun -np 4`, label mpi). No gtest: every
// rank runs the same checks; failures are all-reduced and rank 0 prints them.
//   exec_mpitest gradients   gradient equivalence vs the single-process oracle
//   exec_mpitest comm        communicator cache creation vs hit cost, ring p2p
//   exec_mpitest overlap     (2 ranks) exposed communication of a ring step
//                            with progress polling vs the transfer alone
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "exec/comm_cache.h"
#include "exec/communicator_mpi.h"
#include "exec/exec_testing.h"
#include "exec/executor.h"
#include "fcp/scheduler.h"

namespace fcp::exec {
namespace {

using testing::RelErr;

GlobalBatch RandomBatch(int num_sequences, int max_len, uint64_t seed) {
  return testing::RandomByteBatch(seed, num_sequences, max_len,
                                  [](int i) { return i % 5 == 4 ? 1.0 : i % 5 == 3 ? 0.3 : 0.0; });
}

int Gradients(Communicator& world) {
  ModelConfig cfg;
  cfg.dim = 32;
  cfg.heads = 4;
  cfg.layers = 2;
  cfg.ffn = 48;
  const ParamLayout layout = MakeParamLayout(cfg);
  const std::vector<float> params = InitParams(cfg, 5);
  const GlobalBatch batch = RandomBatch(9, 70, 11);
  std::vector<float> want;
  const double want_loss =
      ReferenceGradients(cfg, layout, params.data(), batch, want);
  CommCache cache(world);
  int failures = 0;
  std::vector<std::pair<std::string, Plan>> plans;
  for (int i = 0; i < 6; ++i)
    plans.push_back({"random" + std::to_string(i),
                     RandomValidPlan(9, world.size(), 1000 + i)});
  PlanRequest req;
  req.cluster = {world.size(), world.size()};
  req.cost.alpha1 = 1e-9;
  req.cost.alpha2 = 1e-6;
  req.cost.beta1 = 1e-5;
  req.cost.mem_per_token = 1000;
  req.cost.mem_capacity = 40'000;  // sequences > 40 tokens need d >= 2
  for (const auto& len : batch.lengths()) req.sequences.push_back({len, 0.0});
  for (size_t i = 0; i < batch.eta.size(); ++i)
    req.sequences[i].eta = batch.eta[i];
  for (const char* strategy : {"fcp", "fcp-paper", "megatron"}) {
    PlanOptions opt;
    opt.strategy = strategy;
    try {
      plans.push_back({strategy, MakePlan(req, opt)});
    } catch (const InputError& e) {
      if (world.rank() == 0)
        std::printf("skip %s: %s (strategy not available in this build)\n",
                    strategy, e.what());
    }
  }
  for (const auto& [name, plan] : plans) {
    const std::string bad = CheckExecutablePlan(plan, world.size(), 9);
    if (!bad.empty()) {
      if (world.rank() == 0) std::printf("FAIL %s: invalid plan: %s\n", name.c_str(), bad.c_str());
      ++failures;
      continue;
    }
    std::vector<float> got;
    const double loss = GlobalGradients(world, cache, cfg, layout, params.data(),
                                        batch, plan, AttentionKernels::kFast, got);
    const double err = RelErr(got, want);
    const bool ok = err < 1e-4 && std::fabs(loss - want_loss) < 1e-4;
    std::string degrees;
    for (const auto& mb : plan.micro_batches) {
      degrees += "[";
      for (size_t g = 0; g < mb.groups.size(); ++g)
        {
          if (g) degrees += ',';
          degrees += std::to_string(mb.groups[g].degree());
        }
      degrees += "]";
    }
    if (world.rank() == 0)
      std::printf("%s %-10s groups=%-16s loss=%.6f ref=%.6f grad rel err=%.2e (tol 1e-4)\n",
                  ok ? "ok  " : "FAIL", name.c_str(), degrees.c_str(), loss,
                  want_loss, err);
    failures += !ok;
  }
  return failures;
}

int Comm(Communicator& world) {
  // Ring p2p among all ranks, then cache creation vs hit cost.
  const int next = (world.rank() + 1) % world.size();
  const int prev = (world.rank() + world.size() - 1) % world.size();
  int got = -1, mine = world.rank();
  RequestId r = world.Irecv(&got, sizeof got, prev, 3);
  RequestId s = world.Isend(&mine, sizeof mine, next, 3);
  world.Wait(r);
  world.Wait(s);
  int failures = got != prev;
  CommCache cache(world);
  const std::vector<std::vector<std::vector<int>>> layouts = {
      {{0, 1, 2, 3}}, {{0, 1}, {2, 3}}, {{3, 2, 1}}, {{0}, {1}, {2, 3}}};
  for (int round = 0; round < 20; ++round) {
    for (const auto& groups : layouts) {
      Communicator* c = cache.Acquire(groups);
      float one = 1;
      if (c) c->AllReduceSum(&one, 1);
      size_t want = 0;
      for (const auto& g : groups)
        for (int x : g)
          if (x == world.rank()) want = g.size();
      if (static_cast<size_t>(one) != (c ? want : 1)) ++failures;
    }
  }
  const CommCacheStats& st = cache.stats();
  double v[3] = {static_cast<double>(failures), 0, 0};
  world.AllReduceSum(v, 1);
  failures = static_cast<int>(v[0]);
  if (st.splits != 4) ++failures;
  if (world.rank() == 0)
    std::printf(
        "comm cache (mpi, %d ranks, this machine): %lld splits (mean %.3f ms), "
        "%lld misses, %lld hits (mean %.4f ms)\n",
        world.size(), static_cast<long long>(st.splits),
        st.splits ? 1e3 * st.create_s / st.splits : 0.0,
        static_cast<long long>(st.misses),
        static_cast<long long>(st.hits), st.hits ? 1e3 * st.hit_s / st.hits : 0.0);
  return failures;
}

double NowS() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One ring step on 2 ranks: the forward posts the KV block's Isend/Irecv and
// computes its own block, then waits. Exposed = time the compute thread
// spends blocked in Wait plus in progress polls (polling mode). Transfer =
// the same Isend/Irecv + Wait with nothing else to do. Medians of kReps. The
// issue's bar: exposed (blocked) <= 20 % of the transfer when compute is
// longer than the transfer.
int Overlap(Communicator& world) {
  if (world.size() != 2) {
    if (world.rank() == 0) std::printf("overlap needs exactly 2 ranks\n");
    return 1;
  }
  constexpr int kReps = 7;
  // Many short full-mask sequences: a large KV block (16 MiB) for moderate
  // compute (attention is linear in tokens here), equal work in both steps.
  const int num_seqs = 64, len = 256, H = 4, dh = 64;
  std::vector<int64_t> lengths(num_seqs, len);
  std::vector<double> eta(num_seqs, 1.0);
  std::vector<int> ids(num_seqs);
  for (int i = 0; i < num_seqs; ++i) ids[i] = i;
  const std::vector<ShardLayout> layouts = ZigzagLayouts(lengths, eta, ids, 2);
  const int64_t T = layouts[world.rank()].num_tokens;
  const size_t n = static_cast<size_t>(H) * T * dh;
  std::mt19937 rng(7 + world.rank());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(n), k(n), v(n), out(n), lse(static_cast<size_t>(H) * T);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = nd(rng);
  const size_t kv_bytes = 2 * n * sizeof(float);

  std::vector<double> transfer, blocked, compute;
  std::vector<float> send(2 * n, 1.0f), recv(2 * n);
  const int peer = 1 - world.rank();
  for (int rep = 0; rep < kReps; ++rep) {
    world.Barrier();
    double t0 = NowS();
    RequestId r = world.Irecv(recv.data(), kv_bytes, peer, 9);
    RequestId s = world.Isend(send.data(), kv_bytes, peer, 9);
    world.Wait(s);
    world.Wait(r);
    transfer.push_back(NowS() - t0);
    RingAttentionArgs::Timing timing;
    RingAttentionArgs args;
    args.comm = &world;
    args.layouts = &layouts;
    args.heads = H;
    args.head_dim = dh;
    args.timing = &timing;
    world.Barrier();
    RingAttentionForward(args, q.data(), k.data(), v.data(), out.data(),
                         lse.data());
    blocked.push_back(timing.wait_s + timing.progress_s);
    compute.push_back(timing.forward_step_compute_s[0]);
  }
  // The slower rank's medians decide.
  double m[3] = {Median(transfer), Median(blocked), Median(compute)};
  double all[6] = {0};
  for (int i = 0; i < 3; ++i) all[3 * world.rank() + i] = m[i];
  world.AllReduceSum(all, 6);
  for (int i = 0; i < 3; ++i) m[i] = std::max(all[i], all[3 + i]);
  m[2] = std::min(all[2], all[5]);  // the shorter compute must still be longer
  const double ratio = m[1] / m[0];
  const bool compute_longer = m[2] > m[0];
  const bool ok = compute_longer && ratio <= 0.20;
  if (world.rank() == 0)
    std::printf(
        "%s ring step, 2 ranks (mpi, progress %s, this machine), KV block "
        "%.1f MiB, medians of %d: transfer alone %.2f ms, step compute %.2f "
        "ms; exposed communication (compute thread blocked) %.2f ms = %.0f%% "
        "of the transfer (bar 20%%)\n",
        ok ? "ok  " : "FAIL", MpiProgressMode().c_str(), kv_bytes / 1048576.0,
        kReps, 1e3 * m[0], 1e3 * m[2], 1e3 * m[1], 100 * ratio);
  if (!compute_longer && world.rank() == 0)
    std::printf("FAIL: compute not longer than the transfer; the set-up does "
                "not test overlap\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace fcp::exec

int main(int argc, char** argv) {
  auto world = fcp::exec::MpiInit(&argc, &argv);
  const std::string what = argc > 1 ? argv[1] : "gradients";
  int failures = 0;
  if (what == "gradients") {
    failures = fcp::exec::Gradients(*world);
  } else if (what == "comm") {
    failures = fcp::exec::Comm(*world);
  } else if (what == "overlap") {
    failures = fcp::exec::Overlap(*world);
  } else {
    failures = 1;
  }
  double f = failures;
  world->AllReduceSum(&f, 1);
  if (world->rank() == 0) std::printf("%s: %s\n", what.c_str(), f == 0 ? "PASS" : "FAIL");
  world.reset();
  fcp::exec::MpiFinalize();
  return f == 0 ? 0 : 1;
}
