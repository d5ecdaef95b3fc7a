// The `cpu` profiling target: times one CP rank's share of a small transformer
// layer with the real kernels (src/kernels) and the ring's KV traffic as
// in-process copies. Internal to the profiler. Not thread-safe with other
// timing work (it uses a helper thread and sets OpenBLAS to 1 thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fcp/types.h"

namespace fcp::profile {

// The small layer the cpu target runs (fp32).
struct CpuLayerShape {
  int hidden = 256;
  int q_heads = 4;
  int kv_heads = 2;
  int head_dim = 64;
  int ffn = 768;  // SwiGLU: gate + up + down
};

// One rank (rank 0 of the ring, zigzag chunks) of a group of degree `degree`
// running `sequences`, measured `repeats` times (after one warm-up); the
// minimum over repeats of thread CPU time, in seconds (see cpu_target.cc).
struct CpuRankTiming {
  double compute_s = 0;  // kernels only (GEMMs + d ring steps fwd/bwd)
  double comm_s = 0;     // ring copies only (0 when degree == 1)
  double total_s = 0;    // kernels with the copies overlapped on a helper thread
  double attention_s = 0;  // attention kernels only (part of compute_s)
  int64_t tokens_on_rank = 0;
  double comm_bytes = 0;   // bytes one rank sends over the step
};
CpuRankTiming MeasureCpuRank(const CpuLayerShape& shape,
                             const std::vector<Sequence>& sequences, int degree,
                             int repeats);

// In-process copy bandwidth (bytes/s, CPU time of the copy) for `bytes`-sized
// buffers.
double MeasureCopyBandwidth(size_t bytes, int repeats);

// Activation bytes per token and parameter bytes (weights, grads, Adam fp32)
// of the layer, for the cost model's memory fields.
double CpuLayerMemPerToken(const CpuLayerShape& shape);
double CpuLayerStaticBytes(const CpuLayerShape& shape);

}  // namespace fcp::profile
