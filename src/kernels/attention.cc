// Blocked online-softmax attention (FlashAttention-2 style) for one head, fp32.
// The tile code lives in attention_impl.inc and is compiled twice: for
// AVX2+FMA (picked at run time when the CPU has both) and for the baseline ISA.
#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "fcp/check.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FCP_HAVE_AVX2_PATH 1
#endif

namespace fcp::kernels {
namespace {

#define FCP_KERNEL_NS generic
#include "kernels/attention_impl.inc"
#undef FCP_KERNEL_NS

#ifdef FCP_HAVE_AVX2_PATH
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define FCP_KERNEL_NS avx2
#define FCP_KERNEL_AVX2 1
#include "kernels/attention_impl.inc"
#undef FCP_KERNEL_AVX2
#undef FCP_KERNEL_NS
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

bool g_force_baseline = false;

bool UseAvx2() {
#ifdef FCP_HAVE_AVX2_PATH
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !g_force_baseline;
#else
  return false;
#endif
}

// Positions default to 0..n-1 when the caller passes nullptr.
const int64_t* PositionsOrIota(const int64_t* pos, int n,
                               std::vector<int64_t>& storage) {
  if (pos != nullptr) return pos;
  storage.resize(n);
  std::iota(storage.begin(), storage.end(), int64_t{0});
  return storage.data();
}

}  // namespace

bool AttentionUsesAvx2() { return UseAvx2(); }
void ForceBaselineIsaForTesting(bool force) { g_force_baseline = force; }

void AttentionForward(const float* q, const float* k, const float* v, int nq,
                      int nk, int dh, const int64_t* q_pos,
                      const int64_t* k_pos, bool causal, float scale,
                      float* out, float* lse) {
  FCP_CHECK(nq >= 0 && nk >= 0 && dh > 0);
  if (nq == 0) return;
  if (nk == 0) {
    std::fill(out, out + static_cast<int64_t>(nq) * dh, 0.0f);
    std::fill(lse, lse + nq, -std::numeric_limits<float>::infinity());
    return;
  }
  std::vector<int64_t> qs, ks;
  if (causal) {
    q_pos = PositionsOrIota(q_pos, nq, qs);
    k_pos = PositionsOrIota(k_pos, nk, ks);
  }
#ifdef FCP_HAVE_AVX2_PATH
  if (UseAvx2()) {
    avx2::Forward(q, k, v, nq, nk, dh, q_pos, k_pos, causal, scale, out, lse);
    return;
  }
#endif
  generic::Forward(q, k, v, nq, nk, dh, q_pos, k_pos, causal, scale, out, lse);
}

void MergePartial(float* out, float* lse, const float* out_b,
                  const float* lse_b, int nq, int dh) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < nq; ++i) {
    const float la = lse[i], lb = lse_b[i];
    float* o = out + static_cast<int64_t>(i) * dh;
    const float* ob = out_b + static_cast<int64_t>(i) * dh;
    if (lb == kNegInf) continue;  // b saw no key: nothing to fold in
    if (la == kNegInf) {
      std::copy(ob, ob + dh, o);
      lse[i] = lb;
      continue;
    }
    const float mx = std::max(la, lb);
    const float wa = std::exp(la - mx), wb = std::exp(lb - mx);
    const float inv = 1.0f / (wa + wb);
    const float fa = wa * inv, fb = wb * inv;
    for (int c = 0; c < dh; ++c) o[c] = fa * o[c] + fb * ob[c];
    lse[i] = mx + std::log(wa + wb);
  }
}

void AttentionBackward(const float* q, const float* k, const float* v,
                       const float* out, const float* dout, const float* lse,
                       int nq, int nk, int dh, const int64_t* q_pos,
                       const int64_t* k_pos, bool causal, float scale,
                       float* dq, float* dk, float* dv) {
  FCP_CHECK(nq >= 0 && nk >= 0 && dh > 0);
  if (nq == 0 || nk == 0) return;
  std::vector<int64_t> qs, ks;
  if (causal) {
    q_pos = PositionsOrIota(q_pos, nq, qs);
    k_pos = PositionsOrIota(k_pos, nk, ks);
  }
#ifdef FCP_HAVE_AVX2_PATH
  if (UseAvx2()) {
    avx2::Backward(q, k, v, out, dout, lse, nq, nk, dh, q_pos, k_pos, causal,
                   scale, dq, dk, dv);
    return;
  }
#endif
  generic::Backward(q, k, v, out, dout, lse, nq, nk, dh, q_pos, k_pos, causal,
                    scale, dq, dk, dv);
}

}  // namespace fcp::kernels

namespace fcp::kernels {
double AttentionForwardFlops(int64_t visible_pairs, int dh) {
  return 4.0 * static_cast<double>(visible_pairs) * dh;
}
double AttentionBackwardFlops(int64_t visible_pairs, int dh) {
  return 10.0 * static_cast<double>(visible_pairs) * dh;
}
}  // namespace fcp::kernels
