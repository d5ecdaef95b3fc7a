// The transformer's arithmetic that both the presets (the planner's
// coefficients derived from hardware figures) and the simulator use:
// parameter counts, element-wise traffic and kernels per layer. Pure
// functions of the model's shape; the cost formula itself is not here (the
// simulator stays independent of it). Defined in
// src/presets/model_arithmetic.cc.
#pragma once

#include "fcp/types.h"

namespace fcp {

// Kernels of one transformer layer in one pass (forward, recompute or half a
// backward): the launches the simulator charges and the presets fold into
// beta1.
inline constexpr int kKernelsPerLayerPass = 14;

// Backbone parameters of one transformer layer: h·(dq + 2·dkv) + dq·h + 3·h·f.
double LayerParams(const ModelShape& shape);
// All trainable backbone parameters: L·LayerParams + 2·h·V (embedding, LM
// head).
double BackboneParams(const ModelShape& shape);
// Vision encoder parameters: 12·vh²·vl (ViT layer: 4h² attention + 8h² MLP).
double VisionParams(const ModelShape& shape);
// HBM bytes per token of one layer's element-wise work (norms, RoPE, SwiGLU,
// residuals) in one forward-equivalent pass, bf16: 2·(8h + 3f + 2dq + 2dkv).
double ElementwiseBytesPerToken(const ModelShape& shape);

}  // namespace fcp
