// Ring attention over a CP group (DESIGN.md §8), zigzag-sharded sequences.
//
// Layout: every tensor is head-major, [heads][T][head_dim] where T is this
// rank's shard size (layouts[comm.rank()].num_tokens); lse is [heads][T].
// Forward: KV blocks travel around the ring (rank i sends to i+1, receives
// from i-1); the next block's non-blocking send/recv is posted before the
// current block's attention is computed, so the transfer overlaps compute.
// Backward: KV blocks travel the same way; each block's dK/dV accumulator
// follows it one hop behind and returns to its owner after d hops.
// Attention is restricted to tokens of the same sequence; a sequence's mask
// is causal (by global positions) or full.
// `comm` may be nullptr for degree 1. Collective over `comm`.
#pragma once

#include "exec/communicator.h"
#include "exec/dispatch.h"

namespace fcp::exec {

// Which kernels compute each (query piece, key piece) block.
enum class AttentionKernels { kFast, kReference };

struct RingAttentionArgs {
  Communicator* comm = nullptr;                  // group communicator
  const std::vector<ShardLayout>* layouts = nullptr;  // every rank's shard
  int heads = 1;
  int head_dim = 1;
  AttentionKernels kernels = AttentionKernels::kFast;
};

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

}  // namespace fcp::exec
