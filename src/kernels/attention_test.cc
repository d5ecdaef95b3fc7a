// Blocked attention kernels vs the naive double-accumulating reference, vs
// central finite differences of an independent double-precision forward, and
// ring-style merging of partial blocks. Inputs are U(-1, 1) (q scaled up to
// make the softmax peaky); fp32 kernels must match to 2e-5 (forward) and
// 1e-4 (backward) absolute. Observed maxima are printed.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/gemm.h"

namespace fcp::kernels {
namespace {

constexpr float kFwdTol = 2e-5f;
constexpr float kBwdTol = 1e-4f;

std::vector<float> Random(size_t n, std::mt19937& rng, float amp = 1.0f) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> x(n);
  for (auto& e : x) e = u(rng);
  return x;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && std::isinf(b[i]) && (a[i] > 0) == (b[i] > 0))
      continue;
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

std::vector<int64_t> Iota(int n, int64_t start) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), start);
  return p;
}

struct Case {
  int nq, nk, dh;
  bool causal;
  int64_t q_start, k_start;  // global position of row 0
};

class AttentionCaseTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCaseTest, ForwardAndBackwardMatchReference) {
  const Case c = GetParam();
  std::mt19937 rng(c.nq * 1000003 + c.nk * 1009 + c.dh * 7 + c.causal);
  auto q = Random(size_t(c.nq) * c.dh, rng, 2.0f),
       k = Random(size_t(c.nk) * c.dh, rng),
       v = Random(size_t(c.nk) * c.dh, rng),
       g = Random(size_t(c.nq) * c.dh, rng);
  auto qp = Iota(c.nq, c.q_start), kp = Iota(c.nk, c.k_start);
  const float scale = 1.0f / std::sqrt(float(c.dh));
  std::vector<float> out(size_t(c.nq) * c.dh), lse(c.nq), rout(out.size()),
      rlse(c.nq);
  AttentionForward(q.data(), k.data(), v.data(), c.nq, c.nk, c.dh, qp.data(),
                   kp.data(), c.causal, scale, out.data(), lse.data());
  ReferenceAttentionForward(q.data(), k.data(), v.data(), c.nq, c.nk, c.dh,
                            qp.data(), kp.data(), c.causal, scale, rout.data(),
                            rlse.data());
  const float fwd_err = std::max(MaxAbsDiff(out, rout), MaxAbsDiff(lse, rlse));
  EXPECT_LE(fwd_err, kFwdTol);
  for (int i = 0; i < c.nq; ++i)
    EXPECT_EQ(std::isinf(lse[i]), std::isinf(rlse[i])) << i;

  std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
  std::vector<float> rdq = dq, rdk = dk, rdv = dv;
  AttentionBackward(q.data(), k.data(), v.data(), rout.data(), g.data(),
                    rlse.data(), c.nq, c.nk, c.dh, qp.data(), kp.data(),
                    c.causal, scale, dq.data(), dk.data(), dv.data());
  ReferenceAttentionBackward(q.data(), k.data(), v.data(), rout.data(),
                             g.data(), rlse.data(), c.nq, c.nk, c.dh, qp.data(),
                             kp.data(), c.causal, scale, rdq.data(), rdk.data(),
                             rdv.data());
  const float bwd_err =
      std::max({MaxAbsDiff(dq, rdq), MaxAbsDiff(dk, rdk), MaxAbsDiff(dv, rdv)});
  EXPECT_LE(bwd_err, kBwdTol);
  std::printf("  nq=%d nk=%d dh=%d causal=%d: max abs err fwd %.2e bwd %.2e\n",
              c.nq, c.nk, c.dh, c.causal, fwd_err, bwd_err);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCaseTest,
    ::testing::Values(
        Case{1, 1, 8, true, 0, 0}, Case{7, 7, 8, true, 0, 0},
        Case{63, 63, 16, true, 0, 0}, Case{64, 64, 64, true, 0, 0},
        Case{65, 65, 64, false, 0, 0}, Case{130, 97, 33, false, 0, 0},
        Case{129, 200, 64, true, 71, 0},     // queries later than keys
        Case{77, 150, 128, true, 0, 0},      // keys extend past queries
        Case{50, 70, 16, true, 1000, 2000},  // every key in the future
        Case{200, 131, 32, true, 3, 5}));

// Ring attention: a query chunk against KV blocks with arbitrary global
// positions (zigzag chunks), block by block, merged with MergePartial, must
// equal attention over the concatenation; the per-block backward passes with
// the final out/lse must sum to the full backward.
TEST(AttentionTest, MergeOfPartialBlocksEqualsConcatenation) {
  for (bool causal : {true, false}) {
    std::mt19937 rng(42 + causal);
    const int dh = 32, total = 300, d = 3;
    // Zigzag over 2d chunks of 50: rank r holds chunks r and 2d-1-r.
    const int chunk = total / (2 * d);
    std::vector<std::vector<int64_t>> pos(d);
    for (int r = 0; r < d; ++r) {
      for (int t = 0; t < chunk; ++t) pos[r].push_back(int64_t(r) * chunk + t);
      for (int t = 0; t < chunk; ++t)
        pos[r].push_back(int64_t(2 * d - 1 - r) * chunk + t);
    }
    const int n = 2 * chunk;
    std::vector<std::vector<float>> ks, vs;
    for (int r = 0; r < d; ++r) {
      ks.push_back(Random(size_t(n) * dh, rng));
      vs.push_back(Random(size_t(n) * dh, rng));
    }
    const auto q = Random(size_t(n) * dh, rng, 2.0f);
    const auto g = Random(size_t(n) * dh, rng);
    const int me = 1;
    const float scale = 1.0f / std::sqrt(float(dh));
    std::vector<float> out(size_t(n) * dh), lse(n), ob(out.size()), lb(n);
    for (int step = 0; step < d; ++step) {
      const int src = (me - step + d) % d;
      float* o = step == 0 ? out.data() : ob.data();
      float* l = step == 0 ? lse.data() : lb.data();
      AttentionForward(q.data(), ks[src].data(), vs[src].data(), n, n, dh,
                       pos[me].data(), pos[src].data(), causal, scale, o, l);
      if (step > 0)
        MergePartial(out.data(), lse.data(), ob.data(), lb.data(), n, dh);
    }
    // Concatenation in source order 0..d-1.
    std::vector<float> kc, vc;
    std::vector<int64_t> pc;
    for (int r = 0; r < d; ++r) {
      kc.insert(kc.end(), ks[r].begin(), ks[r].end());
      vc.insert(vc.end(), vs[r].begin(), vs[r].end());
      pc.insert(pc.end(), pos[r].begin(), pos[r].end());
    }
    std::vector<float> rout(out.size()), rlse(n);
    ReferenceAttentionForward(q.data(), kc.data(), vc.data(), n, n * d, dh,
                              pos[me].data(), pc.data(), causal, scale,
                              rout.data(), rlse.data());
    const float fwd_err =
        std::max(MaxAbsDiff(out, rout), MaxAbsDiff(lse, rlse));
    EXPECT_LE(fwd_err, kFwdTol) << "causal=" << causal;

    std::vector<float> dq(q.size(), 0.f), dkc(kc.size(), 0.f),
        dvc(vc.size(), 0.f);
    for (int r = 0; r < d; ++r) {
      AttentionBackward(q.data(), ks[r].data(), vs[r].data(), out.data(),
                        g.data(), lse.data(), n, n, dh, pos[me].data(),
                        pos[r].data(), causal, scale, dq.data(),
                        dkc.data() + size_t(r) * n * dh,
                        dvc.data() + size_t(r) * n * dh);
    }
    std::vector<float> rdq(q.size(), 0.f), rdk(kc.size(), 0.f),
        rdv(vc.size(), 0.f);
    ReferenceAttentionBackward(q.data(), kc.data(), vc.data(), rout.data(),
                               g.data(), rlse.data(), n, n * d, dh,
                               pos[me].data(), pc.data(), causal, scale,
                               rdq.data(), rdk.data(), rdv.data());
    const float bwd_err = std::max(
        {MaxAbsDiff(dq, rdq), MaxAbsDiff(dkc, rdk), MaxAbsDiff(dvc, rdv)});
    EXPECT_LE(bwd_err, kBwdTol) << "causal=" << causal;
    std::printf("  ring d=%d causal=%d: max abs err fwd %.2e bwd %.2e\n", d,
                causal, fwd_err, bwd_err);
  }
}

// The baseline-ISA build of the same tiles (used on CPUs without AVX2/FMA).
TEST(AttentionTest, BaselineIsaPathMatchesReference) {
  ForceBaselineIsaForTesting(true);
  std::mt19937 rng(11);
  const int nq = 100, nk = 150, dh = 24;
  auto q = Random(size_t(nq) * dh, rng, 2.0f), k = Random(size_t(nk) * dh, rng),
       v = Random(size_t(nk) * dh, rng), g = Random(size_t(nq) * dh, rng);
  auto qp = Iota(nq, 60), kp = Iota(nk, 0);
  const float scale = 0.2f;
  std::vector<float> out(q.size()), lse(nq), rout(q.size()), rlse(nq);
  AttentionForward(q.data(), k.data(), v.data(), nq, nk, dh, qp.data(),
                   kp.data(), true, scale, out.data(), lse.data());
  ReferenceAttentionForward(q.data(), k.data(), v.data(), nq, nk, dh, qp.data(),
                            kp.data(), true, scale, rout.data(), rlse.data());
  std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
  std::vector<float> rdq = dq, rdk = dk, rdv = dv;
  AttentionBackward(q.data(), k.data(), v.data(), rout.data(), g.data(),
                    rlse.data(), nq, nk, dh, qp.data(), kp.data(), true, scale,
                    dq.data(), dk.data(), dv.data());
  ForceBaselineIsaForTesting(false);
  ReferenceAttentionBackward(q.data(), k.data(), v.data(), rout.data(),
                             g.data(), rlse.data(), nq, nk, dh, qp.data(),
                             kp.data(), true, scale, rdq.data(), rdk.data(),
                             rdv.data());
  EXPECT_LE(std::max(MaxAbsDiff(out, rout), MaxAbsDiff(lse, rlse)), kFwdTol);
  EXPECT_LE(
      std::max({MaxAbsDiff(dq, rdq), MaxAbsDiff(dk, rdk), MaxAbsDiff(dv, rdv)}),
      kBwdTol);
}

TEST(AttentionTest, MergeWithEmptyPartialIsIdentity) {
  std::mt19937 rng(7);
  const int n = 5, dh = 4;
  auto out = Random(n * dh, rng), ob = Random(n * dh, rng);
  std::vector<float> lse = {0.5f, -std::numeric_limits<float>::infinity(), 1.f,
                            2.f, 3.f};
  std::vector<float> lb(n, -std::numeric_limits<float>::infinity());
  lb[1] = 0.25f;
  const auto before = out;
  MergePartial(out.data(), lse.data(), ob.data(), lb.data(), n, dh);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < dh; ++c)
      EXPECT_EQ(out[i * dh + c], i == 1 ? ob[i * dh + c] : before[i * dh + c]);
  EXPECT_EQ(lse[1], 0.25f);
}

// Independent oracle: double-precision forward, loss = Σ W ∘ out; the gradient
// from AttentionBackward (dout = W) must match central differences.
double LossDouble(const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& w,
                  int nq, int nk, int dh, bool causal, double scale) {
  double loss = 0;
  for (int i = 0; i < nq; ++i) {
    std::vector<double> s(nk, -INFINITY);
    double mx = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      if (causal && j > i) continue;
      double dot = 0;
      for (int c = 0; c < dh; ++c) dot += q[i * dh + c] * k[j * dh + c];
      s[j] = scale * dot;
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (int j = 0; j < nk; ++j)
      sum += std::isinf(s[j]) ? 0 : std::exp(s[j] - mx);
    for (int c = 0; c < dh; ++c) {
      double o = 0;
      for (int j = 0; j < nk; ++j)
        if (!std::isinf(s[j])) o += std::exp(s[j] - mx) / sum * v[j * dh + c];
      loss += w[i * dh + c] * o;
    }
  }
  return loss;
}

TEST(AttentionTest, BackwardMatchesFiniteDifferences) {
  for (bool causal : {true, false}) {
    std::mt19937 rng(99 + causal);
    const int nq = 9, nk = 9, dh = 5;
    const float scale = 1.0f / std::sqrt(float(dh));
    auto q = Random(nq * dh, rng, 2.0f), k = Random(nk * dh, rng),
         v = Random(nk * dh, rng), w = Random(nq * dh, rng);
    std::vector<float> out(nq * dh), lse(nq);
    AttentionForward(q.data(), k.data(), v.data(), nq, nk, dh, nullptr, nullptr,
                     causal, scale, out.data(), lse.data());
    std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
    AttentionBackward(q.data(), k.data(), v.data(), out.data(), w.data(),
                      lse.data(), nq, nk, dh, nullptr, nullptr, causal, scale,
                      dq.data(), dk.data(), dv.data());
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()),
        vd(v.begin(), v.end()), wd(w.begin(), w.end());
    const double eps = 1e-5;
    double max_err = 0;
    auto check = [&](std::vector<double>& x, const std::vector<float>& grad) {
      for (size_t i = 0; i < x.size(); ++i) {
        const double x0 = x[i];
        x[i] = x0 + eps;
        const double up = LossDouble(qd, kd, vd, wd, nq, nk, dh, causal, scale);
        x[i] = x0 - eps;
        const double dn = LossDouble(qd, kd, vd, wd, nq, nk, dh, causal, scale);
        x[i] = x0;
        max_err = std::max(max_err, std::fabs((up - dn) / (2 * eps) - grad[i]));
      }
    };
    check(qd, dq);
    check(kd, dk);
    check(vd, dv);
    EXPECT_LE(max_err, kBwdTol) << "causal=" << causal;
    std::printf("  finite differences causal=%d: max abs err %.2e\n", causal,
                max_err);
  }
}

TEST(GemmTest, MatchesNaiveForAllTransposes) {
  std::mt19937 rng(3);
  const int m = 13, n = 17, k = 11;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto a = Random(size_t(m) * k, rng), b = Random(size_t(k) * n, rng);
      auto c = Random(size_t(m) * n, rng);
      auto expect = c;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p)
            s += double(ta ? a[p * m + i] : a[i * k + p]) *
                 (tb ? b[j * k + p] : b[p * n + j]);
          expect[i * n + j] = float(2.0 * s + 0.5 * c[i * n + j]);
        }
      Gemm(ta, tb, m, n, k, 2.0f, a.data(), ta ? m : k, b.data(), tb ? k : n,
           0.5f, c.data(), n);
      EXPECT_LE(MaxAbsDiff(c, expect), 1e-5f) << ta << tb;
    }
}

// PortableGemm (Eigen: the wheel's Gemm) against the same naive product, with
// padded leading dimensions and beta = 0 over a C full of NaN (must not be
// read).
TEST(GemmTest, PortableGemmMatchesNaiveWithPaddedStridesAndIgnoresCAtBetaZero) {
  std::mt19937 rng(5);
  const int m = 9, n = 14, k = 6, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, -1.5f}) {
        const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad,
                  ldc = n + pad;
        auto a = Random(size_t(ta ? k : m) * lda, rng);
        auto b = Random(size_t(tb ? n : k) * ldb, rng);
        auto c = Random(size_t(m) * ldc, rng);
        if (beta == 0.0f) std::fill(c.begin(), c.end(), std::nanf(""));
        auto expect = c;
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p)
              s += double(ta ? a[p * lda + i] : a[i * lda + p]) *
                   (tb ? b[j * ldb + p] : b[p * ldb + j]);
            expect[i * ldc + j] =
                float(0.75 * s + (beta == 0.0f ? 0.0 : beta * c[i * ldc + j]));
          }
        PortableGemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, beta,
                     c.data(), ldc);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < ldc; ++j) {
            const size_t at = size_t(i) * ldc + j;
            if (j < n) {
              EXPECT_NEAR(c[at], expect[at], 1e-5)
                  << ta << tb << beta << " at " << i << "," << j;
            } else {  // the padding columns stay as they were
              EXPECT_TRUE(std::isnan(c[at]) == std::isnan(expect[at]) &&
                          (std::isnan(c[at]) || c[at] == expect[at]));
            }
          }
      }
}

TEST(GemmTest, LinearIsXTimesWTransposed) {
  std::mt19937 rng(4);
  const int m = 6, n = 5, k = 7;
  auto x = Random(m * k, rng), w = Random(n * k, rng);
  std::vector<float> y(m * n, 1.0f);
  Linear(x.data(), w.data(), m, n, k, y.data(), /*accumulate=*/true);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 1.0;
      for (int p = 0; p < k; ++p) s += double(x[i * k + p]) * w[j * k + p];
      EXPECT_NEAR(y[i * n + j], s, 1e-5);
    }
}

}  // namespace
}  // namespace fcp::kernels
