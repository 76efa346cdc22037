// LeadershipGate: what a standby JobManager answers, and how often it asks
// the coordination service where the leader is.
#include "jobmanager/leadership_gate.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::jobmanager {
namespace {

using ::testing::HasSubstr;

TEST(LeadershipGateTest, AStandbyRefusesWithTheLeadersAddressAndTheLeaderLetsThrough) {
  LeadershipGate gate;
  int lookups = 0;
  std::string leader = "10.0.0.7:6123";
  gate.Configure("10.0.0.8:6123", [&] {
    ++lookups;
    return leader;
  });
  grpc::Status refused = gate.Check(nullptr, "job submission");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("10.0.0.8:6123 is a standby"));
  EXPECT_THAT(refused.error_message(), HasSubstr("job submission goes to the leader at 10.0.0.7:6123"));
  EXPECT_EQ(gate.NotReadyReason(), "standby; leader 10.0.0.7:6123");
  // Within kLeaderCacheTime the answer is the cached one.
  leader = "10.0.0.9:6123";
  EXPECT_EQ(gate.LeaderAddress(), "10.0.0.7:6123");
  EXPECT_EQ(lookups, 1);

  gate.SetLeading(true);
  EXPECT_TRUE(gate.Check(nullptr, "job submission").ok());
  EXPECT_EQ(gate.NotReadyReason(), "");
  EXPECT_EQ(gate.LeaderAddress(), "10.0.0.8:6123");

  // Stepping down forgets the old answer.
  gate.SetLeading(false);
  EXPECT_EQ(gate.LeaderAddress(), "10.0.0.9:6123");
  EXPECT_EQ(lookups, 2);
}

TEST(LeadershipGateTest, WithoutALeaderTheAnswerIsToRetry) {
  LeadershipGate gate;
  EXPECT_EQ(gate.Check(nullptr, "registration").error_code(), grpc::StatusCode::UNAVAILABLE)
      << "not configured yet: nobody known";
  gate.Configure("10.0.0.8:6123", [] { return std::string(); });
  grpc::Status refused = gate.Check(nullptr, "registration");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("no leader is elected yet"));
  EXPECT_EQ(gate.NotReadyReason(), "standby; no leader elected yet");
}

}  // namespace
}  // namespace weir::jobmanager
