#include "exec/ring_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>

#include "kernels/attention.h"

namespace fcp::exec {
namespace {

// Full tensors of one sequence: [H][s][dh].
struct SeqTensors {
  std::vector<float> q, k, v, dout;
};

// Independent float64 oracle: naive softmax attention of one head over a
// whole sequence with an explicit mask (key j visible to query i iff j <= i
// or j < prefix), forward and backward written out from the definitions.
struct Naive {
  std::vector<double> out, lse, dq, dk, dv;
};
Naive NaiveAttention(const float* q, const float* k, const float* v,
                     const float* dout, int n, int dh, int64_t prefix) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Naive r;
  r.out.assign(static_cast<size_t>(n) * dh, 0);
  r.lse.assign(n, 0);
  r.dq.assign(r.out.size(), 0);
  r.dk.assign(r.out.size(), 0);
  r.dv.assign(r.out.size(), 0);
  std::vector<double> p(n), dp(n);
  for (int i = 0; i < n; ++i) {
    double mx = -1e300;
    for (int j = 0; j < n; ++j) {
      if (!(j <= i || j < prefix)) {
        p[j] = -1e300;
        continue;
      }
      double sdot = 0;
      for (int c = 0; c < dh; ++c)
        sdot += double(q[i * dh + c]) * k[j * dh + c];
      p[j] = sdot * scale;
      mx = std::max(mx, p[j]);
    }
    double sum = 0;
    for (int j = 0; j < n; ++j) sum += p[j] > -1e299 ? std::exp(p[j] - mx) : 0;
    r.lse[i] = mx + std::log(sum);
    for (int j = 0; j < n; ++j)
      p[j] = p[j] > -1e299 ? std::exp(p[j] - r.lse[i]) : 0;
    for (int j = 0; j < n; ++j)
      for (int c = 0; c < dh; ++c) r.out[i * dh + c] += p[j] * v[j * dh + c];
    // dP = dO·Vᵀ; dS = P ⊙ (dP − Σ_j P dP); dQ = scale·dS·K; dK += scale·dSᵀQ.
    double row = 0;
    for (int j = 0; j < n; ++j) {
      dp[j] = 0;
      for (int c = 0; c < dh; ++c)
        dp[j] += double(dout[i * dh + c]) * v[j * dh + c];
      row += p[j] * dp[j];
    }
    for (int j = 0; j < n; ++j) {
      const double ds = p[j] * (dp[j] - row) * scale;
      for (int c = 0; c < dh; ++c) {
        r.dq[i * dh + c] += ds * k[j * dh + c];
        r.dk[j * dh + c] += ds * q[i * dh + c];
        r.dv[j * dh + c] += p[j] * dout[i * dh + c];
      }
    }
  }
  return r;
}

// Runs the group attention (ring or Ulysses) on `degree` fake ranks and
// returns the largest abs error against the float64 oracle.
// Long because: a test helper that runs forward and backward on fake ranks and
// checks every output.
double GroupAttentionError(const std::vector<int64_t>& lengths,
                           const std::vector<double>& eta, int degree,
                           AttentionKernels kernels, CommKind comm_kind,
                           uint64_t seed, int H = 3) {
  const int dh = 8;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<SeqTensors> full(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    const size_t n = static_cast<size_t>(H) * lengths[s] * dh;
    for (auto* t : {&full[s].q, &full[s].k, &full[s].v, &full[s].dout}) {
      t->resize(n);
      for (auto& x : *t) x = nd(rng);
    }
  }
  std::vector<std::vector<Naive>> want(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int len = static_cast<int>(lengths[s]);
    const auto prefix =
        static_cast<int64_t>(std::llround(std::sqrt(eta[s]) * len));
    for (int h = 0; h < H; ++h) {
      const size_t o = static_cast<size_t>(h) * len * dh;
      want[s].push_back(NaiveAttention(&full[s].q[o], &full[s].k[o],
                                       &full[s].v[o], &full[s].dout[o], len, dh,
                                       prefix));
    }
  }
  std::vector<int> ids(lengths.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  const auto layouts = ZigzagLayouts(lengths, eta, ids, degree);

  double worst = 0;
  std::mutex mu;
  RunFakeWorld(degree, [&](Communicator& comm) {
    const ShardLayout& me = layouts[comm.rank()];
    const int64_t T = me.num_tokens;
    const size_t n = static_cast<size_t>(H) * T * dh;
    // Gather local rows (head-major) from the full tensors.
    auto local = [&](auto member) {
      std::vector<float> x(n);
      for (const SeqShard& sh : me.seqs)
        for (int h = 0; h < H; ++h)
          for (int64_t j = 0; j < sh.size(); ++j)
            for (int c = 0; c < dh; ++c)
              x[(h * T + sh.offset + j) * dh + c] =
                  (full[sh.seq].*member)[(h * sh.seq_len + sh.pos[j]) * dh + c];
      return x;
    };
    auto q = local(&SeqTensors::q), k = local(&SeqTensors::k),
         v = local(&SeqTensors::v), dout = local(&SeqTensors::dout);
    std::vector<float> out(n), lse(static_cast<size_t>(H) * T), dq(n), dk(n),
        dv(n);
    RingAttentionArgs args;
    args.comm = degree > 1 ? &comm : nullptr;
    args.layouts = &layouts;
    args.heads = H;
    args.head_dim = dh;
    args.kernels = kernels;
    args.comm_kind = comm_kind;
    GroupAttentionForward(args, q.data(), k.data(), v.data(), out.data(),
                          lse.data());
    GroupAttentionBackward(args, q.data(), k.data(), v.data(), out.data(),
                           lse.data(), dout.data(), dq.data(), dk.data(),
                           dv.data());
    double max_err = 0;
    for (const SeqShard& sh : me.seqs)
      for (int h = 0; h < H; ++h)
        for (int64_t j = 0; j < sh.size(); ++j) {
          const size_t lo = (h * T + sh.offset + j);
          const Naive& w = want[sh.seq][h];
          const size_t go = sh.pos[j];
          auto err = [&](float got, double ref) {
            max_err = std::max(max_err, std::fabs(got - ref));
          };
          err(lse[lo], w.lse[go]);
          for (int c = 0; c < dh; ++c) {
            err(out[lo * dh + c], w.out[go * dh + c]);
            err(dq[lo * dh + c], w.dq[go * dh + c]);
            err(dk[lo * dh + c], w.dk[go * dh + c]);
            err(dv[lo * dh + c], w.dv[go * dh + c]);
          }
        }
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, max_err);
  });
  return worst;
}

// Values are O(1) and sums run over <= 60 keys: fp32 errors of a few 1e-7
// to 1e-6 (printed); the bound is 1e-5, within 10x of the worst measured.
constexpr double kAttentionTol = 1e-5;

TEST(RingAttention, MatchesFloat64OracleDegrees1To5) {
  const std::vector<int64_t> lengths = {37, 3, 60, 11, 45};
  const std::vector<double> eta = {0.0, 0.0, 1.0, 0.0, 0.3};
  double worst = 0;
  for (int d = 1; d <= 5; ++d) {
    SCOPED_TRACE(d);
    for (auto kernels : {AttentionKernels::kFast, AttentionKernels::kReference})
      worst = std::max(worst, GroupAttentionError(lengths, eta, d, kernels,
                                                  CommKind::kRing, d));
  }
  std::printf("ring: worst abs error %.2e\n", worst);
  EXPECT_LT(worst, kAttentionTol);
}

TEST(RingAttention, SequenceShorterThanTwoChunksPerRank) {
  // s = 3 on d = 4: several ranks hold nothing of it.
  EXPECT_LT(GroupAttentionError({3, 9}, {0.0, 1.0}, 4, AttentionKernels::kFast,
                                CommKind::kRing, 7),
            kAttentionTol);
}

TEST(UlyssesAttention, MatchesFloat64OracleAnyDegree) {
  // Degrees 1..5 over 3 heads: uneven head splits and, at d = 4, 5, ranks
  // with no head at all.
  const std::vector<int64_t> lengths = {37, 3, 60, 11, 45};
  const std::vector<double> eta = {0.0, 0.6, 1.0, 0.0, 0.3};
  double worst = 0;
  for (int d = 1; d <= 5; ++d) {
    SCOPED_TRACE(d);
    worst = std::max(
        worst, GroupAttentionError(lengths, eta, d, AttentionKernels::kFast,
                                   CommKind::kAllToAll, 50 + d));
  }
  std::printf("ulysses: worst abs error %.2e\n", worst);
  EXPECT_LT(worst, kAttentionTol);
}

TEST(MixedMask, PrefixIsTheCostModelsEta) {
  // Visible pairs of the executed mask = s(s+1)/2 + p(p-1)/2, which the cost
  // model charges as (1 + eta)·s²/2: equal up to O(s) terms.
  for (int64_t s : {64, 1000, 4096}) {
    for (double eta : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      const auto layouts = ZigzagLayouts({s}, {eta}, {0}, 1);
      int64_t visible = 0;
      const SeqShard& sh = layouts[0].seqs[0];
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = 0; j < s; ++j) visible += j <= sh.mask_pos[i];
      const double model = (1 + eta) * s * s / 2.0;
      EXPECT_NEAR(visible / model, 1.0, 2.0 / s) << s << " " << eta;
    }
  }
}

}  // namespace
}  // namespace fcp::exec
