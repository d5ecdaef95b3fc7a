// The executor's clock: seconds on the monotonic clock, for timeouts,
// watchdog deadlines and measured phase times (differences only; the epoch
// is unspecified).
#pragma once

#include <chrono>

namespace fcp::exec {

inline double NowS() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace fcp::exec
