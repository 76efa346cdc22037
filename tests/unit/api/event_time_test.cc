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
