// This CPU's theoretical peak fp32 FLOP/s, derived from /proc/cpuinfo:
//   peak = cores × GHz × FLOPs/cycle/core,
//   FLOPs/cycle/core = SIMD fp32 lanes × 2 (FMA = mul + add) × FMA pipes,
// with lanes = 16 (avx512f), 8 (avx/avx2), 4 (sse); FMA pipes = 2 when the fma
// flag is present (Haswell+, Zen), else mul and add on separate pipes (also
// 2 FLOPs per lane per cycle, one pipe each). Thread-safety: pure.
#pragma once

#include <string>

namespace fcp::profile {

struct CpuInfo {
  std::string model_name;
  int logical_cpus = 1;
  int physical_cores = 1;  // logical / threads-per-core
  double ghz = 0;          // "cpu MHz" of the first processor / 1000
  int simd_lanes_fp32 = 4;
  int fma_pipes = 1;  // 2 with fma, see above
  bool has_fma = false;
  double flops_per_cycle = 0;  // per core, fp32
  double peak_flops_per_core = 0;
  double peak_flops = 0;   // all physical cores
  std::string derivation;  // one line, human-readable
};

// Parses cpuinfo text (the content of /proc/cpuinfo).
CpuInfo ParseCpuInfo(const std::string& cpuinfo_text);
// Reads /proc/cpuinfo (defaults when unreadable).
CpuInfo ReadCpuInfo();

}  // namespace fcp::profile
