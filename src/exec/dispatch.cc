#include "exec/dispatch.h"

#include <algorithm>
#include <cmath>

#include "fcp/check.h"

namespace fcp::exec {

int64_t BidirectionalPrefix(int64_t len, double eta) {
  FCP_CHECK(eta >= 0.0 && eta <= 1.0);
  const auto p = static_cast<int64_t>(std::llround(std::sqrt(eta) * len));
  return std::clamp<int64_t>(p, 0, len);
}

std::vector<ShardLayout> ZigzagLayouts(const std::vector<int64_t>& lengths,
                                       const std::vector<double>& eta,
                                       const std::vector<int>& seq_ids,
                                       int degree) {
  FCP_CHECK(degree >= 1);
  FCP_CHECK(lengths.size() == eta.size());
  std::vector<ShardLayout> out(degree);
  const int num_chunks = 2 * degree;
  for (int seq : seq_ids) {
    FCP_CHECK(seq >= 0 && seq < static_cast<int>(lengths.size()));
    const int64_t len = lengths[seq];
    FCP_CHECK(len >= 1);
    for (int r = 0; r < degree; ++r) {
      SeqShard shard;
      shard.seq = seq;
      shard.seq_len = len;
      shard.prefix_len = BidirectionalPrefix(len, eta[seq]);
      shard.offset = out[r].num_tokens;
      for (int chunk : {r, num_chunks - 1 - r}) {
        for (int64_t p = ChunkBegin(len, num_chunks, chunk);
             p < ChunkBegin(len, num_chunks, chunk + 1); ++p)
          shard.pos.push_back(p);
      }
      for (int64_t p : shard.pos)
        shard.mask_pos.push_back(std::max(p, shard.prefix_len - 1));
      out[r].num_tokens += shard.size();
      out[r].seqs.push_back(std::move(shard));
    }
  }
  return out;
}

}  // namespace fcp::exec
