// The hardware simulator (docs/design.md §5). See include/fcp/simulator.h for
// the contract and docs/simulator.md for the model in prose.
//
// Per group of d ranks holding sequences s_k (all ranks symmetric). P = the
// recompute policy's passes: forward-equivalent passes of the linear layers
// and elementwise ops (full 4: forward, recompute, backward 2×; selective and
// none 3) and attention forwards (full and selective 2, none 1).
//  * Zigzag: each sequence is cut into 2d chunks (ring) or d chunks (Ulysses),
//    padded up to a multiple; a rank holds c_k tokens of sequence k, m = Σ c_k.
//  * Linear layers: 2·m·LayerParams FLOPs per layer forward, at
//    GemmEfficiency(m), P passes. LM head 2·m·h·V forward, not recomputed: 3×.
//  * Elementwise (norms, RoPE, SwiGLU, residuals): 2·(8h + 3f + 2dq + 2dkv)
//    bytes per token per layer per pass, HBM-bound.
//  * Attention forward FLOPs 4·dq per visible pair, (1 + eta)·s²/2 pairs;
//    backward 2.5× forward FLOPs. Forward at AttentionForwardEfficiency,
//    backward at AttentionBackwardEfficiency (each its own curve; a causal
//    block is slower by CausalSlowdown of its length).
//    d = 1: one kernel per sequence of length s.
//    Ring: d steps per layer and pass; each step computes 1/d² of every
//    sequence's pairs (zigzag balances the causal mask exactly): the first
//    (diagonal) step a causal block of c_k tokens, the others unmasked blocks
//    of c_k tokens, while the next KV block (Σ c_k · 2·dkv bf16) travels one
//    hop; a step takes max(compute, transfer + latency); the last step has
//    nothing to wait for. Backward sends KV (bf16) + dKV (fp32) per hop (3×
//    bytes) and one final dKV hop home. Intra-node link only if all ranks
//    share a node.
//    Ulysses: all-to-all of Q, K, V in and O out per forward (backward: dO in,
//    dQ dK dV out); a rank computes the full sequence for ceil(q_heads/d)
//    heads (head padding when d does not divide the heads); KV heads are
//    replicated when d > kv_heads. Not overlapped with compute. Traffic to
//    same-node peers uses the intra-node link, to other nodes the inter-node
//    link (both concurrently).
//  * Launches: kernels_per_layer_pass per layer and pass (full 3 passes,
//    otherwise 2), + 2 per ring step forward, 3 backward, + 2 per all-to-all.
//  * Vision encoder (MLLMs): patches = vision tokens × patches_per_token,
//    split over the d ranks; 2·12·vh² FLOPs per patch per layer plus full
//    attention inside each tile; frozen: forward only; unfrozen: forward +
//    recompute + backward (4×); the projector always trains (3×).
//  * Memory per rank: bf16 weights + bf16 grads (4 B/param; frozen vision
//    encoder weights only 2 B/param), fp32 master + Adam moments (12 B/param)
//    sharded over all N ranks, framework_reserve_bytes, plus activations per
//    token: one layer's working set W = 2·(4h + 2dq + 2dkv + 4f) bytes; full
//    recompute keeps a 2·h checkpoint per layer and one layer's W, selective
//    and none keep W for every layer (with flash attention there is no s²
//    term for selective recompute to save); plus the ring receive buffer
//    2·dkv·2 bytes per token (Ulysses: all-to-all output buffer
//    (dq + 2dkv)·2 bytes per token), and for the vision encoder, run over
//    chunks of 16 tiles and recomputed from pixels in the backward: the pixel
//    patches (3·14² uint8 each) plus one chunk's layer working set (16·vh B
//    per patch) and, unfrozen, its checkpoints (2·vl·vh B per patch).
//  * Per global batch: reduce-scatter of bf16 gradients + all-gather of bf16
//    weights over all N ranks (2 B · P · (N-1)/N bytes each per rank, ring
//    latency (N-1) messages each) and the Adam step over P/N parameters
//    (HBM-bound). With overlap (Megatron --overlap-grad-reduce), both are cut
//    into buckets of max(40M, 1M·N) parameters (megatron-core
//    DistributedDataParallel): on each rank the all-gather hides behind the
//    forward of its first group and the reduce-scatter behind the backward of
//    its last one (an idle rank hides neither); one bucket of each is always
//    exposed, and the step ends with the latest rank.
#include "fcp/simulator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include "fcp/cost_model.h"
#include "fcp/datasets.h"

namespace fcp::sim {
namespace {

constexpr double kBf16 = 2.0;
constexpr double kFp32 = 4.0;
constexpr double kAttnBackwardFactor =
    2.5;  // backward FLOPs / forward (5 vs 2 GEMMs)
constexpr double kMaxEfficiency = 0.95;
constexpr double kMaxCausalSlowdown = 2.0;  // a causal block does half the work
constexpr double kVisionChunkTiles = 16;
// megatron-core DistributedDataParallel: bucket_size = max(40M, 1M · dp)
// params.
constexpr double kMinBucketParams = 40e6;
constexpr double kBucketParamsPerRank = 1e6;

double Dq(const ModelShape& s) {
  return static_cast<double>(s.q_heads) * s.head_dim;
}
double Dkv(const ModelShape& s) {
  return static_cast<double>(s.kv_heads) * s.head_dim;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Passes of the recompute policy (file comment).
struct Passes {
  double linear =
      4;  // forward-equivalent passes of linear layers / elementwise
  double attn_fwd = 2;  // attention forwards
  double kernel = 3;    // passes of a layer's kernel launches
};

Passes PassesOf(const HardwareModel& hw) {
  Passes p;
  switch (hw.recompute) {
    case Recompute::kFull:
      p = {4, 2, 3};
      break;
    case Recompute::kSelective:
      p = {3, 2, 2};
      break;
    case Recompute::kNone:
      p = {3, 1, 2};
      break;
  }
  if (hw.linear_recompute_fraction >= 0)
    p.linear = 3.0 + std::min(1.0, hw.linear_recompute_fraction);
  return p;
}

double Hyperbolic(double max, double half, double n) {
  if (n <= 0) return max * 1e-3;
  return std::min(kMaxEfficiency, max * n / (n + half));
}

// Efficiency of a block with mask factor eta: causal (eta 0) runs slower than
// unmasked by `slowdown`; full (eta 1) not at all; block masks in between
// (e.g. full attention inside video frames) interpolate linearly.
double MixedEfficiency(double unmasked_eff, double slowdown, double eta) {
  eta = std::clamp(eta, 0.0, 1.0);
  return unmasked_eff / (1.0 + (slowdown - 1.0) * (1.0 - eta));
}

// Bytes of one layer's activations per token that a backward needs.
double LayerWorkingSetBytes(const ModelShape& s) {
  const double h = s.hidden, f = s.ffn;
  return kBf16 * (4.0 * h + 2.0 * Dq(s) + 2.0 * Dkv(s) + 4.0 * f);
}

// Activation bytes per token kept by the recompute policy (backbone only).
double ActivationBytesPerToken(const HardwareModel& hw) {
  const ModelShape& s = hw.shape;
  if (hw.recompute == Recompute::kFull)
    return kBf16 * s.layers * s.hidden + LayerWorkingSetBytes(s);
  return s.layers * LayerWorkingSetBytes(s);
}

// Placement facts of a rank list.
struct Placement {
  bool one_node = true;
  int same_node_peers = 0;   // of rank ranks[0]'s node, excluding itself
  int other_node_peers = 0;  // peers on other nodes (max over ranks)
};

// The worst rank is one on the node holding fewest of the group's ranks.
Placement Place(const HardwareModel& hw, std::span<const int> ranks) {
  const int r_per_node = std::max(1, hw.ranks_per_node);
  const int d = static_cast<int>(ranks.size());
  std::vector<int> nodes(ranks.begin(), ranks.end());
  for (int& r : nodes) r /= r_per_node;
  std::sort(nodes.begin(), nodes.end());
  int fewest = d;  // ranks of the group on its emptiest node
  for (size_t i = 0; i < nodes.size();) {
    const size_t j = static_cast<size_t>(
        std::upper_bound(nodes.begin() + i, nodes.end(), nodes[i]) -
        nodes.begin());
    fewest = std::min(fewest, static_cast<int>(j - i));
    i = j;
  }
  Placement p;
  p.one_node = fewest == d;
  p.other_node_peers = d - fewest;
  p.same_node_peers = fewest - 1;
  return p;
}

// All-to-all time for `bytes` sent by each rank, spread evenly over d-1 peers.
double AllToAllS(const HardwareModel& hw, const Placement& p, int d,
                 double bytes) {
  if (d <= 1) return 0.0;
  const double per_peer = bytes / (d - 1);
  const double t_in = p.same_node_peers * per_peer / hw.bw_intra_node;
  const double t_out = p.other_node_peers * per_peer / hw.bw_inter_node;
  const double lat = p.one_node ? hw.latency_intra_s : hw.latency_inter_s;
  return std::max(t_in, t_out) +
         lat * (1.0 + std::ceil(std::log2(static_cast<double>(d))));
}

double TotalParamsForMemory(const HardwareModel& hw, double* vision_out) {
  const double v = hw.multimodal ? VisionParams(hw.shape) : 0.0;
  if (vision_out) *vision_out = v;
  return BackboneParams(hw.shape);
}

double StaticMemBytes(const HardwareModel& hw) {
  double vision = 0;
  const double backbone = TotalParamsForMemory(hw, &vision);
  const double n = std::max(1, hw.num_ranks);
  double bytes =
      4.0 * backbone + 12.0 * backbone / n + hw.framework_reserve_bytes;
  if (vision > 0) {
    bytes += hw.vision_frozen ? 2.0 * vision : 4.0 * vision + 12.0 * vision / n;
  }
  return bytes;
}

// The gradient sync of one global batch.
struct GradSync {
  double collective_s = 0;  // one of reduce-scatter / all-gather, whole
  double buckets = 1;
  double optimizer_s = 0;
};

GradSync GradSyncOf(const HardwareModel& hw) {
  GradSync g;
  const int n = hw.num_ranks;
  double vision = 0;
  double params = TotalParamsForMemory(hw, &vision);
  if (!hw.vision_frozen) params += vision;
  const bool one_node = n <= hw.ranks_per_node;
  const double bw = one_node ? hw.bw_intra_node : hw.bw_inter_node;
  const double lat = one_node ? hw.latency_intra_s : hw.latency_inter_s;
  if (n > 1)
    g.collective_s = kBf16 * params * (n - 1.0) / n / bw + (n - 1.0) * lat;
  g.buckets = std::max(
      1.0,
      std::ceil(params / std::max(kMinBucketParams, kBucketParamsPerRank * n)));
  g.optimizer_s =
      (12.0 + 12.0 + kBf16) * params / std::max(1, n) / hw.hbm_bytes_per_s;
  return g;
}

}  // namespace

GradientSync PlannerGradientSync(const HardwareModel& hw) {
  const GradSync gs = GradSyncOf(hw);
  GradientSync out;
  out.collective_s = gs.collective_s;
  out.buckets = static_cast<int>(gs.buckets);
  out.forward_share = hw.recompute == Recompute::kFull ? 0.25 : 1.0 / 3.0;
  return out;
}

namespace {

// Exposed part of a bucketed collective of `total_s` that may hide behind
// `window_s` of compute: at least its last bucket.
double ExposedBucketed(double total_s, double buckets, double window_s) {
  const double bucket = total_s / buckets;
  return bucket + std::max(0.0, total_s - bucket - window_s);
}

}  // namespace

Recompute ParseRecompute(std::string_view name) {
  if (name == "full") return Recompute::kFull;
  if (name == "selective") return Recompute::kSelective;
  if (name == "none") return Recompute::kNone;
  throw InputError("recompute", "expected full, selective or none, got '" +
                                    std::string(name.substr(0, 40)) + "'");
}

std::string_view RecomputeName(Recompute policy) {
  switch (policy) {
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kNone:
      return "none";
  }
  return "full";
}

double LayerGemmFlopsForward(const ModelShape& s, double tokens) {
  return 2.0 * tokens * LayerParams(s);
}

double LayerAttentionFlopsForward(const ModelShape& s, double len, double eta) {
  return 4.0 * Dq(s) * (1.0 + eta) * len * len / 2.0;
}

double CausalSlowdown(const HardwareModel& hw, double tokens) {
  if (tokens <= 0) return kMaxCausalSlowdown;
  return std::clamp(
      1.0 + hw.attn_causal_gain *
                std::pow(tokens / 512.0, -hw.attn_causal_exponent),
      1.0, kMaxCausalSlowdown);
}

double AttentionForwardEfficiency(const HardwareModel& hw, double tokens,
                                  double eta) {
  return MixedEfficiency(
      Hyperbolic(hw.attn_fwd_eff_max, hw.attn_fwd_half_tokens, tokens),
      CausalSlowdown(hw, tokens), eta);
}

double AttentionBackwardEfficiency(const HardwareModel& hw, double tokens,
                                   double eta) {
  return MixedEfficiency(
      Hyperbolic(hw.attn_bwd_eff_max, hw.attn_bwd_half_tokens, tokens),
      CausalSlowdown(hw, tokens), eta);
}

double GemmEfficiency(const HardwareModel& hw, double rows) {
  return Hyperbolic(hw.gemm_eff_max, hw.gemm_eff_half_tokens, rows);
}

HardwareModel MakeHardwareModel(const ModelPreset& model,
                                const ClusterPreset& cluster, int num_ranks) {
  if (num_ranks < 0) throw InputError("ranks", "must be >= 1");
  HardwareModel hw;
  hw.num_ranks = num_ranks > 0 ? num_ranks : cluster.num_ranks;
  hw.ranks_per_node =
      std::max(1, std::min(cluster.ranks_per_node, hw.num_ranks));
  hw.peak_flops = cluster.peak_flops;
  hw.mem_capacity_bytes = cluster.mem_bytes;
  hw.bw_intra_node = cluster.bw_intra_node;
  hw.bw_inter_node = cluster.bw_inter_node;
  hw.hbm_bytes_per_s = cluster.hbm_bytes_per_s;
  hw.latency_intra_s = cluster.latency_intra_s;
  hw.latency_inter_s = cluster.latency_inter_s;
  hw.launch_s = cluster.launch_s;
  hw.gemm_eff_max = cluster.gemm_eff_max;
  hw.gemm_eff_half_tokens = cluster.gemm_eff_half_rows;
  hw.attn_fwd_eff_max = cluster.attn_fwd_eff_max;
  hw.attn_fwd_half_tokens = cluster.attn_fwd_half_tokens;
  hw.attn_bwd_eff_max = cluster.attn_bwd_eff_max;
  hw.attn_bwd_half_tokens = cluster.attn_bwd_half_tokens;
  hw.attn_causal_gain = cluster.attn_causal_gain;
  hw.attn_causal_exponent = cluster.attn_causal_exponent;
  hw.shape = model.shape;
  hw.multimodal = model.multimodal;
  hw.vision_tokens_per_tile = model.vision_tokens_per_tile;
  return hw;
}

namespace {

void CheckGroupInputs(const HardwareModel& hw,
                      std::span<const Sequence> sequences,
                      std::span<const int> ranks) {
  if (ranks.empty()) throw InputError("ranks", "group has no ranks");
  if (sequences.empty())
    throw InputError("sequences", "group has no sequences");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= hw.num_ranks)
      throw InputError("ranks[" + std::to_string(i) + "]",
                       "rank " + std::to_string(ranks[i]) + " outside [0, " +
                           std::to_string(hw.num_ranks) + ")");
  }
}

// Each sequence's tokens on one rank after zigzag (ring) or Ulysses padding,
// its padded length, and their sum m.
struct PaddedChunks {
  std::vector<double> chunk, padded_len;
  double tokens_per_rank = 0;
};

PaddedChunks PadSequences(std::span<const Sequence> sequences, int d,
                          bool ring) {
  PaddedChunks p;
  p.chunk.resize(sequences.size());
  p.padded_len.resize(sequences.size());
  for (size_t k = 0; k < sequences.size(); ++k) {
    const int64_t len = sequences[k].length_tokens;
    int64_t c;
    if (d == 1) {
      c = len;
    } else if (ring) {
      c = 2 * CeilDiv(len, 2 * static_cast<int64_t>(d));
    } else {
      c = CeilDiv(len, d);
    }
    p.chunk[k] = static_cast<double>(c);
    p.padded_len[k] = static_cast<double>(c) * d;
    p.tokens_per_rank += p.chunk[k];
  }
  return p;
}

// One layer's attention on one rank: compute, wall time (with exposed
// communication), one forward pass's wall time, transfer time and bytes, and
// the kernel launches it adds to the whole group (all layers, all passes)
// and to its first forward.
struct AttentionLayerCost {
  double compute_s = 0, wall_s = 0, fwd_wall_s = 0, comm_s = 0, bytes = 0;
  double launches = 0, launches_fwd = 0;
};

// Forward and backward compute time (s) of one layer's attention over whole
// sequences (no ring steps) with `heads` of the model's query heads on this
// rank: d = 1, and Ulysses after its all-to-all.
struct ForwardBackwardS {
  double fwd = 0, bwd = 0;
};
ForwardBackwardS WholeSequenceAttentionS(const HardwareModel& hw,
                                         std::span<const Sequence> sequences,
                                         std::span<const double> padded_len,
                                         double heads) {
  const ModelShape& s = hw.shape;
  ForwardBackwardS t;
  for (size_t k = 0; k < sequences.size(); ++k) {
    double flops =
        LayerAttentionFlopsForward(s, padded_len[k], sequences[k].eta);
    if (heads != s.q_heads) flops = flops * heads / s.q_heads;
    const double eta = sequences[k].eta;
    t.fwd += flops / (hw.peak_flops *
                      AttentionForwardEfficiency(hw, padded_len[k], eta));
    t.bwd +=
        kAttnBackwardFactor * flops /
        (hw.peak_flops * AttentionBackwardEfficiency(hw, padded_len[k], eta));
  }
  return t;
}

AttentionLayerCost SingleRankAttention(const HardwareModel& hw,
                                       std::span<const Sequence> sequences,
                                       const PaddedChunks& p,
                                       const Passes& passes) {
  const ForwardBackwardS t =
      WholeSequenceAttentionS(hw, sequences, p.padded_len, hw.shape.q_heads);
  AttentionLayerCost a;
  a.compute_s = passes.attn_fwd * t.fwd + t.bwd;
  a.wall_s = a.compute_s;
  a.fwd_wall_s = t.fwd;
  return a;
}

// Ring attention, step by step: the diagonal (causal) step and the unmasked
// steps; each step's compute overlaps the next K/V transfer.
AttentionLayerCost RingAttentionLayer(const HardwareModel& hw,
                                      std::span<const Sequence> sequences,
                                      const PaddedChunks& p, int d,
                                      const Placement& place,
                                      const Passes& passes) {
  const ModelShape& s = hw.shape;
  const double bw = place.one_node ? hw.bw_intra_node : hw.bw_inter_node;
  const double lat = place.one_node ? hw.latency_intra_s : hw.latency_inter_s;
  const double L = s.layers, dkv = Dkv(s);
  double fwd_diag = 0, fwd_off = 0, bwd_diag = 0, bwd_off = 0, kv_bytes = 0;
  for (size_t k = 0; k < sequences.size(); ++k) {
    const double flops =
        LayerAttentionFlopsForward(s, p.padded_len[k], sequences[k].eta) /
        (double(d) * d);
    const double c = p.chunk[k], eta = sequences[k].eta;
    fwd_diag +=
        flops / (hw.peak_flops * AttentionForwardEfficiency(hw, c, eta));
    fwd_off += flops / (hw.peak_flops * AttentionForwardEfficiency(hw, c, 1.0));
    bwd_diag += kAttnBackwardFactor * flops /
                (hw.peak_flops * AttentionBackwardEfficiency(hw, c, eta));
    bwd_off += kAttnBackwardFactor * flops /
               (hw.peak_flops * AttentionBackwardEfficiency(hw, c, 1.0));
    kv_bytes += c * 2.0 * dkv * kBf16;
  }
  const double x_fwd = kv_bytes / bw + lat;
  const double x_bwd =
      kv_bytes * (kBf16 + kFp32) / kBf16 / bw + lat;          // KV + dKV fp32
  const double x_home = kv_bytes * kFp32 / kBf16 / bw + lat;  // dKV back home
  // Steps 0..d-1 compute; steps 0..d-2 overlap the next transfer.
  auto pass = [&](double diag, double off, double x) {
    double t = std::max(diag, x);  // step 0 (diagonal)
    t += (d - 2) * std::max(off, x);
    t += off;  // last step: nothing left to receive
    return t;
  };
  AttentionLayerCost a;
  a.fwd_wall_s = pass(fwd_diag, fwd_off, x_fwd);
  const double bwd_wall = pass(bwd_diag, bwd_off, x_bwd) + x_home;
  a.wall_s = passes.attn_fwd * a.fwd_wall_s + bwd_wall;
  a.compute_s = passes.attn_fwd * (fwd_diag + (d - 1) * fwd_off) + bwd_diag +
                (d - 1) * bwd_off;
  a.comm_s = passes.attn_fwd * (d - 1) * x_fwd + (d - 1) * x_bwd + x_home;
  a.bytes = kv_bytes * (passes.attn_fwd * (d - 1) + 3.0 * (d - 1) + 2.0);
  a.launches = L * (2.0 * passes.attn_fwd * d + 3.0 * d + 1.0);
  a.launches_fwd = L * 2.0 * d;
  return a;
}

// Ulysses: an all-to-all to whole sequences on a share of the heads, the
// attention, and an all-to-all back.
AttentionLayerCost UlyssesAttentionLayer(const HardwareModel& hw,
                                         std::span<const Sequence> sequences,
                                         const PaddedChunks& p, int d,
                                         const Placement& place,
                                         const Passes& passes) {
  const ModelShape& s = hw.shape;
  const double L = s.layers, m = p.tokens_per_rank;
  const double hq = static_cast<double>(CeilDiv(s.q_heads, d));
  const double hkv =
      static_cast<double>(std::max<int64_t>(1, CeilDiv(s.kv_heads, d)));
  const ForwardBackwardS t =
      WholeSequenceAttentionS(hw, sequences, p.padded_len, hq);
  AttentionLayerCost a;
  a.compute_s = passes.attn_fwd * t.fwd + t.bwd;
  const double hd = s.head_dim;
  const double bytes_qkv = (d - 1) * m * (hq + 2.0 * hkv) * hd * kBf16;
  const double bytes_o = (d - 1) * m * hq * hd * kBf16;
  const double t_pass =
      AllToAllS(hw, place, d, bytes_qkv) + AllToAllS(hw, place, d, bytes_o);
  a.comm_s = (passes.attn_fwd + 1.0) * t_pass;
  a.bytes = (passes.attn_fwd + 1.0) * (bytes_qkv + bytes_o);
  a.wall_s = a.compute_s + a.comm_s;
  a.fwd_wall_s = t.fwd + t_pass;
  a.launches = L * (passes.attn_fwd + 1.0) * 2.0;
  a.launches_fwd = L * 2.0;
  return a;
}

// The vision encoder and projector on one rank (MLLMs).
struct VisionEncoderCost {
  double patches_per_rank = 0;
  double fwd_s = 0;    // one forward
  double total_s = 0;  // all passes
  double launches = 0, launches_fwd = 0;
};

// A sequence's LLM vision tokens: given, else (0) estimated from eta.
double VisionTokensOf(const HardwareModel& hw, const Sequence& seq) {
  const double len = static_cast<double>(seq.length_tokens);
  if (seq.vision_tokens > 0)
    return std::min(len, static_cast<double>(seq.vision_tokens));
  if (hw.vision_tokens_per_tile <= 0) return 0;
  return std::min(len, seq.eta * len * len / hw.vision_tokens_per_tile);
}

double VisionTokensOfGroup(const HardwareModel& hw,
                           std::span<const Sequence> sequences) {
  double vt = 0;
  for (const Sequence& seq : sequences) vt += VisionTokensOf(hw, seq);
  return vt;
}

VisionEncoderCost VisionEncoder(const HardwareModel& hw,
                                std::span<const Sequence> sequences, int d) {
  const ModelShape& s = hw.shape;
  VisionEncoderCost v;
  if (!hw.multimodal || s.vision_layers <= 0 || s.vision_hidden <= 0) return v;
  const double vt = VisionTokensOfGroup(hw, sequences);
  if (vt <= 0) return v;
  const double h = s.hidden;
  const double vh = s.vision_hidden, vl = s.vision_layers;
  const double tokens_per_rank = vt / d;
  v.patches_per_rank = tokens_per_rank * hw.vision_patches_per_token;
  const double vit_gemm_fwd = 2.0 * 12.0 * vh * vh * vl * v.patches_per_rank;
  const double vit_attn_fwd =
      4.0 * vh * hw.vision_patches_per_tile * vl * v.patches_per_rank;
  const double proj_fwd =
      2.0 * tokens_per_rank * (vh * hw.vision_patches_per_token * h + h * h);
  const double vision_passes = hw.vision_frozen ? 1.0 : 4.0;
  // Full attention inside a tile: forward rate for the forward passes, the
  // backward rate for the backward's 2.5× FLOPs.
  const double vit_attn_fwd_s =
      vit_attn_fwd / (hw.peak_flops * AttentionForwardEfficiency(
                                          hw, hw.vision_patches_per_tile, 1.0));
  const double vit_attn_bwd_s =
      kAttnBackwardFactor * vit_attn_fwd /
      (hw.peak_flops *
       AttentionBackwardEfficiency(hw, hw.vision_patches_per_tile, 1.0));
  const double vit_gemm_s =
      vit_gemm_fwd / (hw.peak_flops * GemmEfficiency(hw, v.patches_per_rank));
  const double proj_s =
      proj_fwd / (hw.peak_flops * GemmEfficiency(hw, tokens_per_rank));
  v.fwd_s = vit_gemm_s + vit_attn_fwd_s + proj_s;
  v.total_s = vision_passes * vit_gemm_s +
              (hw.vision_frozen ? vit_attn_fwd_s
                                : 2.0 * vit_attn_fwd_s + vit_attn_bwd_s) +
              3.0 * proj_s;
  v.launches = vl * vision_passes * hw.kernels_per_layer_pass;
  v.launches_fwd = vl * hw.kernels_per_layer_pass;
  return v;
}

// Activation bytes of one rank: the layers' activations for m tokens, the
// ring's K/V or Ulysses' all-to-all buffer, and the vision encoder's pixels
// and one chunk's working set.
double GroupActivationBytes(const HardwareModel& hw, double m, int d, bool ring,
                            double patches_per_rank) {
  const ModelShape& s = hw.shape;
  const double dq = Dq(s), dkv = Dkv(s);
  double act = m * ActivationBytesPerToken(hw);
  if (d > 1) {
    act += ring ? m * 2.0 * dkv * kBf16 : m * (dq + 2.0 * dkv) * kBf16;
  }
  if (patches_per_rank > 0) {
    // The encoder runs over tiles in chunks of kVisionChunkTiles, recomputed
    // from its pixel inputs in the backward: memory is the pixel patches
    // (3·14² bf16 each) plus one chunk's working set of one ViT layer.
    const double vh = s.vision_hidden;
    const double chunk_patches = std::min(
        patches_per_rank, kVisionChunkTiles * hw.vision_patches_per_tile);
    act += patches_per_rank * 3.0 * 14.0 * 14.0;  // uint8 pixels
    act += chunk_patches * kBf16 * 16.0 * vh;
    if (!hw.vision_frozen) act += chunk_patches * kBf16 * s.vision_layers * vh;
  }
  return act;
}

}  // namespace

namespace {

// SimulateGroup on d ranks placed as `place` (its inputs checked).
GroupSimResult SimulatePlacedGroup(const HardwareModel& hw,
                                   std::span<const Sequence> sequences, int d,
                                   const Placement& place, CommKind comm) {
  const ModelShape& s = hw.shape;
  const double L = s.layers, h = s.hidden;
  const bool ring = comm == CommKind::kRing || d == 1;
  const Passes passes = PassesOf(hw);

  GroupSimResult r;
  const PaddedChunks chunks = PadSequences(sequences, d, ring);
  const double m = chunks.tokens_per_rank;
  r.padded_tokens_per_rank = m;

  // Linear layers and LM head.
  const double gemm_rate = hw.peak_flops * GemmEfficiency(hw, m);
  const double layer_gemm_fwd_s = L * LayerGemmFlopsForward(s, m) / gemm_rate;
  const double head_fwd_s =
      2.0 * m * h * static_cast<double>(s.vocab) / gemm_rate;
  r.gemm_s = passes.linear * layer_gemm_fwd_s + 3.0 * head_fwd_s;
  // Elementwise, HBM-bound.
  const double elementwise_pass_s =
      L * m * ElementwiseBytesPerToken(s) / hw.hbm_bytes_per_s;
  r.elementwise_s = passes.linear * elementwise_pass_s;
  double launches = L * passes.kernel * hw.kernels_per_layer_pass;
  double launches_fwd = L * hw.kernels_per_layer_pass;

  // Attention (per layer, then × L).
  const AttentionLayerCost attn =
      d == 1 ? SingleRankAttention(hw, sequences, chunks, passes)
      : ring ? RingAttentionLayer(hw, sequences, chunks, d, place, passes)
             : UlyssesAttentionLayer(hw, sequences, chunks, d, place, passes);
  launches += attn.launches;  // 0 for d = 1
  launches_fwd += attn.launches_fwd;
  r.attention_s = L * attn.compute_s;
  r.comm_s = L * attn.comm_s;
  r.comm_bytes_per_rank = L * attn.bytes;
  r.exposed_comm_s = L * std::max(0.0, attn.wall_s - attn.compute_s);

  const VisionEncoderCost vision = VisionEncoder(hw, sequences, d);
  r.vision_s = vision.total_s;
  launches += vision.launches;  // 0 without an encoder run
  launches_fwd += vision.launches_fwd;
  r.launch_s = launches * hw.launch_s;

  r.time_s =
      r.gemm_s + r.elementwise_s + L * attn.wall_s + r.launch_s + r.vision_s;
  r.forward_s = layer_gemm_fwd_s + head_fwd_s + elementwise_pass_s +
                L * attn.fwd_wall_s + launches_fwd * hw.launch_s + vision.fwd_s;
  r.backward_s = std::max(0.0, r.time_s - r.forward_s);

  r.mem_bytes_per_rank =
      StaticMemBytes(hw) +
      GroupActivationBytes(hw, m, d, ring, vision.patches_per_rank);
  r.oom = r.mem_bytes_per_rank > hw.mem_capacity_bytes;
  return r;
}

}  // namespace

GroupSimResult SimulateGroup(const HardwareModel& hw,
                             std::span<const Sequence> sequences,
                             std::span<const int> ranks, CommKind comm) {
  CheckGroupInputs(hw, sequences, ranks);
  return SimulatePlacedGroup(hw, sequences, static_cast<int>(ranks.size()),
                             Place(hw, ranks), comm);
}

CostModel CalibrateMemory(const HardwareModel& hw, CostModel cm) {
  const ModelShape& s = hw.shape;
  const double dq = Dq(s), dkv = Dkv(s);
  double per_token = ActivationBytesPerToken(hw) +
                     std::max(2.0 * dkv * kBf16, (dq + 2.0 * dkv) * kBf16);
  double fixed = StaticMemBytes(hw);
  if (hw.multimodal && s.vision_layers > 0) {
    per_token += hw.vision_patches_per_token * 3.0 * 14.0 * 14.0;
    const double chunk = kVisionChunkTiles * hw.vision_patches_per_tile;
    fixed += chunk * kBf16 * 16.0 * s.vision_hidden;
    if (!hw.vision_frozen)
      fixed += chunk * kBf16 * s.vision_layers * s.vision_hidden;
  }
  cm.mem_per_token = per_token * 1.005;
  cm.mem_static = fixed;
  cm.mem_capacity = hw.mem_capacity_bytes;
  return cm;
}

double SimulateGroupTimeS(const HardwareModel& hw,
                          std::span<const Sequence> sequences,
                          std::span<const int> ranks, CommKind comm) {
  return SimulateGroup(hw, sequences, ranks, comm).time_s;
}

namespace {

// The sequences of group `gp`, checked against the batch and the ranks; adds
// their tokens to `tokens`. `where` names the group.
void CollectGroupInputs(const GroupPlan& gp, const std::string& where,
                        std::span<const Sequence> sequences, int num_ranks,
                        std::vector<Sequence>& group_seqs, double& tokens) {
  group_seqs.clear();
  for (int idx : gp.sequences) {
    if (idx < 0 || static_cast<size_t>(idx) >= sequences.size())
      throw InputError(where + ".sequences",
                       "index " + std::to_string(idx) + " outside the batch");
    group_seqs.push_back(sequences[static_cast<size_t>(idx)]);
    tokens +=
        static_cast<double>(sequences[static_cast<size_t>(idx)].length_tokens);
  }
  for (int rank : gp.ranks) {
    if (rank < 0 || rank >= num_ranks)
      throw InputError(where + ".ranks", "rank " + std::to_string(rank) +
                                             " outside [0, " +
                                             std::to_string(num_ranks) + ")");
  }
}

// When the last rank is done with an overlapped gradient sync: each rank
// waits for the all-gather behind its own first forward and for the
// reduce-scatter behind its own last backward; an idle rank hides neither.
// The step ends with the latest rank, so work added to an idle rank
// lengthens it by at most that work.
double LatestRankEndWithSyncS(const GradSync& gs, std::span<const double> ready,
                              std::span<const double> first_forward,
                              std::span<const double> last_backward) {
  double end_s = 0;
  for (size_t r = 0; r < ready.size(); ++r) {
    end_s = std::max(end_s, ExposedBucketed(gs.collective_s, gs.buckets,
                                            std::max(0.0, first_forward[r])) +
                                ready[r] +
                                ExposedBucketed(gs.collective_s, gs.buckets,
                                                last_backward[r]));
  }
  return end_s;
}

// Per rank: when it is free, how long it has been busy, and the backward
// phase of its last group and the forward of its first (the windows a
// bucketed gradient sync hides behind; -1 = none yet).
struct RankClocks {
  explicit RankClocks(int n)
      : ready(static_cast<size_t>(n), 0.0),
        busy(static_cast<size_t>(n), 0.0),
        last_backward(static_cast<size_t>(n), 0.0),
        first_forward(static_cast<size_t>(n), -1.0) {}
  // A group ran on `ranks` until `end_s`, for `dur_s`, with these phases.
  void Run(std::span<const int> ranks, double end_s, double dur_s,
           double forward_s, double backward_s) {
    for (int rank : ranks) {
      const auto r = static_cast<size_t>(rank);
      ready[r] = end_s;
      busy[r] += dur_s;
      last_backward[r] = backward_s;
      if (first_forward[r] < 0) first_forward[r] = forward_s;
    }
  }
  std::vector<double> ready, busy, last_backward, first_forward;
};

// When a group on `ranks` starts: all of them free, plus the creation of its
// communicator on first use (charged to `res`).
double GroupStartS(const HardwareModel& hw, std::span<const int> ranks,
                   std::span<const double> ready,
                   std::set<std::vector<int>>& communicators, SimResult& res) {
  double start = 0;
  for (int rank : ranks)
    start = std::max(start, ready[static_cast<size_t>(rank)]);
  if (ranks.size() > 1) {
    std::vector<int> key(ranks.begin(), ranks.end());
    std::sort(key.begin(), key.end());
    if (communicators.insert(key).second) {
      start += hw.group_create_s;
      res.group_create_s += hw.group_create_s;
      ++res.new_groups;
    }
  }
  return start;
}

void CheckPlanInputs(const Plan& plan, const SimOptions& options) {
  if (plan.status != PlanStatus::kOk)
    throw InputError("plan.status",
                     "cannot simulate an infeasible plan: " + plan.message);
  if (options.noise_rel < 0) throw InputError("noise", "must be >= 0");
}

// The whole step's result when the group at `where` ("plan.micro_batches[i].
// groups[j]") does not fit in memory: nothing runs.
SimResult OomResult(const HardwareModel& hw, const GroupSimResult& gr,
                    const std::string& where) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "needs %.2f GB per rank > %.2f GB (simulated)",
                gr.mem_bytes_per_rank / 1e9, hw.mem_capacity_bytes / 1e9);
  SimResult res;
  res.oom = true;
  res.oom_message = where.substr(5) + ": " + buf;
  return res;
}

}  // namespace

SimResult SimulatePlan(const HardwareModel& hw, const Plan& plan,
                       std::span<const Sequence> sequences,
                       const SimOptions& options) {
  CheckPlanInputs(plan, options);
  const int n = hw.num_ranks;
  SimResult res;
  RankClocks clocks(n);
  std::set<std::vector<int>> local_communicators;
  std::set<std::vector<int>>& communicators = options.communicator_cache
                                                  ? *options.communicator_cache
                                                  : local_communicators;
  DeterministicRng rng(options.noise_seed ^ 0x73696D6E6F697365ULL);
  std::vector<Sequence> group_seqs;

  for (size_t mb = 0; mb < plan.micro_batches.size(); ++mb) {
    double mb_end = 0;
    const auto& groups = plan.micro_batches[mb].groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      const GroupPlan& gp = groups[g];
      const std::string where = "plan.micro_batches[" + std::to_string(mb) +
                                "].groups[" + std::to_string(g) + "]";
      CollectGroupInputs(gp, where, sequences, n, group_seqs, res.tokens);
      if (group_seqs.empty()) continue;  // an idle group does nothing
      const GroupSimResult gr =
          SimulateGroup(hw, group_seqs, gp.ranks, gp.comm);
      if (gr.oom) return OomResult(hw, gr, where);
      double dur = gr.time_s;
      double noise = 1.0;
      if (options.noise_rel > 0) {
        const double sigma = options.noise_rel;
        noise = std::exp(sigma * rng.Normal() - 0.5 * sigma * sigma);
        dur *= noise;
      }
      const double start =
          GroupStartS(hw, gp.ranks, clocks.ready, communicators, res);
      const double end = start + dur;
      res.group_spans.push_back(
          {static_cast<int>(mb), static_cast<int>(g), start, end});
      clocks.Run(gp.ranks, end, dur, gr.forward_s * noise,
                 gr.backward_s * noise);
      res.exposed_comm_s += gr.exposed_comm_s;
      mb_end = std::max(mb_end, end);
    }
    res.micro_batch_end_s.push_back(mb_end);
  }
  const std::vector<double>& ready = clocks.ready;
  res.compute_s =
      ready.empty() ? 0.0 : *std::max_element(ready.begin(), ready.end());

  if (options.include_grad_sync) {
    const GradSync gs = GradSyncOf(hw);
    res.grad_sync_total_s = 2.0 * gs.collective_s + gs.optimizer_s;
    if (options.overlap_grad_reduce && n > 0) {
      const double end_s = LatestRankEndWithSyncS(
          gs, ready, clocks.first_forward, clocks.last_backward);
      res.grad_sync_s = end_s - res.compute_s + gs.optimizer_s;
    } else {
      res.grad_sync_s = res.grad_sync_total_s;
    }
  }
  res.iter_s = res.compute_s + res.grad_sync_s;
  res.tokens_per_s = res.iter_s > 0 ? res.tokens / res.iter_s : 0.0;
  const double total_busy =
      std::accumulate(clocks.busy.begin(), clocks.busy.end(), 0.0);
  res.busy_fraction =
      res.compute_s > 0 ? total_busy / (n * res.compute_s) : 0.0;
  return res;
}

namespace {

// The lowest ratio of the attention forward's efficiency to the backward's
// over every block size n (the causal slowdown divides both alike). Each
// curve is min(kMaxEfficiency, max n / (n + half)), so between the sizes
// where a curve meets its ceiling the ratio is monotone in n: its infimum is
// at n -> 0, n -> infinity, one of those sizes, or Hyperbolic's value for
// n <= 0.
double MinAttentionEfficiencyRatio(const HardwareModel& hw) {
  const double fmax = hw.attn_fwd_eff_max, fhalf = hw.attn_fwd_half_tokens;
  const double bmax = hw.attn_bwd_eff_max, bhalf = hw.attn_bwd_half_tokens;
  auto ratio = [&](double n) {
    return Hyperbolic(fmax, fhalf, n) / Hyperbolic(bmax, bhalf, n);
  };
  double lowest = std::min(ratio(0.0),  // n <= 0
                           std::min(kMaxEfficiency, fmax) /
                               std::min(kMaxEfficiency, bmax));  // n -> inf
  // n -> 0: max n / half (a curve with half 0 is its ceiling, the n -> inf
  // value above).
  if (fhalf > 0 && bhalf > 0) {
    lowest = std::min(lowest, (fmax / fhalf) / (bmax / bhalf));
  } else if (fhalf > 0) {
    lowest = 0;
  }
  for (const auto& [max, half] : {std::pair{fmax, fhalf}, {bmax, bhalf}}) {
    if (max > kMaxEfficiency && half > 0)
      lowest = std::min(lowest,
                        ratio(kMaxEfficiency * half / (max - kMaxEfficiency)));
  }
  return lowest;
}

}  // namespace

double MaxForwardShare(const HardwareModel& hw) {
  const Passes p = PassesOf(hw);
  // A backward of attention takes at least c times its forward's time.
  const double c = kAttnBackwardFactor * MinAttentionEfficiencyRatio(hw);
  // Attention: at d = 1, Ulysses' compute, and ring steps (whose backward
  // sends at least the forward's bytes) at most 1 / (attn_fwd + min(c, 1)),
  // which also covers what it bounds from above: Ulysses' all-to-alls and
  // launches (1 / (attn_fwd + 1)), ring launches (2 / (2 attn_fwd + 3)) and a
  // trained vision encoder (GEMMs 1/4, attention 1 / (2 + c), attn_fwd <= 2).
  const double share = std::max({
      1.0 / p.linear,                         // linear layers, elementwise
      1.0 / 3.0,                              // LM head, vision projector
      1.0 / p.kernel,                         // a layer's launches
      1.0 / (p.attn_fwd + std::min(c, 1.0)),  // attention (above)
  });
  // A frozen encoder runs its forward only.
  return hw.multimodal && hw.vision_frozen ? 1.0 : std::min(1.0, share);
}

namespace {

// Every token's work spread over all ranks, plus the sync no schedule hides
// (PhysicalLowerBoundS' first term).
double SpreadWorkBoundS(const HardwareModel& hw,
                        std::span<const Sequence> sequences,
                        bool overlap_grad_reduce) {
  const ModelShape& s = hw.shape;
  const Passes passes = PassesOf(hw);
  const double L = s.layers, h = s.hidden, f = s.ffn, dq = Dq(s), dkv = Dkv(s);
  const double gemm_rate =
      hw.peak_flops * std::min(kMaxEfficiency, hw.gemm_eff_max);
  const double fwd_rate =
      hw.peak_flops * std::min(kMaxEfficiency, hw.attn_fwd_eff_max);
  const double bwd_rate =
      hw.peak_flops * std::min(kMaxEfficiency, hw.attn_bwd_eff_max);
  double work_s = 0;
  for (size_t k = 0; k < sequences.size(); ++k) {
    const double len = static_cast<double>(sequences[k].length_tokens);
    work_s += (passes.linear * L * LayerGemmFlopsForward(s, len) +
               3.0 * 2.0 * len * h * static_cast<double>(s.vocab)) /
              gemm_rate;
    work_s += passes.linear * L * len * kBf16 *
              (8.0 * h + 3.0 * f + 2.0 * dq + 2.0 * dkv) / hw.hbm_bytes_per_s;
    const double attn =
        L * LayerAttentionFlopsForward(s, len, sequences[k].eta);
    work_s += passes.attn_fwd * attn / fwd_rate +
              kAttnBackwardFactor * attn / bwd_rate;
    if (hw.multimodal && s.vision_layers > 0 && s.vision_hidden > 0) {
      const double vt = VisionTokensOf(hw, sequences[k]);
      const double vh = s.vision_hidden, vl = s.vision_layers;
      const double patches = vt * hw.vision_patches_per_token;
      const double vision_passes = hw.vision_frozen ? 1.0 : 4.0;
      const double vit_attn =
          4.0 * vh * hw.vision_patches_per_tile * vl * patches;
      work_s +=
          vision_passes * 2.0 * 12.0 * vh * vh * vl * patches / gemm_rate +
          (hw.vision_frozen ? vit_attn / fwd_rate
                            : 2.0 * vit_attn / fwd_rate +
                                  kAttnBackwardFactor * vit_attn / bwd_rate) +
          3.0 * 2.0 * vt * (vh * hw.vision_patches_per_token * h + h * h) /
              gemm_rate;
    }
  }
  const GradSync gs = GradSyncOf(hw);
  const double compute_s = work_s / std::max(1, hw.num_ranks);
  if (!overlap_grad_reduce)
    return compute_s + 2.0 * gs.collective_s + gs.optimizer_s;
  // With overlap a rank r ends at AG_r + ready_r + RS_r (SimulatePlan), each
  // collective exposing one bucket b plus max(0, a - window), a = T - b, the
  // windows F_r (its first group's forward) and B_r (its last group's
  // backward) lying within ready_r, F_r + B_r <= ready_r, and F_r at most
  // phi = MaxForwardShare of its first group's time, so of ready_r. So
  //   end_r >= 2b + max(ready_r, 2a, a + (1 - phi) ready_r),
  // which grows with ready_r, and some rank has ready_r >= compute_s: the
  // step is at least that at compute_s — the last bucket of each collective,
  // all of the sync that the compute cannot hide, and the all-gather's part
  // that the critical rank's first forward cannot (docs/simulator.md).
  const double bucket_s = gs.collective_s / gs.buckets;
  const double a = gs.collective_s - bucket_s;
  return 2.0 * bucket_s +
         std::max({compute_s, 2.0 * a,
                   a + (1.0 - MaxForwardShare(hw)) * compute_s}) +
         gs.optimizer_s;
}

// Every placement of a group of d ranks, as Place describes it, by the
// ranks f on its emptiest node: f = d on one node (d at most a node's
// ranks), or f < d on k >= 2 nodes of at most R ranks each (k·f <= d <= f +
// (k - 1)·R, k at most the nodes there are).
std::vector<Placement> PlacementsOf(const HardwareModel& hw, int d) {
  const int per_node = std::max(1, hw.ranks_per_node);
  const int nodes = (hw.num_ranks + per_node - 1) / per_node;
  std::vector<Placement> out;
  if (d <= per_node) out.push_back({true, d - 1, 0});
  for (int f = 1; f < d && f <= per_node; ++f) {
    for (int k = 2; k <= nodes && k * f <= d; ++k) {
      if (d <= f + (k - 1) * per_node) {
        out.push_back({false, f - 1, d - f});
        break;
      }
    }
  }
  return out;
}

// The earliest any plan can end (s, optimizer step aside) on the ranks that
// run `seq`, the sync being `gs`: its group, alone, at the degree, placement
// and collective (rings only, with `rings_only`; all-to-all where
// AllToAllDegreeRuns) that make it shortest, plus the sync its own windows
// leave exposed (PhysicalLowerBoundS). Infinity when it fits memory at no
// degree.
double AloneEndS(const HardwareModel& hw, const GradSync& gs,
                 const Sequence& seq, bool overlap_grad_reduce,
                 bool rings_only) {
  const std::span<const Sequence> one(&seq, 1);
  double best_s = std::numeric_limits<double>::infinity();
  for (int d = 1; d <= hw.num_ranks; ++d) {
    const bool all_to_all =
        !rings_only && d > 1 && AllToAllDegreeRuns(hw.shape, d);
    bool ring_one_node_done = false, ring_across_done = false;
    for (const Placement& place : PlacementsOf(hw, d)) {
      for (CommKind comm : {CommKind::kRing, CommKind::kAllToAll}) {
        if (comm == CommKind::kAllToAll && !all_to_all) continue;
        if (comm == CommKind::kRing) {
          // A ring's links depend on one node or not alone.
          bool& done = place.one_node ? ring_one_node_done : ring_across_done;
          if (done) continue;
          done = true;
        }
        const GroupSimResult g = SimulatePlacedGroup(hw, one, d, place, comm);
        if (g.oom) continue;
        const double end_s =
            overlap_grad_reduce
                ? ExposedBucketed(gs.collective_s, gs.buckets, g.forward_s) +
                      g.time_s +
                      ExposedBucketed(gs.collective_s, gs.buckets, g.backward_s)
                : g.time_s + 2.0 * gs.collective_s;
        best_s = std::min(best_s, end_s);
      }
    }
  }
  return best_s;
}

// The highest AloneEndS of the kAloneBoundSequences longest sequences (0:
// none fits memory anywhere, so no plan runs).
double LongestAloneEndS(const HardwareModel& hw,
                        std::span<const Sequence> sequences,
                        bool overlap_grad_reduce, bool rings_only) {
  std::vector<size_t> longest(sequences.size());
  std::iota(longest.begin(), longest.end(), size_t{0});
  const size_t kept =
      std::min(longest.size(), static_cast<size_t>(kAloneBoundSequences));
  std::partial_sort(longest.begin(), longest.begin() + kept, longest.end(),
                    [&](size_t a, size_t b) {
                      return sequences[a].length_tokens >
                             sequences[b].length_tokens;
                    });
  const GradSync gs = GradSyncOf(hw);
  double end_s = 0;
  for (size_t i = 0; i < kept; ++i) {
    const double s = AloneEndS(hw, gs, sequences[longest[i]],
                               overlap_grad_reduce, rings_only);
    if (std::isfinite(s)) end_s = std::max(end_s, s);
  }
  return end_s;
}

}  // namespace

double PhysicalLowerBoundS(const HardwareModel& hw,
                           std::span<const Sequence> sequences,
                           bool overlap_grad_reduce, bool rings_only) {
  const double alone_s =
      LongestAloneEndS(hw, sequences, overlap_grad_reduce, rings_only);
  return std::max(SpreadWorkBoundS(hw, sequences, overlap_grad_reduce),
                  alone_s > 0 ? alone_s + GradSyncOf(hw).optimizer_s : 0.0);
}

std::vector<double> MeasuredGroupTimesS(const Plan& plan,
                                        const SimResult& result) {
  std::vector<size_t> first(plan.micro_batches.size() + 1, 0);
  for (size_t mb = 0; mb < plan.micro_batches.size(); ++mb)
    first[mb + 1] = first[mb] + plan.micro_batches[mb].groups.size();
  std::vector<double> out(first.back(),
                          std::numeric_limits<double>::quiet_NaN());
  if (result.oom) return out;
  for (const SimResult::GroupSpan& span : result.group_spans)
    out.at(first.at(static_cast<size_t>(span.micro_batch)) +
           static_cast<size_t>(span.group)) = span.end_s - span.start_s;
  return out;
}

}  // namespace fcp::sim
