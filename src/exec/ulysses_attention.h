// Ulysses (DeepSpeed-style) sequence-parallel attention for CP groups whose
// plan says `comm: all-to-all`.
//
// Every rank holds its zigzag shard of the group's tokens for all heads. One
// all-to-all gives rank j all tokens of heads [j·H/d, (j+1)·H/d) (integer
// split, so any degree works: with d > H some ranks get no head and only
// relay), attention then runs on whole sequences locally, and a second
// all-to-all returns the output rows to their owners. The backward exchanges
// q, k, v, out, dout and lse the same way, runs the kernels' backward on
// whole sequences and returns dq, dk, dv. Masks as in dispatch.h.
// Collective over args.comm; same contracts as RingAttentionForward/Backward.
#pragma once

#include "exec/ring_attention.h"

namespace fcp::exec {

// First head of rank `rank` in a group of `degree` ranks sharing `heads`.
inline int UlyssesHeadBegin(int heads, int degree, int rank) {
  return static_cast<int>(static_cast<int64_t>(heads) * rank / degree);
}

void UlyssesAttentionForward(const RingAttentionArgs& args, const float* q,
                             const float* k, const float* v, float* out,
                             float* lse);

void UlyssesAttentionBackward(const RingAttentionArgs& args, const float* q,
                              const float* k, const float* v, const float* out,
                              const float* lse, const float* dout, float* dq,
                              float* dk, float* dv);

}  // namespace fcp::exec
