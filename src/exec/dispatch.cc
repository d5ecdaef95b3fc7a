#include "exec/dispatch.h"

#include "fcp/check.h"

namespace fcp::exec {

std::vector<ShardLayout> ZigzagLayouts(const std::vector<int64_t>& lengths,
                                       const std::vector<bool>& causal,
                                       const std::vector<int>& seq_ids,
                                       int degree) {
  FCP_CHECK(degree >= 1);
  FCP_CHECK(lengths.size() == causal.size());
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
      shard.causal = causal[seq];
      shard.offset = out[r].num_tokens;
      for (int chunk : {r, num_chunks - 1 - r}) {
        for (int64_t p = ChunkBegin(len, num_chunks, chunk);
             p < ChunkBegin(len, num_chunks, chunk + 1); ++p)
          shard.pos.push_back(p);
      }
      out[r].num_tokens += shard.size();
      out[r].seqs.push_back(std::move(shard));
    }
  }
  return out;
}

}  // namespace fcp::exec
