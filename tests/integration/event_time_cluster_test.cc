// Event time between real TaskManager processes: records keep their event
// time across a keyBy between TaskManagers (the job's sink fails it
// otherwise), every task's watermark reaches the JobManager, and weir status
// shows it; a bounded input ends event time.
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/process.h"

namespace weir {
namespace {

using testing::LocalCluster;

constexpr int64_t kStartMs = 1700000000000;  // the test job's first event time
const std::string kJob = std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so";

TEST(EventTimeClusterTest, WatermarksCrossTaskManagersAndShowInStatus) {
  LocalCluster cluster({.taskmanagers = 2, .slots_per_taskmanager = 2});
  cluster.Start();
  std::string error;
  const std::string job = cluster.Submit(kJob, {"-p", "2"}, {}, &error);
  ASSERT_FALSE(job.empty()) << error;
  // Every task (sources with the strategy, keyed tasks, which read both
  // TaskManagers) reports event time ten seconds or more past the start.
  nlohmann::json status;
  const bool advanced = testing::WaitFor(
      [&] {
        status = cluster.WeirJson({"status", job});
        if (status.is_null() || status["state"] != "RUNNING" || status["tasks"].empty()) return false;
        for (const auto& task : status["tasks"]) {
          if (task["watermark_ms"].is_null() || task["watermark_ms"].get<int64_t>() < kStartMs + 10000) return false;
        }
        return true;
      },
      absl::Seconds(120));
  ASSERT_TRUE(advanced) << status.dump(2) << "\n" << cluster.Logs();
  // The keyed tasks' event time is at most their sources' (the lowest of
  // their inputs).
  int64_t lowest_source = INT64_MAX;
  for (const auto& task : status["tasks"]) {
    if (absl::StrContains(task["name"].get<std::string>(), "TimedNumbers")) {
      lowest_source = std::min(lowest_source, task["watermark_ms"].get<int64_t>());
    }
  }
  const testing::CommandResult table = cluster.Weir({"status", job});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(table.out, "WATERMARK")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, "2023-11-14T22:")) << table.out;
  status = cluster.WeirJson({"status", job});
  EXPECT_EQ(status["state"], "RUNNING") << status.dump(2);
  ASSERT_EQ(cluster.Weir({"cancel", job}).exit_code, 0);
  EXPECT_GT(lowest_source, kStartMs);
}

TEST(EventTimeClusterTest, ABoundedInputEndsEventTime) {
  LocalCluster cluster({.taskmanagers = 2, .slots_per_taskmanager = 2});
  cluster.Start();
  std::string error;
  const std::string job = cluster.Submit(kJob, {"-p", "2"}, {"--count", "300"}, &error);
  ASSERT_FALSE(job.empty()) << error;
  const nlohmann::json status = cluster.WaitForJobEnd(job);
  ASSERT_FALSE(status.is_null()) << cluster.Logs();
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << "\n" << cluster.Logs();
  for (const auto& task : status["tasks"]) {
    EXPECT_EQ(task["watermark_ms"], INT64_MAX) << task.dump();
  }
  EXPECT_TRUE(absl::StrContains(cluster.Weir({"status", job}).out, " end")) << cluster.Weir({"status", job}).out;
}

}  // namespace
}  // namespace weir
