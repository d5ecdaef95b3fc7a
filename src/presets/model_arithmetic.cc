// Parameter counts and element-wise traffic (include/fcp/model_arithmetic.h).
#include "fcp/model_arithmetic.h"

namespace fcp {
namespace {

double QueryWidth(const ModelShape& s) {
  return static_cast<double>(s.q_heads) * s.head_dim;
}
double KeyValueWidth(const ModelShape& s) {
  return static_cast<double>(s.kv_heads) * s.head_dim;
}

}  // namespace

double LayerParams(const ModelShape& s) {
  const double h = s.hidden;
  const double dq = QueryWidth(s), dkv = KeyValueWidth(s);
  return h * (dq + 2.0 * dkv) + dq * h + 3.0 * h * s.ffn;
}

double BackboneParams(const ModelShape& s) {
  return s.layers * LayerParams(s) +
         2.0 * s.hidden * static_cast<double>(s.vocab);
}

double VisionParams(const ModelShape& s) {
  return 12.0 * s.vision_layers * static_cast<double>(s.vision_hidden) *
         s.vision_hidden;
}

double ElementwiseBytesPerToken(const ModelShape& s) {
  const double h = s.hidden, f = s.ffn;
  return 2.0 *
         (8.0 * h + 3.0 * f + 2.0 * QueryWidth(s) + 2.0 * KeyValueWidth(s));
}

}  // namespace fcp
