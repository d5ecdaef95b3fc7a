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
// The ring coefficient alpha3 (docs/design.md §2, presets.cc) is 4 passes of
// K/V: alpha3 = 4 * L * 2*dkv * 2 bytes per token. Hence the all-to-all volume
// per token is rho * alpha3 with
//     rho = 12 L (dq + dkv) / (16 L dkv) = 0.75 * (q_heads + kv_heads) /
//     kv_heads,
// which keeps the formula in terms of the same fitted/derived coefficient.
//
// In an all-to-all every rank keeps 1/d of its local data and sends the other
// (d-1)/d, so the bytes a rank injects are
//     rho * alpha3 * (Σ s / d) * (d - 1) / d,
// i.e. a factor d smaller than ring attention's alpha3 * Σ s * (d-1)/d (which
// moves every KV block d-1 hops). Time = bytes / v + beta2, with v the
// placement's all-to-all bandwidth (AllToAllBandwidthOnRanks: on- and
// off-node peers served in parallel, as the simulator does).
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
// and the query volume by ceil(q_heads/d)·d/q_heads; once d exceeds the K/V
// heads each rank holds one replicated K/V head, so the K/V volume counts
// max(1, ceil(kv_heads/d))·d heads. Not modelled: each all-to-all's
// 1 + log2(d) latencies per layer.
//
// Since the presets' alpha3 counts the ring's real traffic (5.25 K/V units:
// backward moves K, V with fp32 dK, dV, plus the home hop; presets.cc), rho ·
// alpha3 is 31 % above the bytes derived here; kept, it stands in for the
// latencies. Against the simulator (src/cost/preset_fidelity_test.cc,
// AllToAllEstimateTracksTheSimulator: every preset, d = 2..64, chunks of
// >= 512 tokens, placements aligned and not aligned to nodes) the estimate's
// mean error is 0.8-4.2 %, max 6.4-19.9 %.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fcp/cost_model.h"

namespace fcp {

namespace {

// Time per byte a rank sends to each peer when `on_node` of the group's
// `degree` ranks (itself included) share its node: both links at once.
double PerPeerByteS(const CostModel& cm, int degree, int64_t on_node) {
  const double same = static_cast<double>(on_node - 1);
  return std::max(same / cm.bw_intra_node,
                  (degree - static_cast<double>(on_node)) / cm.bw_inter_node);
}

}  // namespace

double AllToAllBandwidthOnRanks(const CostModel& cm, const Cluster& cluster,
                                std::span<const int> ranks) {
  const int d = static_cast<int>(ranks.size());
  if (d <= 1) return cm.bw_intra_node;
  std::vector<int> nodes;
  nodes.reserve(ranks.size());
  for (int r : ranks) nodes.push_back(r / cluster.ranks_per_node);
  std::sort(nodes.begin(), nodes.end());
  double slowest = 0;  // the group finishes with its slowest rank
  for (size_t i = 0; i < nodes.size();) {
    size_t j = i;
    while (j < nodes.size() && nodes[j] == nodes[i]) ++j;
    slowest =
        std::max(slowest, PerPeerByteS(cm, d, static_cast<int64_t>(j - i)));
    i = j;
  }
  return (d - 1) / slowest;
}

double AllToAllBandwidthOnRange(const CostModel& cm, const Cluster& cluster,
                                int first, int degree) {
  if (degree <= 1) return cm.bw_intra_node;
  const int64_t r = cluster.ranks_per_node;
  const int64_t last = static_cast<int64_t>(first) + degree - 1;
  if (first / r == last / r)
    return (degree - 1) / PerPeerByteS(cm, degree, degree);
  double slowest = std::max(PerPeerByteS(cm, degree, r - first % r),
                            PerPeerByteS(cm, degree, last % r + 1));
  if (last / r - first / r >= 2)
    slowest = std::max(slowest, PerPeerByteS(cm, degree, r));
  return (degree - 1) / slowest;
}

double AllToAllBandwidthBound(const CostModel& cm, const Cluster& cluster,
                              int degree) {
  if (degree <= 1) return cm.bw_intra_node;
  // Every placement has a rank with some count c <= min(d, R) on its node,
  // and the slowest rank is no faster than it.
  // PerPeerByteS is the max of a part rising in c and one falling in c, so
  // over c in [1, most] its minimum is at an end or next to where the parts
  // cross: O(1) per degree (a scan over c made LowerBoundMs O(N·R), issue 30).
  const int64_t most = std::min<int64_t>(degree, cluster.ranks_per_node);
  double fastest =
      std::min(PerPeerByteS(cm, degree, 1), PerPeerByteS(cm, degree, most));
  const double cross = (degree / cm.bw_inter_node + 1 / cm.bw_intra_node) /
                       (1 / cm.bw_intra_node + 1 / cm.bw_inter_node);
  if (std::isfinite(cross)) {
    const auto at =
        static_cast<int64_t>(std::floor(std::clamp(cross, 1.0, double(most))));
    for (int64_t c = std::max<int64_t>(1, at - 1); c <= std::min(most, at + 2);
         ++c)
      fastest = std::min(fastest, PerPeerByteS(cm, degree, c));
  } else {  // degenerate bandwidths: the plain scan
    for (int64_t c = 2; c < most; ++c)
      fastest = std::min(fastest, PerPeerByteS(cm, degree, c));
  }
  return (degree - 1) / fastest;
}

AllToAllFactors AllToAllFactorsFor(const ModelShape& shape, int degree) {
  const double d = degree;
  AllToAllFactors f;
  // Head padding: a rank holds ceil(q_heads/d) heads, so when d does not
  // divide q_heads (or exceeds it) each rank computes and moves `pad` times its
  // 1/d share (pad = ceil(q_heads/d)·d/q_heads >= 1; 1 for divisors).
  if (shape.q_heads > 0) {
    const double q = shape.q_heads;
    f.pad = std::ceil(q / d) * d / q;
  }
  // Volume per token relative to alpha3 with the head counts each rank really
  // holds: ceil(q/d) query heads and, once d exceeds the K/V heads, one
  // replicated K/V head (not 1/d of one) per rank.
  f.rho = 3.75 * f.pad;
  if (shape.q_heads > 0 && shape.kv_heads > 0) {
    const double kv = shape.kv_heads;
    const double kv_held = std::max(1.0, std::ceil(kv / d)) * d;
    f.rho = 0.75 * (f.pad * shape.q_heads + kv_held) / kv;
  }
  return f;
}

GroupTimeParts AllToAllGroupTimePartsS(const CostModel& cm,
                                       const ModelShape& shape,
                                       const GroupLoad& load, int degree,
                                       double bw_bytes_per_s) {
  return AllToAllGroupTimePartsS(cm, AllToAllFactorsFor(shape, degree), load,
                                 degree, bw_bytes_per_s);
}

GroupTimeParts AllToAllGroupTimePartsS(const CostModel& cm,
                                       const AllToAllFactors& f,
                                       const GroupLoad& load, int degree,
                                       double bw_bytes_per_s) {
  const double d = degree;
  GroupTimeParts p;
  // Ulysses runs attention on whole sequences (1/d of the heads each), so the
  // v2 short-chunk overhead h applies to full lengths and shrinks with d.
  p.attn_s = f.pad * cm.alpha1 *
             (load.sum_attn + cm.attn_overhead_tokens * load.sum_attn_tokens) /
             d;
  p.compute_s = p.attn_s + LinearS(cm, load, d) + cm.beta1;
  p.total_s = p.compute_s;
  if (degree <= 1) return p;
  const double bytes_per_rank =
      f.rho * cm.alpha3 * (load.sum_tokens / d) * (d - 1) / d;
  p.comm_s = bytes_per_rank / bw_bytes_per_s + cm.beta2;
  // Not overlapped (see above); summed in this order for bit-identical plans.
  p.total_s = p.compute_s + bytes_per_rank / bw_bytes_per_s + cm.beta2;
  return p;
}

double AllToAllGroupTimeS(const CostModel& cm, const ModelShape& shape,
                          const GroupLoad& load, int degree,
                          double bw_bytes_per_s) {
  return AllToAllGroupTimePartsS(cm, shape, load, degree, bw_bytes_per_s)
      .total_s;
}

}  // namespace fcp
