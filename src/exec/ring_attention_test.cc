#include "exec/ring_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/attention.h"

namespace fcp::exec {
namespace {

// Full tensors of one sequence: [H][s][dh].
struct SeqTensors {
  std::vector<float> q, k, v, dout;
};

void CheckRingAgainstReference(const std::vector<int64_t>& lengths,
                               const std::vector<bool>& causal, int degree,
                               AttentionKernels kernels, uint64_t seed) {
  const int H = 2, dh = 8;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<SeqTensors> full(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    const size_t n = static_cast<size_t>(H) * lengths[s] * dh;
    for (auto* t : {&full[s].q, &full[s].k, &full[s].v, &full[s].dout}) {
      t->resize(n);
      for (auto& x : *t) x = nd(rng);
    }
  }
  // Oracle: reference kernels on whole sequences.
  std::vector<SeqTensors> want(lengths.size());  // q=out, k=dq, v=dk, dout=dv
  std::vector<std::vector<float>> want_lse(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int len = static_cast<int>(lengths[s]);
    std::vector<int64_t> pos(len);
    for (int i = 0; i < len; ++i) pos[i] = i;
    const size_t n = static_cast<size_t>(H) * len * dh;
    want[s].q.assign(n, 0);
    want[s].k.assign(n, 0);
    want[s].v.assign(n, 0);
    want[s].dout.assign(n, 0);
    want_lse[s].assign(static_cast<size_t>(H) * len, 0);
    for (int h = 0; h < H; ++h) {
      const size_t o = static_cast<size_t>(h) * len * dh;
      kernels::ReferenceAttentionForward(
          &full[s].q[o], &full[s].k[o], &full[s].v[o], len, len, dh,
          pos.data(), pos.data(), causal[s], scale, &want[s].q[o],
          &want_lse[s][static_cast<size_t>(h) * len]);
      kernels::ReferenceAttentionBackward(
          &full[s].q[o], &full[s].k[o], &full[s].v[o], &want[s].q[o],
          &full[s].dout[o], &want_lse[s][static_cast<size_t>(h) * len], len,
          len, dh, pos.data(), pos.data(), causal[s], scale, &want[s].k[o],
          &want[s].v[o], &want[s].dout[o]);
    }
  }
  std::vector<int> ids(lengths.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  const auto layouts = ZigzagLayouts(lengths, causal, ids, degree);

  RunFakeWorld(degree, [&](Communicator& comm) {
    const ShardLayout& me = layouts[comm.rank()];
    const int64_t T = me.num_tokens;
    const size_t n = static_cast<size_t>(H) * T * dh;
    // Gather local rows (head-major) from the full tensors.
    auto local = [&](auto member) {
      std::vector<float> x(n);
      for (const SeqShard& sh : me.seqs)
        for (int h = 0; h < H; ++h)
          for (int64_t j = 0; j < sh.size(); ++j)
            for (int c = 0; c < dh; ++c)
              x[(h * T + sh.offset + j) * dh + c] =
                  (full[sh.seq].*member)[(h * sh.seq_len + sh.pos[j]) * dh + c];
      return x;
    };
    auto q = local(&SeqTensors::q), k = local(&SeqTensors::k),
         v = local(&SeqTensors::v), dout = local(&SeqTensors::dout);
    std::vector<float> out(n), lse(static_cast<size_t>(H) * T), dq(n), dk(n),
        dv(n);
    RingAttentionArgs args;
    args.comm = degree > 1 ? &comm : nullptr;
    args.layouts = &layouts;
    args.heads = H;
    args.head_dim = dh;
    args.kernels = kernels;
    RingAttentionForward(args, q.data(), k.data(), v.data(), out.data(),
                         lse.data());
    RingAttentionBackward(args, q.data(), k.data(), v.data(), out.data(),
                          lse.data(), dout.data(), dq.data(), dk.data(),
                          dv.data());
    double max_err = 0;
    for (const SeqShard& sh : me.seqs)
      for (int h = 0; h < H; ++h)
        for (int64_t j = 0; j < sh.size(); ++j) {
          const size_t lo = (h * T + sh.offset + j);
          const size_t go = (h * sh.seq_len + sh.pos[j]);
          EXPECT_NEAR(lse[lo], want_lse[sh.seq][go], 1e-4);
          for (int c = 0; c < dh; ++c) {
            max_err = std::max<double>(
                max_err, std::fabs(out[lo * dh + c] - want[sh.seq].q[go * dh + c]));
            max_err = std::max<double>(
                max_err, std::fabs(dq[lo * dh + c] - want[sh.seq].k[go * dh + c]));
            max_err = std::max<double>(
                max_err, std::fabs(dk[lo * dh + c] - want[sh.seq].v[go * dh + c]));
            max_err = std::max<double>(
                max_err,
                std::fabs(dv[lo * dh + c] - want[sh.seq].dout[go * dh + c]));
          }
        }
    // fp32 tolerance: values are O(1), sums over <= 60 keys.
    EXPECT_LT(max_err, 2e-4) << "degree " << degree << " rank " << comm.rank();
  });
}

TEST(RingAttention, MatchesSingleProcessReferenceDegrees1To5) {
  const std::vector<int64_t> lengths = {37, 3, 60, 11};
  const std::vector<bool> causal = {true, true, false, true};
  for (int d = 1; d <= 5; ++d) {
    SCOPED_TRACE(d);
    CheckRingAgainstReference(lengths, causal, d, AttentionKernels::kFast, d);
    CheckRingAgainstReference(lengths, causal, d, AttentionKernels::kReference,
                              100 + d);
  }
}

TEST(RingAttention, SequenceShorterThanTwoChunksPerRank) {
  // s = 3 on d = 4: several ranks hold nothing of it.
  CheckRingAgainstReference({3, 9}, {true, false}, 4, AttentionKernels::kFast,
                            7);
}

}  // namespace
}  // namespace fcp::exec
