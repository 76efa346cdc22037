// The etcd server of the CTest fixture "etcd" (scripts/etcd.sh, started in
// $WEIR_TEST_ETCD_DIR), shared by the tests that need one.
#pragma once

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/process.h"

namespace weir::testing {

// The server's client endpoint ("127.0.0.1:PORT"); "" outside the fixture.
inline std::string SharedEtcdEndpoint() {
  const char* dir = std::getenv("WEIR_TEST_ETCD_DIR");
  if (dir == nullptr) return "";
  return std::string(absl::StripAsciiWhitespace(ReadFile(absl::StrCat(dir, "/address"))));
}

}  // namespace weir::testing
