// How many random instances a property test draws (test-only).
// Thread-safety: constants only.
#pragma once

#include <algorithm>

namespace fcp::testing {

// Whether this build runs under AddressSanitizer (scripts/asan_test.sh:
// clang's -fsanitize=address; GCC defines __SANITIZE_ADDRESS__).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// `n`, the sample a property is sized for, in the release suite (`make
// test`); under the sanitizers the first quarter of it. They run the planner
// 8-15x slower and are there to catch memory errors and undefined behaviour
// on the paths a quarter of the sample already takes, while the whole sample
// keeps each property's strength in the release suite (CI's time budget:
// docs/reliability.md, Sanitizers).
constexpr int SampleSize(int n) { return kSanitized ? std::max(1, n / 4) : n; }

}  // namespace fcp::testing
