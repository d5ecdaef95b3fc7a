// CPU attention kernels shared by the executor (ring attention) and the
// profiler. fp32, row-major, one head at a time. Thread-safety: pure functions
// over caller-owned buffers.
//
// Partial attention: a query block attends to one key/value block; results of
// several blocks are combined with MergePartial (online softmax), which is what
// ring attention does as KV blocks arrive.
#pragma once

#include <cstdint>

namespace fcp::kernels {

// q: [nq, dh], k, v: [nk, dh]. q_pos/k_pos: global token positions (causal mask
// hides key j from query i when k_pos[j] > q_pos[i]; ignored when !causal).
// Writes out: [nq, dh] (normalised for this block alone) and lse: [nq]
// (natural-log sum of exp of scaled scores; -inf for a row with no visible key,
// whose out row is then 0). scale is usually 1/sqrt(dh).
void AttentionForward(const float* q, const float* k, const float* v, int nq,
                      int nk, int dh, const int64_t* q_pos,
                      const int64_t* k_pos, bool causal, float scale,
                      float* out, float* lse);

// Folds a second partial result (out_b, lse_b) into (out, lse), in place.
void MergePartial(float* out, float* lse, const float* out_b,
                  const float* lse_b, int nq, int dh);

// Backward of one (query block, key block) pair given the FINAL out/lse of the
// query rows over all key blocks (FlashAttention-2 style). Accumulates (+=)
// into dq: [nq, dh], dk, dv: [nk, dh]. dout: [nq, dh].
void AttentionBackward(const float* q, const float* k, const float* v,
                       const float* out, const float* dout, const float* lse,
                       int nq, int nk, int dh, const int64_t* q_pos,
                       const int64_t* k_pos, bool causal, float scale,
                       float* dq, float* dk, float* dv);

// Naive O(nq·nk·dh) reference of the same contracts (tests and oracles).
void ReferenceAttentionForward(const float* q, const float* k, const float* v,
                               int nq, int nk, int dh, const int64_t* q_pos,
                               const int64_t* k_pos, bool causal, float scale,
                               float* out, float* lse);
void ReferenceAttentionBackward(const float* q, const float* k, const float* v,
                                const float* out, const float* dout,
                                const float* lse, int nq, int nk, int dh,
                                const int64_t* q_pos, const int64_t* k_pos,
                                bool causal, float scale, float* dq, float* dk,
                                float* dv);

// True when the AVX2+FMA code path is used on this CPU (decided once at first
// call from cpuid); otherwise a baseline-ISA build of the same tiles runs.
bool AttentionUsesAvx2();
// Testing/benchmarking only: true forces the baseline-ISA path, false restores
// the automatic choice. Not thread-safe with concurrent kernel calls.
void ForceBaselineIsaForTesting(bool force);

// FLOPs of one forward call counted as 4·nq·nk·dh (two GEMMs) scaled by the
// visible fraction of (query, key) pairs; backward is 2.5x that (5 GEMMs of
// which one recomputes S). Used by benchmarks and the profiler.
double AttentionForwardFlops(int64_t visible_pairs, int dh);
double AttentionBackwardFlops(int64_t visible_pairs, int dh);

}  // namespace fcp::kernels
