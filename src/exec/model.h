// A small byte-level causal transformer with a hand-written backward, run on
// one rank's zigzag shard of a CP group (attention through ring attention).
//
// Architecture (pre-norm): embed[256 -> D]; per layer: x += Wo·Attn(RoPE(Wq·n),
// RoPE(Wk·n), Wv·n) with n = RMSNorm(x); x += W2·SiLU(W1·RMSNorm(x)); final
// RMSNorm and unembedding [D -> 256]. RoPE uses the token's global position in
// its sequence. Token t predicts token t+1 of the same sequence (the last
// token of a sequence has no target). All parameters live in one flat fp32
// vector (layout below) so that gradients are all-reduced in one call.
// Thread-safety: functions are reentrant over caller-owned buffers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/dispatch.h"
#include "exec/ring_attention.h"

namespace fcp::exec {

struct ModelConfig {
  int vocab = 256;  // byte-level
  int dim = 64;     // D; divisible by heads, head_dim = D / heads even
  int heads = 4;
  int layers = 2;
  int ffn = 128;  // F
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;
};

// Error naming the field ("model.dim: ...") or nullopt.
std::optional<std::string> ValidateModelConfig(const ModelConfig& cfg);

// Offsets (in floats) of each tensor in the flat parameter vector. Matrices
// are [in, out] row-major (y = x · W).
struct LayerParams {
  size_t g1, wq, wk, wv, wo, g2, w1, w2;
};
struct ParamLayout {
  size_t embed = 0;  // [V, D]
  std::vector<LayerParams> layers;
  size_t gf = 0;                   // [D]
  size_t wout = 0;                 // [D, V]
  size_t total = 0;                // number of floats
  std::vector<size_t> norm_gains;  // offsets of RMSNorm gains (no weight decay)
};
ParamLayout MakeParamLayout(const ModelConfig& cfg);

// Deterministic initialisation (same on every rank for the same seed):
// N(0, 0.02) matrices (Wo, W2 scaled by 1/sqrt(2·layers)), gains 1.
std::vector<float> InitParams(const ModelConfig& cfg, uint64_t seed);

// One rank's tokens of a group: shard rows in layout order.
struct ShardBatch {
  std::vector<int32_t> tokens;   // [T] byte values
  std::vector<int32_t> targets;  // [T] next byte, or -1 (no target)
  std::vector<int64_t> pos;      // [T] global positions
  int64_t num_targets = 0;
};
ShardBatch MakeShardBatch(const ShardLayout& layout,
                          const std::vector<std::vector<uint8_t>>& sequences);

// Forward (and, when `grads` is non-null, backward) of one shard. Returns the
// sum of per-token cross-entropy (nats) over this shard's targets. Adds
// loss_scale · d(sum CE)/dparams into grads (so loss_scale = 1 / number of
// targets of the whole global batch gives the globally normalised loss).
// Collective over attn.comm (all group ranks call it together).
double ForwardBackward(const ModelConfig& cfg, const ParamLayout& layout,
                       const float* params, const ShardBatch& batch,
                       const RingAttentionArgs& attn, float loss_scale,
                       float* grads);

// AdamW (decoupled weight decay; gains are not decayed). Thread-safety: none.
struct AdamWOptions {
  float lr = 3e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};
class AdamW {
 public:
  AdamW(const ParamLayout& layout, AdamWOptions options);
  // params -= update(grads); step count starts at 1.
  void Step(float* params, const float* grads);

 private:
  AdamWOptions opt_;
  std::vector<float> m_, v_;
  std::vector<uint8_t> decay_;
  int64_t step_ = 0;
};

}  // namespace fcp::exec
