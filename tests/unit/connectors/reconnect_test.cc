// ReconnectPolicy: the sinks' waits between tries to connect.
// SendBatchUntilSent: what it does on each kind of failure.
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

TEST(ReconnectPolicyTest, WaitsFrom100MsDoublingTo2sWithEqualJitter) {
  const absl::Time before = absl::Now();
  const retry::RetryPolicy policy = ReconnectPolicy(absl::Seconds(10));
  EXPECT_EQ(policy.backoff.initial, absl::Milliseconds(100));
  EXPECT_EQ(policy.backoff.multiplier, 2.0);
  EXPECT_EQ(policy.backoff.max, absl::Seconds(2));
  EXPECT_EQ(policy.backoff.jitter, 0.5);
  EXPECT_EQ(policy.max_attempts, 0);
  EXPECT_GE(policy.deadline, before + absl::Seconds(10));
  EXPECT_LE(policy.deadline, absl::Now() + absl::Seconds(10));
}

TEST(ReconnectPolicyTest, GivesUpWhenTheNextTryWouldStartPastTheTimeout) {
  int attempts = 0;
  const retry::RetryOutcome outcome = retry::Retry(
      ReconnectPolicy(absl::ZeroDuration()), [&] { return ++attempts, absl::UnavailableError("down"); },
      [](const absl::Status& s) { return absl::IsUnavailable(s); },
      [](const absl::Status&, absl::Duration) { ADD_FAILURE() << "waited past the timeout"; });
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(outcome.end, retry::RetryOutcome::End::kDeadline);
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
