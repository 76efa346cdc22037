// The Kafka source subtasks' shared idleness (shared_idleness.h): the
// owner's gate and the observer's fast path, on a simulated clock.
#include "connectors/kafka/shared_idleness.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weir::connectors::kafka_internal {
namespace {

constexpr int64_t kGrace = 1000;

SharedIdleness OneOfTwo() {
  return SharedIdleness({{"in", 0}}, {{"in", 1}}, SharedIdleness::Options{.grace_ms = kGrace, .read_interval_ms = 250});
}

// Drives partition 0 of `s` from eligible at `position` to an acknowledged
// idle post at `acked_ms`.
void PostIdle(SharedIdleness& s, int64_t position, int64_t acked_ms) {
  EXPECT_FALSE(s.Gate(0, /*eligible=*/true, position, -1, -1, acked_ms - 10));
  std::optional<SharedIdleness::Post> post = s.TakePost(0);
  ASSERT_TRUE(post.has_value());
  ASSERT_EQ(post->entries.size(), 1u);
  EXPECT_TRUE(post->entries[0].idle);
  EXPECT_EQ(post->entries[0].position, position);
  s.OnPosted(post->version, /*ok=*/true, acked_ms);
}

TEST(SharedIdlenessTest, AGateOpensAfterThePostTheGraceAndACheckAskedAfterIt) {
  SharedIdleness s = OneOfTwo();
  PostIdle(s, /*position=*/10, /*acked_ms=*/100);
  EXPECT_FALSE(s.Gate(0, true, 10, 10, 50, 600)) << "within the grace";
  EXPECT_FALSE(s.WantsEndCheck(600));
  EXPECT_FALSE(s.Gate(0, true, 10, 10, 50, 1100)) << "the grace passed, but the answer was asked before it";
  EXPECT_TRUE(s.WantsEndCheck(1100));
  EXPECT_FALSE(s.Gate(0, true, 10, 10, 1099, 1150)) << "asked 1 ms before the grace ended";
  EXPECT_TRUE(s.Gate(0, true, 10, 10, 1100, 1150));
  EXPECT_FALSE(s.WantsEndCheck(1150));
  EXPECT_TRUE(s.Gate(0, true, 10, 10, 1100, 5000)) << "stays open";
}

TEST(SharedIdlenessTest, ACheckShowingRecordsKeepsTheGateShut) {
  SharedIdleness s = OneOfTwo();
  PostIdle(s, 10, 100);
  EXPECT_FALSE(s.Gate(0, true, 10, 12, 1200, 1300)) << "two records arrived during the grace";
  EXPECT_FALSE(s.Gate(0, true, 10, -1, 1200, 1300)) << "an unknown end opens nothing";
}

TEST(SharedIdlenessTest, ARecordShutsTheGateAtOnceAndPostsActive) {
  SharedIdleness s = OneOfTwo();
  PostIdle(s, 10, 100);
  ASSERT_TRUE(s.Gate(0, true, 10, 10, 1200, 1300));
  EXPECT_FALSE(s.Gate(0, /*eligible=*/false, 11, 10, 1200, 1400));
  std::optional<SharedIdleness::Post> post = s.TakePost(0);
  ASSERT_TRUE(post.has_value());
  EXPECT_FALSE(post->entries[0].idle);
  s.OnPosted(post->version, true, 1450);
  // Eligible again at the new position: the whole way once more.
  EXPECT_FALSE(s.Gate(0, true, 11, 11, 1500, 9000));
  post = s.TakePost(0);
  ASSERT_TRUE(post.has_value());
  EXPECT_TRUE(post->entries[0].idle);
  EXPECT_EQ(post->entries[0].position, 11);
  s.OnPosted(post->version, true, 9100);
  EXPECT_FALSE(s.Gate(0, true, 11, 11, 1500, 10200)) << "the old answer predates this post's grace";
  EXPECT_TRUE(s.Gate(0, true, 11, 11, 10100, 10200));
}

TEST(SharedIdlenessTest, APositionThatMovedStartsAgain) {
  SharedIdleness s = OneOfTwo();
  PostIdle(s, 10, 100);
  EXPECT_FALSE(s.Gate(0, true, /*position=*/15, 15, 1200, 1300)) << "X no longer says where it is";
  std::optional<SharedIdleness::Post> post = s.TakePost(0);
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->entries[0].position, 15);
}

TEST(SharedIdlenessTest, AFailedPostIsSentAgainAndOpensNothing) {
  SharedIdleness s = OneOfTwo();
  EXPECT_FALSE(s.Gate(0, true, 10, -1, -1, 0));
  std::optional<SharedIdleness::Post> post = s.TakePost(0);
  ASSERT_TRUE(post.has_value());
  EXPECT_FALSE(s.TakePost(0).has_value()) << "one post out at a time";
  s.OnPosted(post->version, /*ok=*/false, 100);
  EXPECT_FALSE(s.WantsEndCheck(5000));
  EXPECT_FALSE(s.Gate(0, true, 10, 10, 4000, 5000));
  post = s.TakePost(0);
  ASSERT_TRUE(post.has_value()) << "sent again";
  s.OnPosted(post->version, true, 5000);
  EXPECT_TRUE(s.Gate(0, true, 10, 10, 6000, 6000));
}

TEST(SharedIdlenessTest, AFinishedPartitionIsOpenAndPostsActive) {
  SharedIdleness s = OneOfTwo();
  PostIdle(s, 10, 100);
  s.Finish(0);
  EXPECT_TRUE(s.Gate(0, false, 10, -1, -1, 200));
  std::optional<SharedIdleness::Post> post = s.TakePost(0);
  ASSERT_TRUE(post.has_value());
  EXPECT_FALSE(post->entries[0].idle);
}

TEST(SharedIdlenessTest, TheFastPathNeedsAFreshReadWithoutIdlePeers) {
  SharedIdleness s = OneOfTwo();
  EXPECT_FALSE(s.PeersClear(0)) << "nothing read yet";
  EXPECT_TRUE(s.WantsRead(0));
  s.OnReadSent(0);
  EXPECT_FALSE(s.WantsRead(300)) << "one read out at a time";
  s.OnRead(0, BoardRead{.entries = {std::nullopt}});
  EXPECT_FALSE(s.PeersClear(100)) << "a partition without an entry is not known to be active";
  s.OnRead(0, BoardRead{.entries = {BoardEntry{.idle = false, .position = 3}}});
  EXPECT_TRUE(s.PeersClear(100));
  EXPECT_TRUE(s.PeersClear(kGrace - 250 - 1));
  EXPECT_FALSE(s.PeersClear(kGrace - 250)) << "too old: a subtask may have gone idle since";
  EXPECT_TRUE(s.WantsRead(300));
  s.OnReadSent(300);
  s.OnRead(300, BoardRead{.entries = {BoardEntry{.idle = true, .position = 7}}});
  EXPECT_FALSE(s.PeersClear(400)) << "a partition of another subtask is idle";
  EXPECT_EQ(s.IdlePeers(), std::vector<std::string>{"in[1]"});
  s.OnRead(200, BoardRead{.entries = {std::nullopt}});
  EXPECT_FALSE(s.PeersClear(400)) << "an answer sent before the one held is ignored";
  s.OnRead(500, std::nullopt);
  EXPECT_FALSE(s.PeersClear(600)) << "a failed read changes nothing";
  s.OnRead(700, BoardRead{.entries = {BoardEntry{.idle = false, .position = 9}}});
  EXPECT_TRUE(s.PeersClear(800));
}

TEST(SharedIdlenessTest, RecordsOfAnActivePartitionPostNothing) {
  SharedIdleness s = OneOfTwo();
  EXPECT_FALSE(s.Gate(0, /*eligible=*/false, 1, -1, -1, 0));
  std::optional<SharedIdleness::Post> post = s.TakePost(0);
  ASSERT_TRUE(post.has_value()) << "the first post says where every partition stands";
  s.OnPosted(post->version, true, 10);
  for (int64_t position = 2; position < 50; ++position) {
    EXPECT_FALSE(s.Gate(0, false, position, -1, -1, 10 * position));
    EXPECT_FALSE(s.TakePost(0).has_value()) << "a commit per record batch at position " << position;
  }
}

TEST(SharedIdlenessTest, EntriesArePostedAgainBeforeKafkaExpiresThem) {
  SharedIdleness s({{"in", 0}}, {{"in", 1}}, SharedIdleness::Options{.refresh_ms = 60000});
  PostIdle(s, 10, 100);
  EXPECT_FALSE(s.TakePost(100 + 59999).has_value());
  std::optional<SharedIdleness::Post> post = s.TakePost(100 + 60000);
  ASSERT_TRUE(post.has_value()) << "a group without members loses its offsets after the retention";
  EXPECT_TRUE(post->entries[0].idle);
  EXPECT_EQ(post->entries[0].position, 10);
}

TEST(SharedIdlenessTest, ACheckThatReadTheBoardAnswersTheReadAskedBeforeIt) {
  SharedIdleness s = OneOfTwo();
  s.OnReadSent(100);
  EXPECT_FALSE(s.WantsRead(400));
  // The broker thread served the read with a check's board read, sent a
  // little after the request.
  s.OnRead(120, BoardRead{.entries = {BoardEntry{.idle = false, .position = 0}}});
  EXPECT_TRUE(s.WantsRead(400)) << "the next read may go out";
  EXPECT_TRUE(s.PeersClear(300));
}

TEST(PeersCaughtUpTest, EveryIdlePeerAtMostItsPosition) {
  const std::vector<TopicPartitionKey> peers{{"in", 1}, {"in", 3}};
  const BoardRead read{.entries = {BoardEntry{.idle = true, .position = 10}, BoardEntry{.idle = false, .position = 2}}};
  std::string why;
  EXPECT_TRUE(PeersCaughtUp(peers, read, {10, 50}, &why)) << "an active peer is not checked";
  EXPECT_FALSE(PeersCaughtUp(peers, read, {13, 50}, &why));
  EXPECT_EQ(why, "in[1] has 3 records its subtask has not read yet");
  EXPECT_FALSE(PeersCaughtUp(peers, read, {-1, 50}, &why));
  EXPECT_NE(why.find("not known"), std::string::npos) << why;
  EXPECT_FALSE(PeersCaughtUp(peers, BoardRead{.entries = {read.entries[0], std::nullopt}}, {10, 50}, &why))
      << "a partition whose subtask has not posted yet";
  EXPECT_EQ(why, "in[3] has no entry on the board yet (its subtask has not posted)");
}

TEST(BoardTest, MetadataAndGroupNames) {
  EXPECT_EQ(ParseBoardMetadata(BoardMetadata(true)), std::optional<bool>(true));
  EXPECT_EQ(ParseBoardMetadata(BoardMetadata(false)), std::optional<bool>(false));
  EXPECT_EQ(ParseBoardMetadata(""), std::nullopt);
  EXPECT_EQ(ParseBoardMetadata("weir idle v2"), std::nullopt);
  EXPECT_EQ(BoardGroupId("7f3a", "Clicks#2 source"), "weir-idleness-7f3a-Clicks_2_source");
}

}  // namespace
}  // namespace weir::connectors::kafka_internal
