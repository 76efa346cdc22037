// Savepoint paths a client sends are used only inside state.savepoints.dir.
#include "jobmanager/checkpoint/savepoint.h"

#include "gtest/gtest.h"

namespace weir::jobmanager::checkpoint {
namespace {

TEST(PathInsideTest, TakesOnlyPathsInsideTheRoot) {
  EXPECT_EQ(*PathInside("/srv/sp", "", "k"), "/srv/sp");
  EXPECT_EQ(*PathInside("/srv/sp/", "", "k"), "/srv/sp");
  EXPECT_EQ(*PathInside("/srv/sp", "daily", "k"), "/srv/sp/daily");
  EXPECT_EQ(*PathInside("/srv/sp", "/srv/sp/a/../b", "k"), "/srv/sp/b");
  for (const char* outside : {"/etc", "..", "../sp2", "daily/../../x", "/srv/spx", "/srv"}) {
    absl::StatusOr<std::string> path = PathInside("/srv/sp", outside, "state.savepoints.dir");
    EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument) << outside;
  }
  EXPECT_EQ(PathInside("", "x", "state.savepoints.dir").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::jobmanager::checkpoint
