// Ring attention over a CP group (docs/design.md §8), zigzag-sharded sequences.
//
// Layout: every tensor is head-major, [heads][T][head_dim] where T is this
// rank's shard size (layouts[comm.rank()].num_tokens); lse is [heads][T].
// Forward: KV blocks travel around the ring (rank i sends to i+1, receives
// from i-1); the next block's non-blocking send/recv is posted before the
// current block's attention is computed, so the transfer overlaps compute.
// Backward: KV blocks travel the same way; each block's dK/dV accumulator
// follows it one hop behind and returns to its owner after d hops.
// Overlap: MPI moves a large message only while something drives its
// progress engine, so the block compute is cut into slices of at most
// kProgressRows query rows and Communicator::Progress() is called between
// slices (polling on the compute thread; docs/executor.md has the measured
// overlap).
// Attention is restricted to tokens of the same sequence; a sequence's mask
// is a bidirectional prefix over a causal rest (dispatch.h; causal and full
// are its ends), applied through SeqShard::mask_pos.
// A group whose plan says all-to-all runs Ulysses instead
// (ulysses_attention.h); GroupAttentionForward/Backward pick by args.comm_kind.
// `comm` may be nullptr for degree 1. Collective over `comm`.
#pragma once

#include "exec/communicator.h"
#include "exec/dispatch.h"
#include "fcp/types.h"

namespace fcp::exec {

// Which kernels compute each (query piece, key piece) block.
enum class AttentionKernels { kFast, kReference };

struct RingAttentionArgs {
  Communicator* comm = nullptr;                       // group communicator
  const std::vector<ShardLayout>* layouts = nullptr;  // every rank's shard
  int heads = 1;
  int head_dim = 1;
  AttentionKernels kernels = AttentionKernels::kFast;
  CommKind comm_kind = CommKind::kRing;  // the plan's group.comm
  // false: no Progress() calls between slices (the overlap test's control).
  bool drive_progress = true;
  // When set, wall seconds are added here (not thread-safe; one per rank).
  struct Timing {
    double compute_s = 0;   // attention kernels
    double progress_s = 0;  // inside Communicator::Progress()
    double wait_s = 0;      // inside Wait() after the compute of a step
    std::vector<double> forward_step_compute_s;  // per ring step, forward
  }* timing = nullptr;
};

// Query rows per compute slice between two progress polls.
inline constexpr int kProgressRows = 64;

// out: [H][T][dh], lse: [H][T] (natural log).
void RingAttentionForward(const RingAttentionArgs& args, const float* q,
                          const float* k, const float* v, float* out,
                          float* lse);

// Given the final out/lse of this rank's rows and dout, writes (overwrites)
// dq, dk, dv for this rank's rows.
void RingAttentionBackward(const RingAttentionArgs& args, const float* q,
                           const float* k, const float* v, const float* out,
                           const float* lse, const float* dout, float* dq,
                           float* dk, float* dv);

// Ring or Ulysses by args.comm_kind (same contracts as the ring functions).
void GroupAttentionForward(const RingAttentionArgs& args, const float* q,
                           const float* k, const float* v, float* out,
                           float* lse);
void GroupAttentionBackward(const RingAttentionArgs& args, const float* q,
                            const float* k, const float* v, const float* out,
                            const float* lse, const float* dout, float* dq,
                            float* dk, float* dv);

}  // namespace fcp::exec
