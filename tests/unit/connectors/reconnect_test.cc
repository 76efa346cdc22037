// RetryWithBackoff: when it tries again, how long it waits, and when it
// gives up.
#include "connectors/reconnect.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace weir::connectors {
namespace {

bool Unavailable(const absl::Status& s) { return absl::IsUnavailable(s); }

TEST(RetryWithBackoffTest, TriesAgainAfterWaitsThatDoubleUntilItSucceeds) {
  int attempts = 0;
  std::vector<absl::Duration> waits;
  absl::Status status = RetryWithBackoff(
      absl::Seconds(60),
      [&] { return ++attempts < 4 ? absl::UnavailableError("down") : absl::OkStatus(); }, Unavailable,
      [&](const absl::Status& s, absl::Duration wait) {
        EXPECT_EQ(s.message(), "down");
        waits.push_back(wait);
      });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(attempts, 4);
  EXPECT_EQ(waits, (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200),
                                                absl::Milliseconds(400)}));
}

TEST(RetryWithBackoffTest, ReturnsAStatusItMayNotRetryAtOnce) {
  int attempts = 0;
  absl::Status status = RetryWithBackoff(
      absl::Seconds(60),
      [&] { return ++attempts < 2 ? absl::UnavailableError("down") : absl::UnauthenticatedError("no"); },
      Unavailable);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(attempts, 2);
}

TEST(RetryWithBackoffTest, GivesUpWhenTheNextTryWouldStartPastTheTimeout) {
  int attempts = 0;
  absl::Status status =
      RetryWithBackoff(absl::ZeroDuration(), [&] { return ++attempts, absl::UnavailableError("down"); }, Unavailable,
                       [](const absl::Status&, absl::Duration) { ADD_FAILURE() << "waited past the timeout"; });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(attempts, 1);
}

}  // namespace
}  // namespace weir::connectors
