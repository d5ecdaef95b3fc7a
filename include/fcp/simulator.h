// The hardware simulator (docs/design.md §5): the "cluster" on which plans run
// when no cluster is at hand. It is deliberately NOT the planner's cost
// formula: it models per-layer GEMM and attention FLOPs at length-dependent
// efficiencies, ring attention step by step (compute/transfer overlap per step,
// per-step latency, intra- vs inter-node links by actual placement), Ulysses
// all-to-all, zigzag chunking with padding, kernel-launch costs, activation
// recompute (full, selective or none), memory-bound elementwise traffic, the
// MLLM vision encoder (frozen/unfrozen), communicator creation, gradient
// reduction once per global batch (overlapped with the backward as Megatron
// does, or serial), per-rank memory (a group that does not fit is reported as
// OOM and never "run") and optional seeded multiplicative noise. Every figure
// it produces is simulated. Its constants and their sources: docs/simulator.md;
// its check against published measurements: docs/calibration.md (`fcp eval
// calibrate`).
//
// Units: seconds, bytes, FLOPs, tokens. Thread-safety: all functions are pure
// functions of their arguments (safe to call concurrently).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fcp/io.h"
#include "fcp/model_arithmetic.h"
#include "fcp/presets.h"
#include "fcp/scheduler.h"
#include "fcp/types.h"

namespace fcp::sim {

// Activation recompute policy (Megatron-LM --recompute-granularity):
//  full: every layer is recomputed in the backward from a checkpoint of its
//        input (one extra forward of everything);
//  selective: only core attention is recomputed (megatron-core's default
//        recompute_modules = ["core_attn"]); activations are kept;
//  none: nothing is recomputed; every layer's activations are kept.
enum class Recompute { kFull, kSelective, kNone };
// "full" | "selective" | "none"; throws InputError("recompute") otherwise.
Recompute ParseRecompute(std::string_view name);
std::string_view RecomputeName(Recompute policy);

// Everything the simulator knows about the hardware and the model. Build it
// with MakeHardwareModel (which copies the cluster preset's figures) and
// adjust fields as needed (tests and `fcp eval calibrate` do).
struct HardwareModel {
  // --- cluster ---
  int num_ranks = 64;
  int ranks_per_node = 16;
  double peak_flops = 376e12;        // dense bf16 FLOP/s per rank
  double hbm_bytes_per_s = 3.2e12;   // sustained device memory bandwidth
  double mem_capacity_bytes = 64e9;  // per rank
  double bw_intra_node = 196e9;      // bytes/s per direction, P2P within a node
  double bw_inter_node = 50e9;       // bytes/s per rank across nodes
  double latency_intra_s = 8e-6;     // per P2P message / collective step
  double latency_inter_s = 20e-6;
  double launch_s = 8e-6;  // per kernel launch (host + device gap)
  int kernels_per_layer_pass =
      kKernelsPerLayerPass;      // kernels of one transformer layer, one pass
  double group_create_s = 1e-3;  // new communicator (paper: ≈ 1 ms), cached
  double framework_reserve_bytes =
      1.5e9;  // runtime context, collectives buffers
  // --- efficiency curves: eff(n) = max · n / (n + half), capped at 0.95 ---
  // Attention (FlashAttention-3 fits, ClusterPreset): forward and backward
  // each on its own curve, both for an unmasked block of n query tokens; a
  // causal block is slower by CausalSlowdown(n) = 1 + gain·(n/512)^-exponent
  // (≈1.6 at 512 tokens, 1.34 at 1k, 1.04 at 16k; capped at 2).
  double attn_fwd_eff_max = 0.676;
  double attn_fwd_half_tokens = 209;
  double attn_bwd_eff_max = 0.598;
  double attn_bwd_half_tokens = 427;
  double attn_causal_gain = 0.594;
  double attn_causal_exponent = 0.794;
  // GEMMs by rows (tokens on the rank).
  double gemm_eff_max = 0.63;
  double gemm_eff_half_tokens = 256;
  // --- training recipe ---
  Recompute recompute = Recompute::kFull;
  // Fraction of the linear layers' forward FLOPs recomputed in the backward;
  // < 0 = from the policy (full 1, selective and none 0). For recipes between
  // the policies, e.g. TorchTitan's op-level selective checkpointing, which
  // recomputes every second matmul (3 of a Llama layer's 7).
  double linear_recompute_fraction = -1;
  // --- model ---
  ModelShape shape;
  bool multimodal = false;
  int vision_tokens_per_tile = 0;  // LLM tokens per 448² tile / frame
  // Encoder patches per LLM vision token and per tile (full attention inside a
  // tile in the ViT).
  int vision_patches_per_token = kVisionPatchesPerToken;
  int vision_patches_per_tile = kVisionPatchesPerTile;
  bool vision_frozen = false;  // frozen: encoder forward only, no encoder grads
};

// The simulator's hardware for `model` on `cluster` (every hardware figure
// from the preset); `num_ranks` > 0 overrides the preset's rank count
// (ranks_per_node becomes min(R, N)). Throws InputError("ranks") when
// num_ranks < 0.
HardwareModel MakeHardwareModel(const ModelPreset& model,
                                const ClusterPreset& cluster,
                                int num_ranks = 0);

// --- FLOP counts (exposed for tests and docs; forward pass only) ---
// Parameter counts (LayerParams, BackboneParams, VisionParams):
// include/fcp/model_arithmetic.h.
// Forward GEMM FLOPs of ONE layer for `tokens` tokens: 2·tokens·LayerParams.
double LayerGemmFlopsForward(const ModelShape& shape, double tokens);
// Forward attention FLOPs of ONE layer for a sequence of `len` tokens with mask
// factor eta: QKᵀ and PV over the visible pairs, 4·dq per pair, visible pairs
// (1 + eta)·len²/2 (0 = causal, 1 = full).
double LayerAttentionFlopsForward(const ModelShape& shape, double len,
                                  double eta);

// Efficiency (fraction of peak) of attention over a block of `tokens` query
// tokens with mask factor eta (0 = causal: the unmasked rate / CausalSlowdown;
// 1 = full: the unmasked rate; in between, linear in eta), forward or
// backward; and of a GEMM with `rows` rows.
double AttentionForwardEfficiency(const HardwareModel& hw, double tokens,
                                  double eta = 0);
double AttentionBackwardEfficiency(const HardwareModel& hw, double tokens,
                                   double eta = 0);
// How much slower a causal block of `tokens` tokens runs than an unmasked one
// (per FLOP): 1 + attn_causal_gain · (tokens/512)^-attn_causal_exponent, in [1,
// 2].
double CausalSlowdown(const HardwareModel& hw, double tokens);
double GemmEfficiency(const HardwareModel& hw, double rows);

// One CP group's forward + recompute + backward on its ranks, per rank.
struct GroupSimResult {
  double time_s = 0;          // wall time of the group (all ranks symmetric)
  double forward_s = 0;       // of time_s: the first forward pass
  double backward_s = 0;      // of time_s: the backward phase (incl. recompute)
  double gemm_s = 0;          // linear layers incl. LM head
  double attention_s = 0;     // attention kernels (compute only)
  double elementwise_s = 0;   // norms, activations, residuals (HBM-bound)
  double comm_s = 0;          // total transfer time (ring P2P or all-to-all)
  double exposed_comm_s = 0;  // part of comm_s not hidden behind compute
  double launch_s = 0;        // kernel launches
  double vision_s = 0;        // vision encoder (+ projector)
  double comm_bytes_per_rank = 0;     // bytes sent by one rank
  double padded_tokens_per_rank = 0;  // tokens after zigzag padding
  double mem_bytes_per_rank = 0;
  bool oom = false;  // mem_bytes_per_rank > mem_capacity_bytes
};

// Simulates one group of `sequences` on `ranks` (global rank ids in ring
// order; placement decides intra/inter-node links) communicating by `comm`.
// With hw.multimodal the vision encoder runs on each sequence's
// Sequence::vision_tokens, or, where that is 0, on eta·len²/
// vision_tokens_per_tile of them (the estimate for batches that give only
// eta). No noise. Throws InputError for empty ranks, a rank outside [0,
// hw.num_ranks), or an empty sequence list.
GroupSimResult SimulateGroup(const HardwareModel& hw,
                             std::span<const Sequence> sequences,
                             std::span<const int> ranks, CommKind comm);

// SimulateGroup(...).time_s: the simulated time (s) of ONE group. This is the
// sampling API the profiler fits the cost model to; kept stable. It returns
// the time even when the group would not fit in memory (check
// SimulateGroup(...).oom for that).
double SimulateGroupTimeS(const HardwareModel& hw,
                          std::span<const Sequence> sequences,
                          std::span<const int> ranks,
                          CommKind comm = CommKind::kRing);

// The simulator's memory accounting expressed in the planner's two memory
// coefficients, as a profiler measuring memory on this hardware would report
// it: mem_static = model states + runtime reserve + the vision encoder's
// fixed chunk working set; mem_per_token = activations + the larger of the
// ring / all-to-all buffers + (MLLMs) pixel bytes, plus 0.5% for zigzag
// padding; mem_capacity = the device's. Other coefficients are kept. Planning
// with it means no plan the planner accepts is an OOM in the simulator.
CostModel CalibrateMemory(const HardwareModel& hw, CostModel planner_model);

struct SimOptions {
  // Multiplicative log-normal noise on every group time: sigma = noise_rel
  // (0 = deterministic). Drawn in (micro-batch, group) order from noise_seed.
  double noise_rel = 0;
  uint64_t noise_seed = 0;
  // Add the gradient reduce-scatter/all-gather and optimizer step (once per
  // global batch).
  bool include_grad_sync = true;
  // Megatron's --overlap-grad-reduce / --overlap-param-gather: gradients are
  // reduce-scattered bucket by bucket while the last micro-batch's backward
  // runs, and the parameter all-gather hides behind the first forward; only
  // what does not fit behind them, and at least one bucket each, is exposed.
  // false: the whole sync runs after compute.
  bool overlap_grad_reduce = true;
  // Communicators already created (sorted rank sets); when set, it is read and
  // extended, so creation is charged once across several global batches.
  // Not owned; not thread-safe.
  std::set<std::vector<int>>* communicator_cache = nullptr;
};

// One global batch (all micro-batches of `plan`) on the simulated cluster.
struct SimResult {
  bool oom = false;
  std::string oom_message;  // "micro_batches[i].groups[j]: needs X GB > Y GB"
  double iter_s = 0;        // wall time of the global batch (0 when oom)
  double compute_s = 0;     // until the last rank finishes its last group
  double grad_sync_s = 0;   // exposed gradient reduction + optimizer step
  double grad_sync_total_s =
      0;  // the whole reduction + optimizer, hidden or not
  double group_create_s =
      0;                     // communicator creation on the critical path (sum)
  int new_groups = 0;        // distinct rank sets created (first use)
  double tokens = 0;         // unpadded tokens of the batch
  double tokens_per_s = 0;   // tokens / iter_s
  double busy_fraction = 0;  // Σ rank busy time / (N · compute_s)
  double exposed_comm_s = 0;  // Σ over groups of exposed communication
  std::vector<double>
      micro_batch_end_s;  // when each micro-batch's last group ends
  // When each group ran (plan order; groups without sequences left out): the
  // timeline that plot::SimulatedTimeline draws. Empty when oom.
  struct GroupSpan {
    int micro_batch = 0;
    int group = 0;
    double start_s = 0;
    double end_s = 0;
  };
  std::vector<GroupSpan> group_spans;
};

// Runs `plan` (ranks, sequences and comm of every group; its estimates are
// ignored) for `sequences`. Ranks proceed independently: a group starts when
// all its ranks are free (no global barrier between micro-batches), so static
// data-parallel replicas never wait for each other until the gradient sync.
// A group that exceeds memory makes the whole result OOM (nothing is run).
// Throws InputError("plan...") when the plan refers to ranks outside
// [0, hw.num_ranks) or to sequences that do not exist, and when the plan's
// status is not kOk.
SimResult SimulatePlan(const HardwareModel& hw, const Plan& plan,
                       std::span<const Sequence> sequences,
                       const SimOptions& options = {});

// The run time (s) of every group of `plan` as `result` (SimulatePlan of that
// plan) ran it: end - start of its span, the measured time a training loop
// would report to learn from (fcp::MeasuredGroupSamples). Plan order
// (micro_batches[0].groups, then [1], ...); NaN for a group that did not run
// (no sequences) and for every group of an OOM result.
std::vector<double> MeasuredGroupTimesS(const Plan& plan,
                                        const SimResult& result);

// The physical lower bound of one global batch of `sequences` (s): no plan
// simulates faster (noise aside), nor, with `rings_only`, any plan of ring
// groups only (what a ring-only runtime executes). The higher of two terms:
// - every token's work (GEMMs, attention, elementwise traffic, vision
//   encoder, with the recompute policy's extra passes) spread perfectly over
//   all hw.num_ranks at the simulator's best efficiencies (the curves'
//   ceilings, unmasked attention, no padding, no communication), plus the
//   gradient sync's part that no schedule can hide: without overlap all of
//   it; with it, 2b + max(W, 2(T - b), (T - b) + (1 - phi) W) for the spread
//   work W, one collective's time T, its last bucket b and phi =
//   MaxForwardShare(hw) (the all-gather hides only behind a rank's first
//   forward);
// - each of the kAloneBoundSequences longest sequences alone in its group at
//   the degree, placement and collective (all-to-all where
//   AllToAllDegreeRuns) that end its ranks earliest, with the sync its own
//   forward and backward windows leave exposed: its group in any plan takes
//   at least as long and hides no more (a group's time and windows only grow
//   with what it holds, and other groups on its ranks add at least what
//   they hide);
// plus the optimizer step. Derivation in docs/simulator.md. Vision tokens as
// in SimulateGroup.
inline constexpr int kAloneBoundSequences = 4;
double PhysicalLowerBoundS(const HardwareModel& hw,
                           std::span<const Sequence> sequences,
                           bool overlap_grad_reduce = true,
                           bool rings_only = false);

// The largest share of any group's simulated time that its forward takes
// (SimulateGroup's forward_s / time_s, whatever the sequences, degree,
// placement and collective) in `hw`: each part of a group's time runs its
// forward a fixed number of times or more (linear layers passes.linear
// times, the LM head 3, attention's forwards plus a backward of at least
// 2.5 x the lowest forward/backward efficiency ratio, ...), so the share is at
// most the largest part's. 1/3 with full recompute on every preset; 1 with
// a frozen vision encoder (forward only). In (0, 1].
double MaxForwardShare(const HardwareModel& hw);

// The gradient sync this simulator charges with overlap (SimOptions::
// overlap_grad_reduce), as a planner input (PlanRequest::grad_sync): one
// collective's time and bucket count as simulated, and the forward share of a
// group's time by the recompute policy (full: forward, recompute forward and
// a backward of twice the forward's work, 1/4; otherwise 1/3).
GradientSync PlannerGradientSync(const HardwareModel& hw);

// The Gantt chart and Chrome trace of a plan live in include/fcp/plot.h;
// experiments (many batches x strategies on the simulator) in
// include/fcp/experiment.h.

}  // namespace fcp::sim
