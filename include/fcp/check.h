// FCP_CHECK: a broken invariant is a bug; print where and abort.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FCP_CHECK(cond)                                                        \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "FCP_CHECK failed: %s at %s:%d\n", #cond, __FILE__, \
                   __LINE__);                                                  \
      std::abort();                                                            \
    }                                                                          \
  } while (0)
