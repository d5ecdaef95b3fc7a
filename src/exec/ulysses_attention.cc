#include "exec/ulysses_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fcp/check.h"
#include "kernels/attention.h"

namespace fcp::exec {
namespace {

// Tags of the exchanged tensors (distinct from the ring's 100..102).
enum Tag : int {
  kTagQ = 200,
  kTagK,
  kTagV,
  kTagOut,
  kTagDout,
  kTagLse,  // to head shards
  kTagBackOut = 210,
  kTagBackLse,
  kTagDq,
  kTagDk,
  kTagDv  // back to tokens
};

struct Group {
  Communicator* comm = nullptr;
  int me = 0, degree = 1, heads = 1, dh = 1;
  const std::vector<ShardLayout>* layouts = nullptr;
  int64_t tokens(int r) const { return (*layouts)[r].num_tokens; }
  int head_begin(int r) const { return UlyssesHeadBegin(heads, degree, r); }
  int num_heads(int r) const { return head_begin(r + 1) - head_begin(r); }
};

Group MakeGroup(const RingAttentionArgs& a) {
  FCP_CHECK(a.comm != nullptr && a.layouts != nullptr);
  Group g;
  g.comm = a.comm;
  g.me = a.comm->rank();
  g.degree = a.comm->size();
  g.heads = a.heads;
  g.dh = a.head_dim;
  g.layouts = a.layouts;
  FCP_CHECK(static_cast<int>(a.layouts->size()) == g.degree);
  return g;
}

// Per source rank r: my heads' rows of r's tokens, [num_heads(me)][T_r][width].
using HeadShards = std::vector<std::vector<float>>;

// All-to-all: token-sharded src [H][T_me][width] -> head shards.
HeadShards ToHeadShards(const Group& g, const float* src, int width, int tag) {
  HeadShards dst(g.degree);
  std::vector<RequestId> reqs;
  const int64_t Tm = g.tokens(g.me);
  for (int r = 0; r < g.degree; ++r) {
    dst[r].assign(static_cast<size_t>(g.num_heads(g.me)) * g.tokens(r) * width,
                  0.0f);
    const float* mine = src + static_cast<size_t>(g.head_begin(r)) * Tm * width;
    const size_t send_floats = static_cast<size_t>(g.num_heads(r)) * Tm * width;
    if (r == g.me) {
      if (send_floats) std::memcpy(dst[r].data(), mine, send_floats * 4);
      continue;
    }
    if (!dst[r].empty())
      reqs.push_back(g.comm->Irecv(dst[r].data(), dst[r].size() * 4, r, tag));
    if (send_floats)
      reqs.push_back(g.comm->Isend(mine, send_floats * 4, r, tag));
  }
  g.comm->WaitAll(reqs);
  return dst;
}

// The inverse all-to-all: head shards -> token-sharded dst [H][T_me][width].
void FromHeadShards(const Group& g, const HeadShards& src, int width, int tag,
                    float* dst) {
  std::vector<RequestId> reqs;
  const int64_t Tm = g.tokens(g.me);
  for (int r = 0; r < g.degree; ++r) {
    float* theirs = dst + static_cast<size_t>(g.head_begin(r)) * Tm * width;
    const size_t recv_floats = static_cast<size_t>(g.num_heads(r)) * Tm * width;
    if (r == g.me) {
      if (recv_floats) std::memcpy(theirs, src[r].data(), recv_floats * 4);
      continue;
    }
    if (recv_floats)
      reqs.push_back(g.comm->Irecv(theirs, recv_floats * 4, r, tag));
    if (!src[r].empty())
      reqs.push_back(g.comm->Isend(src[r].data(), src[r].size() * 4, r, tag));
  }
  g.comm->WaitAll(reqs);
}

// One whole sequence (index i of the layouts) gathered from every rank's
// pieces, in rank order: row j of the gathered tensors is (rank, row).
struct Gathered {
  std::vector<int64_t> pos, mask_pos;
  std::vector<std::pair<int, int64_t>> rows;  // (source rank, shard row)
  bool causal = true;
};

Gathered GatherSequence(const Group& g, size_t i) {
  Gathered s;
  for (int r = 0; r < g.degree; ++r) {
    const SeqShard& piece = (*g.layouts)[r].seqs[i];
    s.causal = piece.causal();
    for (int64_t j = 0; j < piece.size(); ++j) {
      s.pos.push_back(piece.pos[j]);
      s.mask_pos.push_back(piece.mask_pos[j]);
      s.rows.push_back({r, piece.offset + j});
    }
  }
  return s;
}

// Copies head `h` (local index) of the gathered rows out of / into shards.
void Gather(const Group& g, const Gathered& s, const HeadShards& shards, int h,
            int width, float* dst) {
  for (size_t j = 0; j < s.rows.size(); ++j) {
    const auto [r, row] = s.rows[j];
    const float* p =
        shards[r].data() + (static_cast<size_t>(h) * g.tokens(r) + row) * width;
    std::memcpy(dst + j * width, p, width * sizeof(float));
  }
}
void Scatter(const Group& g, const Gathered& s, const float* src, int h,
             int width, HeadShards& shards) {
  for (size_t j = 0; j < s.rows.size(); ++j) {
    const auto [r, row] = s.rows[j];
    float* p =
        shards[r].data() + (static_cast<size_t>(h) * g.tokens(r) + row) * width;
    std::memcpy(p, src + j * width, width * sizeof(float));
  }
}

HeadShards EmptyShards(const Group& g, int width) {
  HeadShards s(g.degree);
  for (int r = 0; r < g.degree; ++r)
    s[r].assign(static_cast<size_t>(g.num_heads(g.me)) * g.tokens(r) * width,
                0.0f);
  return s;
}

// q, k, v of this group in head shards (the first all-to-all of both passes).
struct QkvShards {
  HeadShards q, k, v;
};
QkvShards QkvToHeads(const Group& g, const float* q, const float* k,
                     const float* v) {
  return {ToHeadShards(g, q, g.dh, kTagQ), ToHeadShards(g, k, g.dh, kTagK),
          ToHeadShards(g, v, g.dh, kTagV)};
}

// Calls fn(sequence, local head) for every sequence of the group and every
// head of this rank.
template <typename Fn>
void ForEachSequenceHead(const Group& g, Fn&& fn) {
  const size_t num_seqs = (*g.layouts)[g.me].seqs.size();
  for (size_t i = 0; i < num_seqs; ++i) {
    const Gathered s = GatherSequence(g, i);
    for (int h = 0; h < g.num_heads(g.me); ++h) fn(s, h);
  }
}

}  // namespace

void UlyssesAttentionForward(const RingAttentionArgs& args, const float* q,
                             const float* k, const float* v, float* out,
                             float* lse) {
  const Group g = MakeGroup(args);
  const int dh = g.dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const QkvShards in = QkvToHeads(g, q, k, v);
  HeadShards os = EmptyShards(g, dh), ls = EmptyShards(g, 1);
  auto fn = args.kernels == AttentionKernels::kFast
                ? &kernels::AttentionForward
                : &kernels::ReferenceAttentionForward;
  std::vector<float> Q, K, V, O, L;
  ForEachSequenceHead(g, [&](const Gathered& s, int h) {
    const int n = static_cast<int>(s.rows.size());
    for (auto* t : {&Q, &K, &V, &O}) t->resize(static_cast<size_t>(n) * dh);
    L.resize(n);
    Gather(g, s, in.q, h, dh, Q.data());
    Gather(g, s, in.k, h, dh, K.data());
    Gather(g, s, in.v, h, dh, V.data());
    fn(Q.data(), K.data(), V.data(), n, n, dh, s.mask_pos.data(), s.pos.data(),
       s.causal, scale, O.data(), L.data());
    Scatter(g, s, O.data(), h, dh, os);
    Scatter(g, s, L.data(), h, 1, ls);
  });
  FromHeadShards(g, os, dh, kTagBackOut, out);
  FromHeadShards(g, ls, 1, kTagBackLse, lse);
}

void UlyssesAttentionBackward(const RingAttentionArgs& args, const float* q,
                              const float* k, const float* v, const float* out,
                              const float* lse, const float* dout, float* dq,
                              float* dk, float* dv) {
  const Group g = MakeGroup(args);
  const int dh = g.dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const QkvShards in = QkvToHeads(g, q, k, v);
  const HeadShards os = ToHeadShards(g, out, dh, kTagOut);
  const HeadShards dos = ToHeadShards(g, dout, dh, kTagDout);
  const HeadShards ls = ToHeadShards(g, lse, 1, kTagLse);
  HeadShards dqs = EmptyShards(g, dh), dks = EmptyShards(g, dh),
             dvs = EmptyShards(g, dh);
  auto fn = args.kernels == AttentionKernels::kFast
                ? &kernels::AttentionBackward
                : &kernels::ReferenceAttentionBackward;
  std::vector<float> Q, K, V, O, dO, L, dQ, dK, dV;
  ForEachSequenceHead(g, [&](const Gathered& s, int h) {
    const int n = static_cast<int>(s.rows.size());
    const size_t nd = static_cast<size_t>(n) * dh;
    for (auto* t : {&Q, &K, &V, &O, &dO}) t->resize(nd);
    for (auto* t : {&dQ, &dK, &dV}) t->assign(nd, 0.0f);
    L.resize(n);
    Gather(g, s, in.q, h, dh, Q.data());
    Gather(g, s, in.k, h, dh, K.data());
    Gather(g, s, in.v, h, dh, V.data());
    Gather(g, s, os, h, dh, O.data());
    Gather(g, s, dos, h, dh, dO.data());
    Gather(g, s, ls, h, 1, L.data());
    fn(Q.data(), K.data(), V.data(), O.data(), dO.data(), L.data(), n, n, dh,
       s.mask_pos.data(), s.pos.data(), s.causal, scale, dQ.data(), dK.data(),
       dV.data());
    Scatter(g, s, dQ.data(), h, dh, dqs);
    Scatter(g, s, dK.data(), h, dh, dks);
    Scatter(g, s, dV.data(), h, dh, dvs);
  });
  FromHeadShards(g, dqs, dh, kTagDq, dq);
  FromHeadShards(g, dks, dh, kTagDk, dk);
  FromHeadShards(g, dvs, dh, kTagDv, dv);
}

}  // namespace fcp::exec
