// Zigzag data dispatch for ring attention (docs/design.md §8).
//
// A sequence of s tokens on a CP group of degree d is cut into 2d chunks,
// chunk c = [c*s/(2d), (c+1)*s/(2d)) (integer division: sizes differ by at
// most one token, no padding; with s < 2d some chunks are empty). Rank i of
// the group holds chunks i and 2d-1-i, which balances causal attention work.
// Token positions stay global (position within the sequence). A rank's shard
// packs its pieces of all the group's sequences back to back, in the group's
// sequence order. Pure functions; thread-safe.
//
// Masks: a sequence's `eta` (the planner's mask factor, docs/design.md §2) is
// executed as a bidirectional prefix of p = round(sqrt(eta)·s) tokens over a
// causal rest: key j is visible to query i iff j <= max(i, p - 1). Its
// visible (query, key) pairs are s(s+1)/2 + p(p-1)/2 ≈ (1 + eta)·s²/2, the
// attention work the cost model charges ((1 + eta)·s²), and the same rule the
// simulator's datasets use (full blocks of b tokens on a causal mask give
// eta = Σ b²/s²; here one block, at the start). eta = 0 is causal, eta = 1
// is full attention.
#pragma once

#include <cstdint>
#include <vector>

namespace fcp::exec {

// One sequence's piece on one rank.
struct SeqShard {
  int seq = -1;              // index into the global batch
  int64_t seq_len = 0;       // full length of the sequence (tokens)
  int64_t prefix_len = 0;    // bidirectional prefix (0 causal, seq_len full)
  int64_t offset = 0;        // first row of this piece in the rank's shard
  std::vector<int64_t> pos;  // global positions, ascending
  // Positions the causal mask compares for this piece's queries:
  // max(pos, prefix_len - 1), ascending (the attention kernels' q_pos).
  std::vector<int64_t> mask_pos;
  int64_t size() const { return static_cast<int64_t>(pos.size()); }
  // False only for full attention (the kernels then skip the mask).
  bool causal() const { return prefix_len < seq_len; }
};

// Everything one rank holds of a group's sequences.
struct ShardLayout {
  std::vector<SeqShard> seqs;  // same sequences, same order, on every rank
  int64_t num_tokens = 0;
};

// First token of zigzag chunk `chunk` of a length-`len` sequence cut into
// `num_chunks` chunks (chunk == num_chunks gives len).
inline int64_t ChunkBegin(int64_t len, int num_chunks, int chunk) {
  return len * chunk / num_chunks;
}

// Length of the bidirectional prefix that mask factor `eta` in [0, 1] stands
// for on a sequence of `len` tokens: round(sqrt(eta)·len) (see above).
int64_t BidirectionalPrefix(int64_t len, double eta);

// Layouts of every rank 0..degree-1 of a group processing sequences
// `seq_ids` with lengths `lengths[seq_ids[k]]` and masks `eta[seq_ids[k]]`.
std::vector<ShardLayout> ZigzagLayouts(const std::vector<int64_t>& lengths,
                                       const std::vector<double>& eta,
                                       const std::vector<int>& seq_ids,
                                       int degree);

}  // namespace fcp::exec
