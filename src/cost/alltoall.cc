// Ulysses (DeepSpeed-Ulysses / FlexSP) all-to-all group time.
//
// Derivation. A Ulysses group of degree d holds every sequence sharded along
// the sequence dimension (s/d tokens per rank). Around attention it re-shards
// with all-to-alls: before attention Q, K and V go from sequence-sharded to
// head-sharded (dq + 2*dkv values per token, dq = q_heads*head_dim,
// dkv = kv_heads*head_dim), after attention the output O goes back (dq values).
// One pass therefore moves 2*(dq + dkv) values per token per layer. With the
// recompute policy the presets assume (src/presets/presets.cc: full activation
// recompute), a training step has three such passes: forward, recompute
// forward, and backward (dO in, dQ/dK/dV out: again 2*(dq + dkv) values).
// In bf16 that is 3 * L * 2*(dq + dkv) * 2 bytes per token.
//
// The ring coefficient alpha3 (docs/design.md §2, presets.cc) is 4 passes of K/V:
// alpha3 = 4 * L * 2*dkv * 2 bytes per token. Hence the all-to-all volume per
// token is rho * alpha3 with
//     rho = 12 L (dq + dkv) / (16 L dkv) = 0.75 * (q_heads + kv_heads) / kv_heads,
// which keeps the formula in terms of the same fitted/derived coefficient.
//
// In an all-to-all every rank keeps 1/d of its local data and sends the other
// (d-1)/d, so the bytes a rank injects are
//     rho * alpha3 * (Σ s / d) * (d - 1) / d,
// i.e. a factor d smaller than ring attention's alpha3 * Σ s * (d-1)/d (which
// moves every KV block d-1 hops). Time = bytes / v + beta2, with v the same
// placement-dependent per-rank bandwidth as the ring formula.
//
// Unlike ring attention, the all-to-all is a data dependency of the attention
// kernel (and of the next projection), so it is not overlapped with compute:
//     T_a2a(G, d) = A + Lin + beta1 + Tcm_a2a,   Tcm_a2a = 0 when d == 1.
// Memory is the same mem(G, d) as the ring model (activations are sharded
// the same way outside attention).
//
// Fallback: when the head counts are unknown (shape.q_heads <= 0 or
// shape.kv_heads <= 0) we assume q_heads / kv_heads = 4 (the GQA ratio of
// qwen3-4b/8b and llama3-8b), i.e. rho = 3.75.
// Head padding (d not dividing q_heads, or d > q_heads) scales the attention
// and the all-to-all volume by ceil(q_heads/d)·d/q_heads.
// Not modelled: K/V head replication when d > kv_heads (extra volume), and
// all-to-all algorithmic inefficiency beyond beta2.
//
// Since the presets' alpha3 counts the ring's real traffic (5.25 K/V units:
// backward moves K, V with fp32 dK, dV, plus the home hop; presets.cc), rho ·
// alpha3 is 31 % above the bytes derived here. Kept: against the simulator
// that surplus stands in for what is not modelled (each all-to-all's
// 1 + log2(d) latencies, K/V replication): the estimate's mean signed error
// is -0.03 to -1.8 % (qwen3-8b, qwen3-1.7b, llama3.2-1b; both clusters;
// 4k-128k tokens, d = 2..32 dividing q_heads; max |error| 4.9-22.6 %), against
// -1.3 to -3.7 % (max 6.8-26.9 %) with rho rescaled to the 5.25 units. With
// head padding, over d = 2..64 (any d): -2.0 to +0.4 %, max 4.9-22.6 %.
#include <algorithm>
#include <cmath>

#include "fcp/cost_model.h"

namespace fcp {

double AllToAllGroupTimeS(const CostModel& cm, const ModelShape& shape,
                          const GroupLoad& load, int degree,
                          double bw_bytes_per_s) {
  const double d = degree;
  // Head padding: a rank holds ceil(q_heads/d) heads, so when d does not
  // divide q_heads (or exceeds it) each rank computes and moves `pad` times its
  // 1/d share (pad = ceil(q_heads/d)·d/q_heads >= 1; 1 for divisors).
  double pad = 1;
  if (shape.q_heads > 0) {
    const double q = shape.q_heads;
    pad = std::ceil(q / d) * d / q;
  }
  // Ulysses runs attention on whole sequences (1/d of the heads each), so the
  // v2 short-chunk overhead h applies to full lengths and shrinks with d.
  const double attn = pad * cm.alpha1 *
                      (load.sum_attn + cm.attn_overhead_tokens * load.sum_attn_tokens) / d;
  const double lin = cm.alpha2 * load.sum_tokens / d;
  const double t_cp = attn + lin + cm.beta1;
  if (degree <= 1) return t_cp;
  double rho = 3.75;
  if (shape.q_heads > 0 && shape.kv_heads > 0) {
    rho = 0.75 * (static_cast<double>(shape.q_heads) + shape.kv_heads) /
          static_cast<double>(shape.kv_heads);
  }
  const double bytes_per_rank =
      pad * rho * cm.alpha3 * (load.sum_tokens / d) * (d - 1) / d;
  return t_cp + bytes_per_rank / bw_bytes_per_s + cm.beta2;
}

}  // namespace fcp
