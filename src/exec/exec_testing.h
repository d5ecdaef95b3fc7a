// Helpers shared by the executor's tests (gtests and the MPI test binary).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "exec/executor.h"

namespace fcp::exec::testing {

// `num` random byte sequences of 2..max_len tokens; sequence i has mask
// factor eta(i) (0 causal, 1 full, between: bidirectional prefix).
inline GlobalBatch RandomByteBatch(uint64_t seed, int num, int max_len,
                                   const std::function<double(int)>& eta) {
  std::mt19937_64 rng(seed);
  GlobalBatch b;
  for (int i = 0; i < num; ++i) {
    const int len = 2 + static_cast<int>(rng() % (max_len - 1));
    std::vector<uint8_t> s(len);
    for (auto& x : s) x = static_cast<uint8_t>(rng() % 256);
    b.sequences.push_back(s);
    b.eta.push_back(eta(i));
  }
  return b;
}

// max |a - b| / max |b| (relative to the largest reference value).
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / den;
}

}  // namespace fcp::exec::testing
