// Naive O(nq·nk·dh) references of the attention contracts, accumulating in
// double. Used as oracles by tests; deliberately unblocked and unvectorised.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/attention.h"

namespace fcp::kernels {
namespace {

bool Visible(bool causal, const int64_t* q_pos, const int64_t* k_pos, int i,
             int j) {
  if (!causal) return true;
  const int64_t qp = q_pos ? q_pos[i] : i;
  const int64_t kp = k_pos ? k_pos[j] : j;
  return kp <= qp;
}

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int c = 0; c < n; ++c) s += static_cast<double>(a[c]) * b[c];
  return s;
}

}  // namespace

void ReferenceAttentionForward(const float* q, const float* k, const float* v,
                               int nq, int nk, int dh, const int64_t* q_pos,
                               const int64_t* k_pos, bool causal, float scale,
                               float* out, float* lse) {
  std::vector<double> s(nk), o(dh);
  for (int i = 0; i < nq; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < nk; ++j) {
      s[j] = Visible(causal, q_pos, k_pos, i, j)
                 ? scale * Dot(q + int64_t{i} * dh, k + int64_t{j} * dh, dh)
                 : -std::numeric_limits<double>::infinity();
      mx = std::max(mx, s[j]);
    }
    float* orow = out + int64_t{i} * dh;
    if (mx == -std::numeric_limits<double>::infinity()) {
      std::fill(orow, orow + dh, 0.0f);
      lse[i] = -std::numeric_limits<float>::infinity();
      continue;
    }
    double sum = 0;
    std::fill(o.begin(), o.end(), 0.0);
    for (int j = 0; j < nk; ++j) {
      const double p = std::exp(s[j] - mx);
      sum += p;
      for (int c = 0; c < dh; ++c) o[c] += p * v[int64_t{j} * dh + c];
    }
    for (int c = 0; c < dh; ++c) orow[c] = static_cast<float>(o[c] / sum);
    lse[i] = static_cast<float>(mx + std::log(sum));
  }
}

void ReferenceAttentionBackward(const float* q, const float* k, const float* v,
                                const float* out, const float* dout,
                                const float* lse, int nq, int nk, int dh,
                                const int64_t* q_pos, const int64_t* k_pos,
                                bool causal, float scale, float* dq, float* dk,
                                float* dv) {
  for (int i = 0; i < nq; ++i) {
    if (lse[i] == -std::numeric_limits<float>::infinity()) continue;
    const float* qi = q + int64_t{i} * dh;
    const float* gi = dout + int64_t{i} * dh;
    const double d = Dot(gi, out + int64_t{i} * dh, dh);
    for (int j = 0; j < nk; ++j) {
      if (!Visible(causal, q_pos, k_pos, i, j)) continue;
      const float* kj = k + int64_t{j} * dh;
      const double p = std::exp(scale * Dot(qi, kj, dh) - lse[i]);
      const double dp = Dot(gi, v + int64_t{j} * dh, dh);
      const double ds = p * (dp - d) * scale;
      for (int c = 0; c < dh; ++c) {
        dv[int64_t{j} * dh + c] += static_cast<float>(p * gi[c]);
        dq[int64_t{i} * dh + c] += static_cast<float>(ds * kj[c]);
        dk[int64_t{j} * dh + c] += static_cast<float>(ds * qi[c]);
      }
    }
  }
}

}  // namespace fcp::kernels
