#include "jobmanager/ha/in_memory_leader_election.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace weir::jobmanager::ha {
namespace {

class Recorder : public LeadershipListener {
 public:
  void Granted(Epoch epoch) override { events.push_back(absl::StrCat("granted ", epoch)); }
  void Revoked() override { events.push_back("revoked"); }
  std::vector<std::string> events;
};

TEST(InMemoryLeaderElectionTest, GrantsRisingEpochsAndFencesEveryOtherEpoch) {
  InMemoryLeaderElection election("jm:6123");
  Recorder recorder;
  ASSERT_TRUE(election.Start(&recorder).ok());
  EXPECT_FALSE(election.GetLeader()->has_value());

  absl::StatusOr<Epoch> first = election.Grant();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*election.GetLeader())->address, "jm:6123");
  EXPECT_EQ((*election.GetLeader())->epoch, *first);
  EXPECT_TRUE(absl::IsFailedPrecondition(election.Grant().status()));  // already leading
  ASSERT_TRUE(election.FencedPut(*first, "jobs/a", "1").ok());
  EXPECT_EQ(election.Get("jobs/a")->value_or(""), "1");

  ASSERT_TRUE(election.Revoke().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(election.Revoke()));
  EXPECT_TRUE(absl::IsAborted(election.FencedPut(*first, "jobs/a", "2")));
  EXPECT_TRUE(absl::IsAborted(election.FencedDelete(*first, "jobs/a")));

  absl::StatusOr<Epoch> second = election.Grant();
  ASSERT_TRUE(second.ok());
  EXPECT_GT(*second, *first);
  // A write prepared under the first leadership stays refused.
  EXPECT_TRUE(absl::IsAborted(election.FencedPut(*first, "jobs/a", "stale")));
  ASSERT_TRUE(election.FencedDelete(*second, "jobs/a").ok());
  EXPECT_FALSE(election.Get("jobs/a")->has_value());

  EXPECT_EQ(recorder.events, (std::vector<std::string>{absl::StrCat("granted ", *first), "revoked",
                                                        absl::StrCat("granted ", *second)}));
  election.Stop();  // revokes the leadership it holds
  EXPECT_EQ(recorder.events.back(), "revoked");
  EXPECT_FALSE(election.GetLeader()->has_value());
}

TEST(InMemoryLeaderElectionTest, AnotherLeaderRevokesThisOneAndFencesItsWrites) {
  InMemoryLeaderElection election("jm-0:6123");
  Recorder recorder;
  ASSERT_TRUE(election.Start(&recorder).ok());
  Epoch mine = *election.Grant();
  absl::StatusOr<Epoch> theirs = election.GrantElsewhere("jm-1:6123");
  ASSERT_TRUE(theirs.ok());
  EXPECT_GT(*theirs, mine);
  EXPECT_EQ(recorder.events.back(), "revoked");
  EXPECT_EQ((*election.GetLeader())->address, "jm-1:6123");
  EXPECT_TRUE(absl::IsAborted(election.FencedPut(mine, "jobs/a", "late")));
  EXPECT_TRUE(election.FencedPut(*theirs, "jobs/a", "theirs").ok());
  election.Stop();
  EXPECT_EQ(recorder.events.size(), 2u);  // nothing to revoke on Stop
}

TEST(InMemoryLeaderElectionTest, GrantNeedsStart) {
  InMemoryLeaderElection election("jm:6123");
  EXPECT_TRUE(absl::IsFailedPrecondition(election.Grant().status()));
}

}  // namespace
}  // namespace weir::jobmanager::ha
