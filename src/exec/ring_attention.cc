#include "exec/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "exec/clock.h"
#include "exec/ulysses_attention.h"
#include "fcp/check.h"
#include "kernels/attention.h"

namespace fcp::exec {
namespace {

constexpr int kTagFwdKv = 100;
constexpr int kTagBwdKv = 101;
constexpr int kTagDkv = 102;

struct Ring {
  int me = 0;
  int degree = 1;
  int heads = 1;
  int dh = 1;
  const std::vector<ShardLayout>* layouts = nullptr;
  int64_t tokens(int r) const { return (*layouts)[r].num_tokens; }
  // K then V, each [H][T_r][dh].
  size_t kv_floats(int r) const {
    return 2 * static_cast<size_t>(heads) * tokens(r) * dh;
  }
};

Ring MakeRing(const RingAttentionArgs& a) {
  Ring ring;
  ring.me = a.comm ? a.comm->rank() : 0;
  ring.degree = a.comm ? a.comm->size() : 1;
  ring.heads = a.heads;
  ring.dh = a.head_dim;
  ring.layouts = a.layouts;
  FCP_CHECK(a.layouts && static_cast<int>(a.layouts->size()) == ring.degree);
  return ring;
}

// True when no query of `q` can see any key of `k` (all keys later than the
// last query's mask position).
bool FullyMasked(const SeqShard& q, const SeqShard& k) {
  return q.causal() && k.pos.front() > q.mask_pos.back();
}

// Drives the transfers in flight between two compute slices.
void Poll(const RingAttentionArgs& a) {
  if (!a.comm || !a.drive_progress) return;
  const double t0 = a.timing ? NowS() : 0;
  a.comm->Progress();
  if (a.timing) a.timing->progress_s += NowS() - t0;
}

void TimedWait(const RingAttentionArgs& a, RequestId send, RequestId recv) {
  const double t0 = a.timing ? NowS() : 0;
  if (send >= 0) a.comm->Wait(send);
  if (recv >= 0) a.comm->Wait(recv);
  if (a.timing) a.timing->wait_s += NowS() - t0;
}

void PackKv(const Ring& ring, const float* k, const float* v, float* buf) {
  const size_t n =
      static_cast<size_t>(ring.heads) * ring.tokens(ring.me) * ring.dh;
  if (n == 0) return;
  std::memcpy(buf, k, n * sizeof(float));
  std::memcpy(buf + n, v, n * sizeof(float));
}

}  // namespace

void RingAttentionForward(const RingAttentionArgs& args, const float* q,
                          const float* k, const float* v, float* out,
                          float* lse) {
  const Ring ring = MakeRing(args);
  const int H = ring.heads, dh = ring.dh, d = ring.degree;
  const int64_t T = ring.tokens(ring.me);
  const ShardLayout& mine = (*ring.layouts)[ring.me];
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::fill(out, out + static_cast<size_t>(H) * T * dh, 0.0f);
  std::fill(lse, lse + static_cast<size_t>(H) * T,
            -std::numeric_limits<float>::infinity());

  size_t max_kv = 0;
  for (int r = 0; r < d; ++r) max_kv = std::max(max_kv, ring.kv_floats(r));
  std::vector<float> cur(max_kv), nxt(max_kv);
  PackKv(ring, k, v, cur.data());
  int64_t max_piece = 0;
  for (const auto& s : mine.seqs) max_piece = std::max(max_piece, s.size());
  max_piece = std::min<int64_t>(max_piece, kProgressRows);
  std::vector<float> part_out(static_cast<size_t>(max_piece) * dh);
  std::vector<float> part_lse(max_piece);

  const int next = (ring.me + 1) % d, prev = (ring.me + d - 1) % d;
  for (int t = 0; t < d; ++t) {
    const int owner = (ring.me - t + d) % d;
    const int incoming = (owner - 1 + d) % d;
    RequestId send = -1, recv = -1;
    if (t < d - 1) {
      recv = args.comm->Irecv(nxt.data(), ring.kv_floats(incoming) * 4, prev,
                              kTagFwdKv);
      send = args.comm->Isend(cur.data(), ring.kv_floats(owner) * 4, next,
                              kTagFwdKv);
    }
    const ShardLayout& theirs = (*ring.layouts)[owner];
    const int64_t To = theirs.num_tokens;
    const float* kb = cur.data();
    const float* vb = cur.data() + static_cast<size_t>(H) * To * dh;
    const double c0 = args.timing ? NowS() : 0;
    const double polled_s = args.timing ? args.timing->progress_s : 0;
    for (size_t i = 0; i < mine.seqs.size(); ++i) {
      const SeqShard& qs = mine.seqs[i];
      const SeqShard& ks = theirs.seqs[i];
      if (qs.size() == 0 || ks.size() == 0 || FullyMasked(qs, ks)) continue;
      const int nq = static_cast<int>(qs.size());
      const int nk = static_cast<int>(ks.size());
      auto fn = args.kernels == AttentionKernels::kFast
                    ? &kernels::AttentionForward
                    : &kernels::ReferenceAttentionForward;
      for (int h = 0; h < H; ++h) {
        const float* kp = kb + (static_cast<size_t>(h) * To + ks.offset) * dh;
        const float* vp = vb + (static_cast<size_t>(h) * To + ks.offset) * dh;
        for (int r0 = 0; r0 < nq; r0 += kProgressRows) {
          const int rows = std::min(kProgressRows, nq - r0);
          const size_t row = static_cast<size_t>(h) * T + qs.offset + r0;
          fn(q + row * dh, kp, vp, rows, nk, dh, qs.mask_pos.data() + r0,
             ks.pos.data(), qs.causal(), scale, part_out.data(),
             part_lse.data());
          kernels::MergePartial(out + row * dh, lse + row, part_out.data(),
                                part_lse.data(), rows, dh);
          if (t < d - 1) Poll(args);
        }
      }
    }
    if (args.timing) {
      const double c = NowS() - c0 - (args.timing->progress_s - polled_s);
      args.timing->compute_s += c;
      args.timing->forward_step_compute_s.push_back(c);
    }
    if (t < d - 1) {
      TimedWait(args, send, recv);
      std::swap(cur, nxt);
    }
  }
}

// Long because: the ring's step loop with its double-buffered dK/dV
// accumulators in flight.
void RingAttentionBackward(const RingAttentionArgs& args, const float* q,
                           const float* k, const float* v, const float* out,
                           const float* lse, const float* dout, float* dq,
                           float* dk, float* dv) {
  const Ring ring = MakeRing(args);
  const int H = ring.heads, dh = ring.dh, d = ring.degree;
  const int64_t T = ring.tokens(ring.me);
  const ShardLayout& mine = (*ring.layouts)[ring.me];
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::fill(dq, dq + static_cast<size_t>(H) * T * dh, 0.0f);

  size_t max_kv = 0;
  for (int r = 0; r < d; ++r) max_kv = std::max(max_kv, ring.kv_floats(r));
  std::vector<float> cur(max_kv), nxt(max_kv);
  PackKv(ring, k, v, cur.data());
  // dK/dV accumulators travelling with the blocks; two so that a send can be
  // in flight while the next block is computed.
  std::vector<float> contrib[2] = {std::vector<float>(max_kv),
                                   std::vector<float>(max_kv)};
  std::vector<float> incoming_dkv(max_kv);
  RequestId contrib_send[2] = {-1, -1};

  const int next = (ring.me + 1) % d, prev = (ring.me + d - 1) % d;
  for (int t = 0; t < d; ++t) {
    const int owner = (ring.me - t + d) % d;
    const int incoming = (owner - 1 + d) % d;
    RequestId kv_send = -1, kv_recv = -1, dkv_recv = -1;
    if (t < d - 1) {
      kv_recv = args.comm->Irecv(nxt.data(), ring.kv_floats(incoming) * 4, prev,
                                 kTagBwdKv);
      kv_send = args.comm->Isend(cur.data(), ring.kv_floats(owner) * 4, next,
                                 kTagBwdKv);
    }
    if (t > 0) {
      // prev's contribution to this block (computed at its step t-1).
      dkv_recv = args.comm->Irecv(incoming_dkv.data(),
                                  ring.kv_floats(owner) * 4, prev, kTagDkv);
    }
    std::vector<float>& acc = contrib[t % 2];
    if (contrib_send[t % 2] >= 0) args.comm->Wait(contrib_send[t % 2]);
    contrib_send[t % 2] = -1;
    std::fill(acc.begin(), acc.begin() + ring.kv_floats(owner), 0.0f);

    const ShardLayout& theirs = (*ring.layouts)[owner];
    const int64_t To = theirs.num_tokens;
    const size_t half = static_cast<size_t>(H) * To * dh;
    const float* kb = cur.data();
    const float* vb = cur.data() + half;
    const double c0 = args.timing ? NowS() : 0;
    const double polled_s = args.timing ? args.timing->progress_s : 0;
    auto fn = args.kernels == AttentionKernels::kFast
                  ? &kernels::AttentionBackward
                  : &kernels::ReferenceAttentionBackward;
    for (size_t i = 0; i < mine.seqs.size(); ++i) {
      const SeqShard& qs = mine.seqs[i];
      const SeqShard& ks = theirs.seqs[i];
      if (qs.size() == 0 || ks.size() == 0 || FullyMasked(qs, ks)) continue;
      const int nq = static_cast<int>(qs.size());
      const int nk = static_cast<int>(ks.size());
      for (int h = 0; h < H; ++h) {
        const size_t ko = (static_cast<size_t>(h) * To + ks.offset) * dh;
        for (int r0 = 0; r0 < nq; r0 += kProgressRows) {
          const int rows = std::min(kProgressRows, nq - r0);
          const size_t row = static_cast<size_t>(h) * T + qs.offset + r0;
          const size_t qo = row * dh;
          fn(q + qo, kb + ko, vb + ko, out + qo, dout + qo, lse + row, rows, nk,
             dh, qs.mask_pos.data() + r0, ks.pos.data(), qs.causal(), scale,
             dq + qo, acc.data() + ko, acc.data() + half + ko);
          Poll(args);
        }
      }
    }
    if (args.timing)
      args.timing->compute_s +=
          NowS() - c0 - (args.timing->progress_s - polled_s);
    if (t > 0) {
      TimedWait(args, -1, dkv_recv);
      const size_t n = ring.kv_floats(owner);
      for (size_t j = 0; j < n; ++j) acc[j] += incoming_dkv[j];
    }
    if (d > 1) {
      contrib_send[t % 2] = args.comm->Isend(
          acc.data(), ring.kv_floats(owner) * 4, next, kTagDkv);
    } else {
      // Degree 1: the block is our own and complete.
      std::memcpy(dk, acc.data(), half * sizeof(float));
      std::memcpy(dv, acc.data() + half, half * sizeof(float));
    }
    if (t < d - 1) {
      TimedWait(args, kv_send, kv_recv);
      std::swap(cur, nxt);
    }
  }
  if (d > 1) {
    // Our own block's accumulator returns from prev after d hops.
    const size_t n = ring.kv_floats(ring.me);
    std::vector<float> final_dkv(n);
    TimedWait(args, -1,
              args.comm->Irecv(final_dkv.data(), n * 4, prev, kTagDkv));
    const size_t half = n / 2;
    std::memcpy(dk, final_dkv.data(), half * sizeof(float));
    std::memcpy(dv, final_dkv.data() + half, half * sizeof(float));
    for (RequestId& r : contrib_send)
      if (r >= 0) args.comm->Wait(r);
  }
}

void GroupAttentionForward(const RingAttentionArgs& args, const float* q,
                           const float* k, const float* v, float* out,
                           float* lse) {
  if (args.comm_kind == CommKind::kAllToAll && args.comm)
    UlyssesAttentionForward(args, q, k, v, out, lse);
  else
    RingAttentionForward(args, q, k, v, out, lse);
}

void GroupAttentionBackward(const RingAttentionArgs& args, const float* q,
                            const float* k, const float* v, const float* out,
                            const float* lse, const float* dout, float* dq,
                            float* dk, float* dv) {
  if (args.comm_kind == CommKind::kAllToAll && args.comm)
    UlyssesAttentionBackward(args, q, k, v, out, lse, dout, dq, dk, dv);
  else
    RingAttentionBackward(args, q, k, v, out, lse, dout, dq, dk, dv);
}

}  // namespace fcp::exec
