// Liveness: loops that stop ticking are named as stuck; loops that ended
// are forgotten.
#include "common/process/liveness.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;

TEST(LivenessTest, NamesTheLoopsThatHaveNotTickedWithinTheLimit) {
  Liveness liveness;
  auto master = liveness.Register("job a master");
  auto coordinator = liveness.Register("job a checkpoint coordinator");
  const absl::Time now = absl::Now();
  EXPECT_THAT(liveness.Stuck(now, absl::Seconds(60)), IsEmpty());
  // Seen from 90 s later, neither ticked for 90 s.
  EXPECT_THAT(liveness.Stuck(now + absl::Seconds(90), absl::Seconds(60)),
              ElementsAre("job a master (90 s)", "job a checkpoint coordinator (90 s)"));
  absl::SleepFor(absl::Milliseconds(600));
  master->Tick();
  // The master ticked 600 ms after the coordinator: seen 60 s after the
  // master's tick less 300 ms, only the coordinator is stuck.
  const absl::Time later = absl::Now();
  EXPECT_THAT(liveness.Stuck(later + absl::Seconds(60) - absl::Milliseconds(300), absl::Seconds(60)),
              ElementsAre(StartsWith("job a checkpoint coordinator (")));
  // A busy step (slow storage) counts as stuck only after the busy limit.
  {
    Liveness::Loop::Busy busy(master.get());
    EXPECT_THAT(liveness.Stuck(absl::Now() + absl::Minutes(10), absl::Seconds(60)),
                ElementsAre(StartsWith("job a checkpoint coordinator (")));
    EXPECT_THAT(liveness.Stuck(absl::Now() + kLivenessBusyLimit + absl::Seconds(1), absl::Seconds(60)),
                ElementsAre(StartsWith("job a master ("), StartsWith("job a checkpoint coordinator (")));
  }
  Liveness::Loop::Busy nothing(nullptr);  // no loop: no-op
  coordinator.reset();  // ended: no longer watched
  EXPECT_THAT(liveness.Stuck(later + absl::Seconds(30), absl::Seconds(60)), IsEmpty());
  EXPECT_THAT(liveness.Stuck(later + absl::Seconds(90), absl::Seconds(60)), ElementsAre(StartsWith("job a master (")));
}

}  // namespace
}  // namespace weir
