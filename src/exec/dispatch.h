// Zigzag data dispatch for ring attention (DESIGN.md §8).
//
// A sequence of s tokens on a CP group of degree d is cut into 2d chunks,
// chunk c = [c*s/(2d), (c+1)*s/(2d)) (integer division: sizes differ by at
// most one token, no padding; with s < 2d some chunks are empty). Rank i of
// the group holds chunks i and 2d-1-i, which balances causal attention work.
// Token positions stay global (position within the sequence). A rank's shard
// packs its pieces of all the group's sequences back to back, in the group's
// sequence order. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace fcp::exec {

// One sequence's piece on one rank.
struct SeqShard {
  int seq = -1;                // index into the global batch
  int64_t seq_len = 0;         // full length of the sequence (tokens)
  bool causal = true;          // false: full (bidirectional) attention
  int64_t offset = 0;          // first row of this piece in the rank's shard
  std::vector<int64_t> pos;    // global positions, ascending
  int64_t size() const { return static_cast<int64_t>(pos.size()); }
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

// Layouts of every rank 0..degree-1 of a group processing sequences
// `seq_ids` with lengths `lengths[seq_ids[k]]` and masks `causal[seq_ids[k]]`.
std::vector<ShardLayout> ZigzagLayouts(const std::vector<int64_t>& lengths,
                                       const std::vector<bool>& causal,
                                       const std::vector<int>& seq_ids,
                                       int degree);

}  // namespace fcp::exec
