// WatermarkValve: the task's watermark from its channels' (minimum over the
// active aligned ones, never back), idleness in and out, ended channels.
#include "taskmanager/eventtime/watermark_valve.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::taskmanager::eventtime {
namespace {

using Events = std::vector<ValveEvent>;

ValveEvent W(int64_t watermark) { return {ValveEvent::Kind::kWatermark, watermark}; }
const ValveEvent kIdle{ValveEvent::Kind::kIdle};
const ValveEvent kActive{ValveEvent::Kind::kActive};
const absl::Time kNow = absl::FromUnixSeconds(1700000000);

TEST(WatermarkValveTest, TheMinimumOfTheChannelsAndOnlyWhenItGrows) {
  WatermarkValve valve(3, kNow);
  EXPECT_EQ(valve.OnWatermark(0, 10, kNow), Events{});
  EXPECT_EQ(valve.OnWatermark(1, 5, kNow), Events{});
  EXPECT_EQ(valve.OnWatermark(2, 7, kNow), Events{W(5)});
  EXPECT_EQ(valve.OnWatermark(1, 6, kNow), Events{W(6)});
  EXPECT_EQ(valve.OnWatermark(0, 3, kNow), Events{}) << "a channel's watermark never goes back";
  EXPECT_EQ(valve.OnWatermark(1, 20, kNow), Events{W(7)});
  EXPECT_EQ(valve.OnWatermark(2, 30, kNow), Events{W(10)});
  EXPECT_EQ(valve.watermark(), 10);
  EXPECT_FALSE(valve.idle());
}

TEST(WatermarkValveTest, AnIdleChannelDoesNotHoldTheOthersBack) {
  WatermarkValve valve(2, kNow);
  EXPECT_EQ(valve.OnWatermark(0, 100, kNow), Events{});
  // Channel 1 never sends a watermark but says it is idle.
  EXPECT_EQ(valve.OnStatus(1, /*idle=*/true, kNow), Events{W(100)});
  EXPECT_EQ(valve.OnWatermark(0, 150, kNow), Events{W(150)});
  EXPECT_EQ(valve.OnWatermark(1, 50, kNow), Events{}) << "ignored while idle";
}

TEST(WatermarkValveTest, AChannelBackFromIdleBehindHoldsTheWatermarkUntilItCatchesUp) {
  WatermarkValve valve(2, kNow);
  valve.OnWatermark(0, 100, kNow);
  valve.OnWatermark(1, 40, kNow);
  EXPECT_EQ(valve.watermark(), 40);
  valve.OnStatus(1, true, kNow);
  EXPECT_EQ(valve.watermark(), 100);
  EXPECT_EQ(valve.OnStatus(1, false, kNow), Events{}) << "behind the task's watermark: it does not go back";
  EXPECT_EQ(valve.OnWatermark(0, 200, kNow), Events{}) << "channel 1's records would come late past 100";
  EXPECT_EQ(valve.OnWatermark(1, 150, kNow), Events{W(150)});
  EXPECT_EQ(valve.OnWatermark(1, 250, kNow), Events{W(200)}) << "channel 0 is the minimum now";
  EXPECT_EQ(valve.OnWatermark(0, 300, kNow), Events{W(250)});
}

TEST(WatermarkValveTest, AllIdleAdvancesToTheFurthestAndGoesIdleThenActiveFirst) {
  WatermarkValve valve(2, kNow);
  valve.OnWatermark(0, 10, kNow);
  valve.OnWatermark(1, 30, kNow);
  EXPECT_EQ(valve.OnStatus(0, true, kNow), (Events{W(30)}));
  EXPECT_EQ(valve.OnStatus(1, true, kNow), (Events{kIdle}));
  EXPECT_TRUE(valve.idle());
  EXPECT_EQ(valve.OnStatus(0, false, kNow), (Events{kActive})) << "channel 0 is behind: active, no watermark";
  EXPECT_EQ(valve.OnWatermark(0, 35, kNow), (Events{W(35)}));
}

TEST(WatermarkValveTest, EndedChannelsLeaveTheMinimumForGood) {
  WatermarkValve valve(3, kNow);
  valve.OnWatermark(0, 5, kNow);
  valve.OnWatermark(1, 8, kNow);
  valve.OnWatermark(2, 9, kNow);
  EXPECT_EQ(valve.watermark(), 5);
  EXPECT_EQ(valve.OnEndOfInput(0, kNow), Events{W(8)});
  EXPECT_EQ(valve.OnWatermark(0, 100, kNow), Events{}) << "nothing comes after the end";
  EXPECT_EQ(valve.OnWatermark(1, kMaxWatermark, kNow), Events{W(9)});
  EXPECT_EQ(valve.OnEndOfInput(1, kNow), Events{});
  // The last one ends: event time goes to the furthest any channel got; no
  // idle status, the task ends.
  EXPECT_EQ(valve.OnEndOfInput(2, kNow), Events{W(kMaxWatermark)});
  EXPECT_FALSE(valve.idle());
}

TEST(WatermarkValveTest, NamesTheChannelHoldingEventTimeBack) {
  WatermarkValve valve(3, kNow);
  valve.OnWatermark(0, 10, kNow);
  valve.OnWatermark(1, 50, kNow);
  valve.OnWatermark(2, 60, kNow);
  const absl::Time later = kNow + absl::Minutes(2);
  valve.OnWatermark(1, 70, later);
  valve.OnWatermark(2, 80, later);
  EXPECT_EQ(valve.Holding(later, absl::Minutes(1)), std::optional<int>(0));
  EXPECT_EQ(valve.Holding(later, absl::Minutes(3)), std::nullopt) << "not stalled that long";
  valve.OnStatus(0, true, later);
  EXPECT_EQ(valve.Holding(later, absl::Minutes(1)), std::nullopt) << "an idle channel holds nothing back";
}

// Random channels and events: the task's watermark never decreases, never
// passes an active aligned channel's, is at least the lowest active
// channel's, and is not emitted while idle.
TEST(WatermarkValveTest, InvariantsHoldForRandomInput) {
  std::mt19937 random(20261204);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + static_cast<int>(random() % 5);
    WatermarkValve valve(n, kNow);
    std::vector<int64_t> marks(n, kMinWatermark);
    std::vector<bool> idle(n, false), ended(n, false);
    int64_t last_out = kMinWatermark;
    bool out_idle = false;
    for (int step = 0; step < 300; ++step) {
      const int c = static_cast<int>(random() % n);
      const int what = static_cast<int>(random() % 20);
      Events events;
      if (what == 0) {
        events = valve.OnEndOfInput(c, kNow);
        ended[c] = true;
      } else if (what <= 3) {
        const bool to_idle = random() % 2 == 0;
        events = valve.OnStatus(c, to_idle, kNow);
        if (!ended[c]) idle[c] = to_idle;
      } else {
        const int64_t w = static_cast<int64_t>(random() % 1000);
        events = valve.OnWatermark(c, w, kNow);
        if (!ended[c] && !idle[c]) marks[c] = std::max(marks[c], w);
      }
      for (const ValveEvent& e : events) {
        if (e.kind == ValveEvent::Kind::kWatermark) {
          ASSERT_FALSE(out_idle) << "a watermark while idle";
          ASSERT_GT(e.watermark, last_out) << "the watermark went back or repeated";
          last_out = e.watermark;
        } else {
          ASSERT_NE(e.kind == ValveEvent::Kind::kIdle, out_idle) << "a status that changes nothing";
          out_idle = e.kind == ValveEvent::Kind::kIdle;
        }
      }
      ASSERT_EQ(valve.watermark(), last_out);
      ASSERT_EQ(valve.idle(), out_idle);
      int64_t lowest_active = kMaxWatermark;
      bool any_active = false;
      for (int i = 0; i < n; ++i) {
        if (ended[i] || idle[i]) continue;
        any_active = true;
        lowest_active = std::min(lowest_active, marks[i]);
      }
      if (any_active) {
        ASSERT_FALSE(out_idle) << "idle with an active channel";
        ASSERT_GE(last_out, lowest_active) << "held back below every active channel";
      }
    }
  }
}

}  // namespace
}  // namespace weir::taskmanager::eventtime
