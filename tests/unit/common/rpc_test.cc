// What counts as loopback decides whether a daemon may listen without a
// token: only literal loopback addresses and "localhost" do.
#include "common/rpc/rpc.h"

#include "gtest/gtest.h"

namespace weir::rpc {
namespace {

TEST(IsLoopbackHostTest, OnlyLoopbackLiteralsAndLocalhost) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"127.example.com", "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "example.com", "",
                           "[::2]", "127.0.0.1.nip.io"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace weir::rpc
