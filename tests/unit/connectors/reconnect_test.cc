// RetryWithBackoff: when it tries again, how long it waits, and when it
// gives up. SendBatchUntilSent: what it does on each kind of failure.
#include "connectors/reconnect.h"

#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/logger.h"
#include "spdlog/sinks/ostream_sink.h"

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

BatchFailure Classify(const absl::Status& s) {
  if (absl::IsAborted(s)) return BatchFailure::kRolledBack;
  return absl::IsUnavailable(s) ? BatchFailure::kConnectionLost : BatchFailure::kFatal;
}

TEST(SendBatchUntilSentTest, SendsARolledBackBatchAgainAndReconnectsOnlyForALostConnection) {
  std::ostringstream lines;
  spdlog::logger log("test", std::make_shared<spdlog::sinks::ostream_sink_st>(lines));
  std::vector<absl::Status> results = {absl::AbortedError("deadlock"), absl::UnavailableError("gone"),
                                       absl::OkStatus()};
  size_t sends = 0;
  int reconnects = 0;
  absl::Status status = SendBatchUntilSent(
      absl::Seconds(60), [&] { return results[sends++]; }, Classify,
      [&] {
        EXPECT_EQ(sends, 2u);  // after the lost connection, not after the rollback
        ++reconnects;
      },
      log, "sink 0/1");
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(sends, 3u);
  EXPECT_EQ(reconnects, 1);
  EXPECT_THAT(lines.str(), ::testing::HasSubstr("sink 0/1: ABORTED: deadlock; sending the rows again"));
  EXPECT_THAT(lines.str(), ::testing::HasSubstr("sink 0/1: UNAVAILABLE: gone; reconnecting to send the rows again"));
}

TEST(SendBatchUntilSentTest, ReturnsAFatalFailureAndOneAfterTheTimeoutWithoutTryingAgain) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::ostream_sink_st>(std::cerr));
  int sends = 0;
  auto no_reconnect = [] { ADD_FAILURE() << "reconnected"; };
  EXPECT_EQ(SendBatchUntilSent(
                absl::Seconds(60), [&] { return ++sends, absl::InvalidArgumentError("bad row"); }, Classify,
                no_reconnect, log, "sink")
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sends, 1);
  EXPECT_EQ(SendBatchUntilSent(
                absl::Milliseconds(-1), [&] { return ++sends, absl::UnavailableError("gone"); }, Classify,
                no_reconnect, log, "sink")
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(sends, 2);
}

}  // namespace
}  // namespace weir::connectors
