#include "profile/cpu_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace fcp::profile {
namespace {

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

CpuInfo ParseCpuInfo(const std::string& text) {
  CpuInfo info;
  std::istringstream in(text);
  std::string line, flags;
  int processors = 0, siblings = 0, cores = 0;
  std::set<std::string> core_keys;
  std::string physical_id = "0";
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = Trim(line.substr(0, colon));
    const std::string value = Trim(line.substr(colon + 1));
    if (key == "processor")
      ++processors;
    else if (key == "model name" && info.model_name.empty())
      info.model_name = value;
    else if (key == "cpu MHz" && info.ghz == 0)
      info.ghz = std::stod(value) / 1000.0;
    else if (key == "flags" && flags.empty())
      flags = " " + value + " ";
    else if (key == "siblings" && siblings == 0)
      siblings = std::stoi(value);
    else if (key == "cpu cores" && cores == 0)
      cores = std::stoi(value);
  }
  info.logical_cpus = std::max(processors, 1);
  const int threads_per_core =
      (siblings > 0 && cores > 0) ? std::max(1, siblings / cores) : 1;
  info.physical_cores = std::max(1, info.logical_cpus / threads_per_core);
  auto has = [&](const char* f) {
    return flags.find(std::string(" ") + f + " ") != std::string::npos;
  };
  info.has_fma = has("fma");
  info.simd_lanes_fp32 = has("avx512f")                ? 16
                         : (has("avx") || has("avx2")) ? 8
                                                       : 4;
  info.fma_pipes = info.has_fma ? 2 : 1;
  // With FMA: lanes × 2 FLOPs × 2 pipes. Without: one mul + one add pipe.
  info.flops_per_cycle = info.has_fma
                             ? info.simd_lanes_fp32 * 2.0 * info.fma_pipes
                             : info.simd_lanes_fp32 * 2.0;
  info.peak_flops_per_core = info.flops_per_cycle * info.ghz * 1e9;
  info.peak_flops = info.peak_flops_per_core * info.physical_cores;
  info.derivation = fmt::format(
      "{} cores x {:.3f} GHz x {:.0f} fp32 FLOP/cycle ({} lanes{} x 2 x {} "
      "pipes) = "
      "{:.1f} GFLOP/s ({:.1f} per core)",
      info.physical_cores, info.ghz, info.flops_per_cycle, info.simd_lanes_fp32,
      has("avx512f") ? " avx512f"
      : has("avx2")  ? " avx2"
      : has("avx")   ? " avx"
                     : " sse",
      info.has_fma ? info.fma_pipes : 1, info.peak_flops / 1e9,
      info.peak_flops_per_core / 1e9);
  return info;
}

CpuInfo ReadCpuInfo() {
  std::ifstream f("/proc/cpuinfo");
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseCpuInfo(ss.str());
}

}  // namespace fcp::profile
