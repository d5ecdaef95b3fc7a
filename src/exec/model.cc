#include "exec/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "fcp/check.h"
#include "kernels/gemm.h"

namespace fcp::exec {
namespace {

using Vec = std::vector<float>;

// y[m,n] = a[m,k] · b[k,n] (+ y when accumulate).
void MatMul(const float* a, const float* b, int m, int n, int k, float* y,
            bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(y, y + static_cast<size_t>(m) * n, 0.0f);
    return;
  }
  kernels::Gemm(false, false, m, n, k, 1.0f, a, k, b, n,
                accumulate ? 1.0f : 0.0f, y, n);
}
// dx[m,k] (+)= dy[m,n] · W[k,n]^T.
void MatMulBt(const float* dy, const float* w, int m, int n, int k, float* dx,
              bool accumulate) {
  if (m == 0 || k == 0) return;
  kernels::Gemm(false, true, m, k, n, 1.0f, dy, n, w, n,
                accumulate ? 1.0f : 0.0f, dx, k);
}
// dW[k,n] += x[m,k]^T · dy[m,n].
void AccumWeightGrad(const float* x, const float* dy, int m, int n, int k,
                     float* dw) {
  if (m == 0 || n == 0 || k == 0) return;
  kernels::Gemm(true, false, k, n, m, 1.0f, x, k, dy, n, 1.0f, dw, n);
}

void RmsNormForward(const float* x, const float* g, int T, int D, float eps,
                    float* y, float* r) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<size_t>(t) * D;
    double ss = 0;
    for (int i = 0; i < D; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / D) + eps);
    r[t] = inv;
    float* yr = y + static_cast<size_t>(t) * D;
    for (int i = 0; i < D; ++i) yr[i] = xr[i] * inv * g[i];
  }
}
// dx += d/dx given dy; dg += d/dg.
void RmsNormBackward(const float* x, const float* g, const float* r,
                     const float* dy, int T, int D, float* dx, float* dg) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<size_t>(t) * D;
    const float* dyr = dy + static_cast<size_t>(t) * D;
    float* dxr = dx + static_cast<size_t>(t) * D;
    const float inv = r[t];
    double dot = 0;
    for (int i = 0; i < D; ++i) {
      dot += static_cast<double>(g[i]) * dyr[i] * xr[i];
      if (dg) dg[i] += dyr[i] * xr[i] * inv;
    }
    const float c = static_cast<float>(dot) * inv * inv * inv / D;
    for (int i = 0; i < D; ++i) dxr[i] += inv * g[i] * dyr[i] - xr[i] * c;
  }
}

// Rotates pairs (2i, 2i+1) of every head of x[T, D] by pos·base^(-2i/dh);
// sign = -1 applies the inverse rotation (the backward).
void Rope(float* x, const int64_t* pos, int T, int H, int dh, float base,
          float sign) {
  const int half = dh / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(base), -2.0 * i / dh);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos[t]) * inv_freq[i];
      const float c = static_cast<float>(std::cos(angle));
      const float s = sign * static_cast<float>(std::sin(angle));
      for (int h = 0; h < H; ++h) {
        float* p = x + static_cast<size_t>(t) * H * dh + h * dh + 2 * i;
        const float a = p[0], b = p[1];
        p[0] = a * c - b * s;
        p[1] = a * s + b * c;
      }
    }
  }
}

// [T, H·dh] <-> [H][T][dh].
void ToHeads(const float* x, int T, int H, int dh, float* y) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      std::memcpy(y + (static_cast<size_t>(h) * T + t) * dh,
                  x + (static_cast<size_t>(t) * H + h) * dh,
                  dh * sizeof(float));
}
void FromHeads(const float* y, int T, int H, int dh, float* x) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      std::memcpy(x + (static_cast<size_t>(t) * H + h) * dh,
                  y + (static_cast<size_t>(h) * T + t) * dh,
                  dh * sizeof(float));
}

float Sigmoid(float u) { return 1.0f / (1.0f + std::exp(-u)); }

struct LayerActs {
  Vec x_in, h1, r1, qh, kh, vh, oh, lse, o, x_mid, h2, r2, u, z;
};

}  // namespace

std::optional<std::string> ValidateModelConfig(const ModelConfig& cfg) {
  if (cfg.vocab != 256) return "model.vocab: must be 256 (byte-level)";
  if (cfg.dim < 2) return "model.dim: must be >= 2";
  if (cfg.heads < 1) return "model.heads: must be >= 1";
  if (cfg.dim % cfg.heads != 0) return "model.heads: must divide model.dim";
  if ((cfg.dim / cfg.heads) % 2 != 0)
    return "model.heads: head_dim = dim/heads must be even (RoPE)";
  if (cfg.layers < 1) return "model.layers: must be >= 1";
  if (cfg.ffn < 1) return "model.ffn: must be >= 1";
  if (!(cfg.rope_base > 1.0f)) return "model.rope_base: must be > 1";
  if (!(cfg.norm_eps > 0.0f)) return "model.norm_eps: must be > 0";
  return std::nullopt;
}

ParamLayout MakeParamLayout(const ModelConfig& cfg) {
  ParamLayout p;
  size_t off = 0;
  auto take = [&](size_t n) {
    const size_t at = off;
    off += n;
    return at;
  };
  const size_t D = cfg.dim, F = cfg.ffn, V = cfg.vocab;
  p.embed = take(V * D);
  for (int l = 0; l < cfg.layers; ++l) {
    LayerParams lp;
    lp.g1 = take(D);
    lp.wq = take(D * D);
    lp.wk = take(D * D);
    lp.wv = take(D * D);
    lp.wo = take(D * D);
    lp.g2 = take(D);
    lp.w1 = take(D * F);
    lp.w2 = take(F * D);
    p.norm_gains.push_back(lp.g1);
    p.norm_gains.push_back(lp.g2);
    p.layers.push_back(lp);
  }
  p.gf = take(D);
  p.norm_gains.push_back(p.gf);
  p.wout = take(D * V);
  p.total = off;
  return p;
}

std::vector<float> InitParams(const ModelConfig& cfg, uint64_t seed) {
  const ParamLayout p = MakeParamLayout(cfg);
  std::vector<float> w(p.total);
  std::mt19937_64 rng(seed);
  // Box-Muller on 53-bit uniforms: identical on every rank and platform.
  auto normal = [&]() {
    const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  for (float& x : w) x = static_cast<float>(0.02 * normal());
  const float resid = 1.0f / std::sqrt(2.0f * cfg.layers);
  const size_t D = cfg.dim, F = cfg.ffn;
  for (const auto& lp : p.layers) {
    for (size_t i = 0; i < D * D; ++i) w[lp.wo + i] *= resid;
    for (size_t i = 0; i < F * D; ++i) w[lp.w2 + i] *= resid;
  }
  for (size_t g : p.norm_gains)
    std::fill(w.begin() + g, w.begin() + g + D, 1.0f);
  return w;
}

ShardBatch MakeShardBatch(const ShardLayout& layout,
                          const std::vector<std::vector<uint8_t>>& sequences) {
  ShardBatch b;
  for (const SeqShard& s : layout.seqs) {
    FCP_CHECK(s.seq >= 0 && s.seq < static_cast<int>(sequences.size()));
    const auto& bytes = sequences[s.seq];
    FCP_CHECK(static_cast<int64_t>(bytes.size()) == s.seq_len);
    for (int64_t p : s.pos) {
      b.tokens.push_back(bytes[p]);
      const bool has_target = p + 1 < s.seq_len;
      b.targets.push_back(has_target ? bytes[p + 1] : -1);
      b.num_targets += has_target;
      b.pos.push_back(p);
    }
  }
  FCP_CHECK(static_cast<int64_t>(b.tokens.size()) == layout.num_tokens);
  return b;
}

// Long because: the forward and its hand-written backward mirror each other
// line by line and share the saved activations.
double ForwardBackward(const ModelConfig& cfg, const ParamLayout& lay,
                       const float* w, const ShardBatch& batch,
                       const RingAttentionArgs& attn_in, float loss_scale,
                       float* grads) {
  const int T = static_cast<int>(batch.tokens.size());
  const int D = cfg.dim, H = cfg.heads, dh = D / H, F = cfg.ffn, V = cfg.vocab;
  const size_t TD = static_cast<size_t>(T) * D;
  RingAttentionArgs attn = attn_in;
  attn.heads = H;
  attn.head_dim = dh;

  // ---- forward ----
  Vec x(TD);
  for (int t = 0; t < T; ++t)
    std::memcpy(&x[static_cast<size_t>(t) * D],
                w + lay.embed + static_cast<size_t>(batch.tokens[t]) * D,
                D * sizeof(float));
  std::vector<LayerActs> acts(cfg.layers);
  Vec q(TD), k(TD), v(TD);
  for (int l = 0; l < cfg.layers; ++l) {
    const LayerParams& P = lay.layers[l];
    LayerActs& A = acts[l];
    A.x_in = x;
    A.h1.resize(TD);
    A.r1.resize(T);
    RmsNormForward(x.data(), w + P.g1, T, D, cfg.norm_eps, A.h1.data(),
                   A.r1.data());
    MatMul(A.h1.data(), w + P.wq, T, D, D, q.data(), false);
    MatMul(A.h1.data(), w + P.wk, T, D, D, k.data(), false);
    MatMul(A.h1.data(), w + P.wv, T, D, D, v.data(), false);
    Rope(q.data(), batch.pos.data(), T, H, dh, cfg.rope_base, 1.0f);
    Rope(k.data(), batch.pos.data(), T, H, dh, cfg.rope_base, 1.0f);
    A.qh.resize(TD);
    A.kh.resize(TD);
    A.vh.resize(TD);
    A.oh.resize(TD);
    A.lse.resize(static_cast<size_t>(H) * T);
    ToHeads(q.data(), T, H, dh, A.qh.data());
    ToHeads(k.data(), T, H, dh, A.kh.data());
    ToHeads(v.data(), T, H, dh, A.vh.data());
    GroupAttentionForward(attn, A.qh.data(), A.kh.data(), A.vh.data(),
                          A.oh.data(), A.lse.data());
    A.o.resize(TD);
    FromHeads(A.oh.data(), T, H, dh, A.o.data());
    MatMul(A.o.data(), w + P.wo, T, D, D, x.data(), true);
    A.x_mid = x;
    A.h2.resize(TD);
    A.r2.resize(T);
    RmsNormForward(x.data(), w + P.g2, T, D, cfg.norm_eps, A.h2.data(),
                   A.r2.data());
    A.u.resize(static_cast<size_t>(T) * F);
    A.z.resize(static_cast<size_t>(T) * F);
    MatMul(A.h2.data(), w + P.w1, T, F, D, A.u.data(), false);
    for (size_t i = 0; i < A.u.size(); ++i) A.z[i] = A.u[i] * Sigmoid(A.u[i]);
    MatMul(A.z.data(), w + P.w2, T, D, F, x.data(), true);
  }
  Vec hf(TD), rf(T);
  RmsNormForward(x.data(), w + lay.gf, T, D, cfg.norm_eps, hf.data(),
                 rf.data());
  Vec logits(static_cast<size_t>(T) * V);
  MatMul(hf.data(), w + lay.wout, T, V, D, logits.data(), false);
  double loss = 0;
  for (int t = 0; t < T; ++t) {
    float* row = &logits[static_cast<size_t>(t) * V];
    const int target = batch.targets[t];
    if (target < 0) {
      std::fill(row, row + V, 0.0f);  // becomes dlogits = 0
      continue;
    }
    const float mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int i = 0; i < V; ++i)
      sum += std::exp(static_cast<double>(row[i] - mx));
    const double lse = mx + std::log(sum);
    loss += lse - row[target];
    for (int i = 0; i < V; ++i)
      row[i] = static_cast<float>(std::exp(row[i] - lse)) * loss_scale;
    row[target] -= loss_scale;
  }
  if (!grads) {
    // Still collective: nothing else to exchange in the forward-only path.
    return loss;
  }

  // ---- backward ---- (logits now holds dlogits)
  const Vec& dlogits = logits;
  Vec dhf(TD);
  MatMulBt(dlogits.data(), w + lay.wout, T, V, D, dhf.data(), false);
  AccumWeightGrad(hf.data(), dlogits.data(), T, V, D, grads + lay.wout);
  Vec dx(TD, 0.0f);
  RmsNormBackward(x.data(), w + lay.gf, rf.data(), dhf.data(), T, D, dx.data(),
                  grads + lay.gf);
  Vec dz(static_cast<size_t>(T) * F), dnorm(TD), dqh(TD), dkh(TD), dvh(TD),
      doh(TD), dtmp(TD);
  for (int l = cfg.layers - 1; l >= 0; --l) {
    const LayerParams& P = lay.layers[l];
    const LayerActs& A = acts[l];
    // MLP: x_out = x_mid + SiLU(h2 W1) W2.
    MatMulBt(dx.data(), w + P.w2, T, D, F, dz.data(), false);
    AccumWeightGrad(A.z.data(), dx.data(), T, D, F, grads + P.w2);
    for (size_t i = 0; i < dz.size(); ++i) {
      const float s = Sigmoid(A.u[i]);
      dz[i] *= s * (1.0f + A.u[i] * (1.0f - s));
    }
    MatMulBt(dz.data(), w + P.w1, T, F, D, dnorm.data(), false);
    AccumWeightGrad(A.h2.data(), dz.data(), T, F, D, grads + P.w1);
    RmsNormBackward(A.x_mid.data(), w + P.g2, A.r2.data(), dnorm.data(), T, D,
                    dx.data(), grads + P.g2);
    // Attention: x_mid = x_in + O Wo.
    MatMulBt(dx.data(), w + P.wo, T, D, D, dtmp.data(), false);
    AccumWeightGrad(A.o.data(), dx.data(), T, D, D, grads + P.wo);
    ToHeads(dtmp.data(), T, H, dh, doh.data());
    GroupAttentionBackward(attn, A.qh.data(), A.kh.data(), A.vh.data(),
                           A.oh.data(), A.lse.data(), doh.data(), dqh.data(),
                           dkh.data(), dvh.data());
    // dq, dk back to [T, D], undo RoPE, then through the projections.
    Vec dq(TD), dk(TD), dv(TD);
    FromHeads(dqh.data(), T, H, dh, dq.data());
    FromHeads(dkh.data(), T, H, dh, dk.data());
    FromHeads(dvh.data(), T, H, dh, dv.data());
    Rope(dq.data(), batch.pos.data(), T, H, dh, cfg.rope_base, -1.0f);
    Rope(dk.data(), batch.pos.data(), T, H, dh, cfg.rope_base, -1.0f);
    MatMulBt(dq.data(), w + P.wq, T, D, D, dnorm.data(), false);
    MatMulBt(dk.data(), w + P.wk, T, D, D, dnorm.data(), true);
    MatMulBt(dv.data(), w + P.wv, T, D, D, dnorm.data(), true);
    AccumWeightGrad(A.h1.data(), dq.data(), T, D, D, grads + P.wq);
    AccumWeightGrad(A.h1.data(), dk.data(), T, D, D, grads + P.wk);
    AccumWeightGrad(A.h1.data(), dv.data(), T, D, D, grads + P.wv);
    RmsNormBackward(A.x_in.data(), w + P.g1, A.r1.data(), dnorm.data(), T, D,
                    dx.data(), grads + P.g1);
  }
  for (int t = 0; t < T; ++t) {
    float* g = grads + lay.embed + static_cast<size_t>(batch.tokens[t]) * D;
    const float* d = &dx[static_cast<size_t>(t) * D];
    for (int i = 0; i < D; ++i) g[i] += d[i];
  }
  return loss;
}

AdamW::AdamW(const ParamLayout& layout, AdamWOptions options)
    : opt_(options),
      m_(layout.total, 0.0f),
      v_(layout.total, 0.0f),
      decay_(layout.total, 1) {
  const size_t D = layout.total == 0 ? 0 : (layout.wout - layout.gf);
  for (size_t g : layout.norm_gains)
    std::fill(decay_.begin() + g, decay_.begin() + g + D, 0);
}

void AdamW::Step(float* params, const float* grads) {
  ++step_;
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(step_));
  const float lr1 = static_cast<float>(opt_.lr / bc1);
  const float inv_bc2 = static_cast<float>(1.0 / bc2);
  for (size_t i = 0; i < m_.size(); ++i) {
    const float g = grads[i];
    m_[i] = opt_.beta1 * m_[i] + (1.0f - opt_.beta1) * g;
    v_[i] = opt_.beta2 * v_[i] + (1.0f - opt_.beta2) * g * g;
    if (decay_[i]) params[i] -= opt_.lr * opt_.weight_decay * params[i];
    params[i] -= lr1 * m_[i] / (std::sqrt(v_[i] * inv_bc2) + opt_.eps);
  }
}

}  // namespace fcp::exec
