// The `cpu` profiling target: times one CP rank's share of a small transformer
// layer with the real kernels (src/kernels) and the ring's KV traffic through
// a RingTransport: by default in-process copies on a helper thread; the MPI
// executor library provides one over fcp::exec::Communicator
// (src/exec/profile_transport.h), so fcp_core stays free of MPI. Internal to
// the profiler. Not thread-safe with other timing work (the default transport
// uses a helper thread; OpenBLAS is set to 1 thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

// The ring's KV/dKV traffic of one rank: each step sends a message to the
// next rank of the ring and receives one of the same size from the previous
// rank, overlapped with the step's attention compute.
// Thread-safety: used by one thread at a time. Collective: an implementation
// over several processes needs every rank to make the same sequence of calls
// (MeasureCpuRank does, given the same arguments on every rank).
class RingTransport {
 public:
  virtual ~RingTransport() = default;
  // Starts one step, non-blocking: sends `bytes` from `send` to the next rank
  // and receives `bytes` into `recv` from the previous rank. Both buffers
  // must stay valid (and `send` unchanged) until Wait() returns. At most one
  // step is pending at a time.
  virtual void Start(const void* send, void* recv, size_t bytes) = 0;
  // Blocks until the pending step has completed (no-op when none is).
  virtual void Wait() = 0;
  // Seconds spent moving bytes since ResetBusy(), on the transport's own
  // clock: CPU time of the helper's copies (in-process), wall time inside
  // Start/Wait (MPI). This is the measured communication time.
  virtual double busy_s() const = 0;
  virtual void ResetBusy() = 0;
  // Aligns the ranks before a timed pass (a barrier); no-op in-process.
  virtual void Sync() {}
  // For reports: "in-process copy", "mpi, 2 ranks", ...
  virtual std::string Describe() const = 0;
};

// The default transport: the peer side is a persistent helper thread that
// memcpy's `send` into `recv` (one copy per step).
std::unique_ptr<RingTransport> MakeInProcessCopyTransport();

// One rank (rank 0 of the ring, zigzag chunks) of a group of degree `degree`
// running `sequences`, measured `repeats` times (after one warm-up); the
// minimum over repeats of thread CPU time, in seconds (see cpu_target.cc).
struct CpuRankTiming {
  double compute_s = 0;  // kernels only (GEMMs + d ring steps fwd/bwd)
  double comm_s = 0;     // ring copies only (0 when degree == 1)
  double total_s =
      0;  // kernels with the traffic overlapped (see cpu_target.cc)
  double attention_s = 0;  // attention kernels only (part of compute_s)
  int64_t tokens_on_rank = 0;
  double comm_bytes = 0;  // bytes one rank sends over the step
};
// `transport` (not owned) carries the ring traffic; nullptr = a fresh
// in-process copy transport. With a multi-process transport every rank must
// call this with the same arguments (they run the same loop in lockstep; each
// rank times its own copy of rank 0's share).
CpuRankTiming MeasureCpuRank(const CpuLayerShape& shape,
                             const std::vector<Sequence>& sequences, int degree,
                             int repeats, RingTransport* transport = nullptr);

// In-process copy bandwidth (bytes/s, CPU time of the copy) for `bytes`-sized
// buffers.
double MeasureCopyBandwidth(size_t bytes, int repeats);

// Bandwidth (bytes/s) of one ring step of `bytes` through `transport`:
// bytes / busy_s, the best of `repeats` (after one warm-up). Collective like
// MeasureCpuRank.
double MeasureTransportBandwidth(RingTransport& transport, size_t bytes,
                                 int repeats);

// Activation bytes per token and parameter bytes (weights, grads, Adam fp32)
// of the layer, for the cost model's memory fields.
double CpuLayerMemPerToken(const CpuLayerShape& shape);
double CpuLayerStaticBytes(const CpuLayerShape& shape);

}  // namespace fcp::profile
