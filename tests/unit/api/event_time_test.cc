// The job API's event-time pieces: the per-split watermark (bound, idleness,
// finished splits, a split back from idleness), the timestamp checks, and
// the strategies AssignTimestampsAndWatermarks refuses.
#include "weir/event_time.h"

#include <memory>
#include <stdexcept>

#include "gtest/gtest.h"
#include "weir/datastream.h"

namespace weir {
namespace {

using internal::CheckTimestamp;
using internal::SplitWatermarks;

TEST(SplitWatermarksTest, TheSlowestSplitLessTheBound) {
  SplitWatermarks w(/*out_of_orderness_ms=*/10, /*idleness_ms=*/0);
  const int a = w.AddSplit("p0", 0);
  const int b = w.AddSplit("p1", 0);
  w.OnRecord(a, 1000, 0);
  EXPECT_EQ(w.Combine(0).watermark, kMinWatermark) << "p1 has had no record: it holds event time";
  w.OnRecord(b, 500, 0);
  EXPECT_EQ(w.Combine(0).watermark, 489);
  w.OnRecord(b, 400, 0);  // late on p1: its watermark stays
  EXPECT_EQ(w.Combine(0).watermark, 489);
  w.OnRecord(b, 2000, 0);
  EXPECT_EQ(w.Combine(0).watermark, 989);
  EXPECT_FALSE(w.Combine(0).idle);
}

TEST(SplitWatermarksTest, WithoutIdlenessAQuietSplitHoldsEventTimeAndIsNamed) {
  SplitWatermarks w(0, 0);
  const int a = w.AddSplit("p0", 0);
  w.AddSplit("p1", 0);
  w.OnRecord(a, 5000, 60000);
  EXPECT_EQ(w.Combine(120000).watermark, kMinWatermark);
  EXPECT_EQ(w.Quiet(120000, 60000), std::vector<std::string>{"p1"});
}

TEST(SplitWatermarksTest, AnIdleSplitStopsHoldingAndCatchesUpBeforeItCountsAgain) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  const int a = w.AddSplit("p0", 0);
  const int b = w.AddSplit("p1", 0);
  w.OnRecord(a, 1000, 0);
  w.OnRecord(b, 200, 0);
  EXPECT_EQ(w.Combine(50).watermark, 199);
  w.OnRecord(a, 1100, 150);
  // p1 has had no record for 150 ms: idle, p0 alone counts.
  EXPECT_EQ(w.Combine(150).watermark, 1099);
  EXPECT_TRUE(w.Quiet(150, 100).empty()) << "an idle split is not a stall";
  // p1 comes back behind the watermark: it does not pull it back.
  w.OnRecord(b, 300, 160);
  EXPECT_EQ(w.Combine(160).watermark, 1099);
  w.OnRecord(a, 3000, 170);
  w.OnRecord(b, 2000, 170);
  EXPECT_EQ(w.Combine(170).watermark, 1999) << "caught up: counts again";
  // Both idle: the subtask is idle, at the furthest split's watermark
  // (nothing is waited for any more).
  const SplitWatermarks::Combined idle = w.Combine(1000);
  EXPECT_TRUE(idle.idle);
  EXPECT_EQ(idle.watermark, 2999);
}

TEST(SplitWatermarksTest, AHeldSplitDoesNotGoIdleAndCountsIdlenessFromItsRelease) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  const int a = w.AddSplit("p0", 0);
  w.OnRecord(a, 1000, 0);
  w.Hold(a, true, 10);
  EXPECT_FALSE(w.idle(a, 500)) << "held back on purpose";
  w.Hold(a, false, 500);
  EXPECT_FALSE(w.idle(a, 550));
  EXPECT_TRUE(w.idle(a, 600));
}

TEST(SplitWatermarksTest, FinishedSplitsLeaveAndTheLastOneEndsEventTime) {
  SplitWatermarks w(0, 0);
  const int a = w.AddSplit("p0", 0);
  const int b = w.AddSplit("p1", 0);
  w.OnRecord(a, 100, 0);
  w.Finish(b);
  EXPECT_EQ(w.Combine(0).watermark, 99);
  w.Finish(a);
  EXPECT_EQ(w.Combine(0).watermark, kMaxWatermark);
}

TEST(SplitWatermarksTest, TimestampsAtTheExtremesDoNotOverflow) {
  SplitWatermarks w(1000, 0);
  const int a = w.AddSplit("p0", 0);
  w.OnRecord(a, kMinWatermark + 5, 0);
  EXPECT_EQ(w.Combine(0).watermark, kMinWatermark);
  w.OnRecord(a, kMaxWatermark, 0);
  EXPECT_EQ(w.Combine(0).watermark, kMaxWatermark - 1001);
}

// Idleness decided with the broker's end, as the Kafka source drives it:
// a partition is caught up when its position reached the end the broker
// gave (fake offsets here), and the watermark moves past an idle partition
// only as far as the last broker answer covers.
struct FakePartition {
  int split = 0;
  int64_t position = 0;  // the next offset to read
  int64_t end = 0;       // the broker's end (high watermark or LSO)
  void Tell(SplitWatermarks& w) const { w.SetCaughtUp(split, position >= end); }
};

TEST(SplitWatermarksIdlenessTest, APartitionWithRecordsAtTheBrokerNeverGoesIdle) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  FakePartition a{w.AddSplit("p0", 0)};
  FakePartition b{w.AddSplit("p1", 0)};
  a.Tell(w);
  b.end = 5;  // five records at the broker that the source has not read
  b.Tell(w);
  EXPECT_TRUE(w.idle(a.split, 1000));
  EXPECT_FALSE(w.idle(b.split, 1000)) << "quiet for 1 s, but it has records to read";
  EXPECT_TRUE(w.kept_by_source(b.split, 1000));
  b.position = 5;
  b.Tell(w);
  EXPECT_TRUE(w.idle(b.split, 1000)) << "read to the broker's end: idle";
}

TEST(SplitWatermarksIdlenessTest, AnIdlePartitionWithRecordsAtTheBrokerHoldsTheWatermarkUntilItReadsThem) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  FakePartition a{w.AddSplit("p0", 0)};
  FakePartition b{w.AddSplit("p1", 0)};
  // Both idle, the subtask too, from the start.
  EXPECT_TRUE(w.Combine(1000).idle);
  // A burst: p0's records come first; p1's are at the broker, not read yet.
  a.end = 3;
  b.end = 3;
  for (int i = 0; i < 3; ++i) w.OnRecord(a.split, 60000 + i, 1010);
  a.position = 3;
  a.Tell(w);
  EXPECT_EQ(w.Passing(1010), std::vector<int>{b.split}) << "p1 is idle as far as the source knows";
  // The broker answer asked now shows p1's records: p1 is active, and
  // holds the watermark where it is (the start of time).
  b.Tell(w);
  EXPECT_TRUE(w.Passing(1010).empty());
  const SplitWatermarks::Combined held = w.Combine(1010, /*limit=*/60002);
  EXPECT_FALSE(held.idle);
  EXPECT_EQ(held.watermark, kMinWatermark) << "p1's records are not behind the watermark";
  // p1's records, older than p0's: none is late.
  for (int i = 0; i < 3; ++i) w.OnRecord(b.split, 50000 + i, 1020);
  b.position = 3;
  b.Tell(w);
  EXPECT_EQ(w.Combine(1020).watermark, 50001);
}

TEST(SplitWatermarksIdlenessTest, TheWatermarkPassesAnIdlePartitionOnlyAsFarAsTheBrokerAnswered) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  FakePartition a{w.AddSplit("p0", 0)};
  FakePartition b{w.AddSplit("p1", 0)};
  w.OnRecord(b.split, 1000, 0);
  w.OnRecord(a.split, 1000, 0);
  EXPECT_EQ(w.Combine(50).watermark, 999);
  // p1 goes quiet and is at its end; p0 moves on.
  w.OnRecord(a.split, 5000, 200);
  EXPECT_EQ(w.Passing(200), std::vector<int>{b.split});
  EXPECT_EQ(w.Candidate(200), 4999);
  // No answer yet: the watermark stays.
  EXPECT_EQ(w.Combine(200, /*limit=*/kMinWatermark).watermark, 999);
  // An answer asked for 4999 says p1 has nothing: up to there.
  EXPECT_EQ(w.Combine(210, /*limit=*/4999).watermark, 4999);
  // Further only with a newer answer.
  w.OnRecord(a.split, 9000, 220);
  EXPECT_EQ(w.Combine(220, /*limit=*/4999).watermark, 4999);
  EXPECT_EQ(w.Combine(230, /*limit=*/8999).watermark, 8999);
  // Without an idle partition to pass, no answer is needed.
  w.OnRecord(b.split, 9500, 240);
  w.OnRecord(a.split, 9600, 240);
  EXPECT_TRUE(w.Passing(240).empty());
  EXPECT_EQ(w.Combine(240, /*limit=*/kMinWatermark).watermark, 9499);
}

TEST(SplitWatermarksIdlenessTest, APartitionBackBehindTheWatermarkHoldsItUntilItCatchesUp) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  const int a = w.AddSplit("p0", 0);
  const int b = w.AddSplit("p1", 0);
  w.OnRecord(a, 1000, 0);
  w.OnRecord(b, 200, 0);
  w.OnRecord(a, 5000, 150);
  EXPECT_EQ(w.Combine(150).watermark, 4999) << "p1 idle";
  // p1 is back behind the watermark: p0 may not move past p1's records.
  w.OnRecord(b, 300, 160);
  w.OnRecord(a, 9000, 160);
  EXPECT_EQ(w.Combine(160).watermark, 4999);
  w.OnRecord(b, 7000, 170);
  EXPECT_EQ(w.Combine(170).watermark, 6999) << "caught up: the minimum again";
}

TEST(SplitWatermarksIdlenessTest, EveryPartitionIdleMovesToTheFurthestOnlyAsFarAsAnswered) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  const int a = w.AddSplit("p0", 0);
  const int b = w.AddSplit("p1", 0);
  w.OnRecord(a, 1000, 0);
  w.OnRecord(b, 3000, 0);
  EXPECT_EQ(w.Combine(50).watermark, 999);
  // Both idle: the furthest (2999) passes p0, once the broker said so; the
  // subtask is idle once there (downstream ignores an idle input's
  // watermarks).
  const SplitWatermarks::Combined waiting = w.Combine(500, /*limit=*/kMinWatermark);
  EXPECT_FALSE(waiting.idle);
  EXPECT_EQ(waiting.watermark, 999);
  const SplitWatermarks::Combined moved = w.Combine(510, /*limit=*/2999);
  EXPECT_TRUE(moved.idle);
  EXPECT_EQ(moved.watermark, 2999);
}

TEST(SplitWatermarksIdlenessTest, AClosedGateKeepsAnEligibleSplitActive) {
  SplitWatermarks w(0, /*idleness_ms=*/100);
  const int a = w.AddSplit("p0", 0);
  const int b = w.AddSplit("p1", 0);
  w.OnRecord(a, 5000, 0);
  w.OnRecord(b, 1000, 0);
  w.SetIdleGate(b, false);
  w.OnRecord(a, 9000, 500);
  EXPECT_TRUE(w.eligible(b, 500));
  EXPECT_FALSE(w.idle(b, 500)) << "its gate is shut";
  EXPECT_EQ(w.Combine(500).watermark, 999) << "b holds event time while its gate is shut";
  w.SetIdleGate(b, true);
  EXPECT_TRUE(w.idle(b, 500));
  EXPECT_EQ(w.Combine(500).watermark, 8999);
}

TEST(SplitWatermarksIdlenessTest, ALimitThatAlwaysBindsHoldsEvenWithoutIdleSplits) {
  SplitWatermarks w(0, /*idleness_ms=*/0);
  const int a = w.AddSplit("p0", 0);
  w.OnRecord(a, 5000, 0);
  EXPECT_EQ(w.Combine(0, /*limit=*/2000).watermark, 4999) << "no idle split passed: the limit does not bind";
  w.OnRecord(a, 9000, 10);
  EXPECT_EQ(w.Combine(10, /*limit=*/6000, /*limit_always=*/true).watermark, 6000);
  EXPECT_EQ(w.Combine(20, /*limit=*/3000, /*limit_always=*/true).watermark, 6000) << "never back";
  EXPECT_EQ(w.Combine(30, kMaxWatermark, /*limit_always=*/true).watermark, 8999);
}

TEST(CheckTimestampTest, SaysWhatIsWrong) {
  const int64_t now = 1700000000000;
  EXPECT_EQ(CheckTimestamp(now - 5, now, std::chrono::hours(24)), "");
  EXPECT_EQ(CheckTimestamp(kNoTimestamp, now, std::chrono::hours(24)), "the record has no timestamp");
  EXPECT_NE(CheckTimestamp(-1, now, std::chrono::hours(24)).find("before 1970"), std::string::npos);
  // Milliseconds read as microseconds: far ahead of the clock.
  EXPECT_NE(CheckTimestamp(now * 1000, now, std::chrono::hours(24)).find("ahead of the wall clock"),
            std::string::npos);
  EXPECT_EQ(CheckTimestamp(now * 1000, now, std::chrono::milliseconds(0)), "") << "0: no check";
}

TEST(AssignTimestampsAndWatermarksTest, RefusesNegativeDurationsAndPartitionAlignment) {
  JobGraph graph;
  StreamEnvironment env(&graph);
  auto numbers = env.AddSource<int64_t>("Numbers", [] { return std::unique_ptr<SourceFunction<int64_t>>(); });
  EXPECT_NO_THROW(numbers.AssignTimestampsAndWatermarks(
      WatermarkStrategy<int64_t>{.out_of_orderness = std::chrono::seconds(1), .idleness = std::chrono::seconds(5)}));
  EXPECT_THROW(numbers.AssignTimestampsAndWatermarks(WatermarkStrategy<int64_t>{.idleness = std::chrono::seconds(-1)}),
               std::invalid_argument);
  // max_drift pauses Kafka partitions; here it would silently do nothing.
  try {
    numbers.AssignTimestampsAndWatermarks(WatermarkStrategy<int64_t>{.max_drift = std::chrono::seconds(1)});
    ADD_FAILURE() << "max_drift was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kafka::SourceOptions::watermarks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weir
