// WEIR_CHECK: aborts with a message when an invariant does not hold. Only for
// programming errors; anything a user or the environment can cause is an
// absl::Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define WEIR_CHECK(cond, msg)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond,   \
                   std::string(msg).c_str());                                            \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)
