// The data exchange between real TaskManager processes at a fan-out the unit
// tests do not reach: an all-to-all keyBy at parallelism 16 on two
// TaskManagers (256 channels, 128 of them between the processes, all on one
// connection each way), every record counted once by the keyed operator.
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"
#include "tests/testing/local_cluster.h"

namespace weir {
namespace {

using testing::LocalCluster;

TEST(ShuffleTest, AnAllToAllKeyByAcrossTaskManagersDeliversEveryRecordOnce) {
  constexpr int kParallelism = 16;
  constexpr int64_t kRecordsPerSubtask = 20000;
  LocalCluster cluster({.taskmanagers = 2,
                        .slots_per_taskmanager = kParallelism / 2,
                        // Fewer network threads than slots: the threads are shared by all channels.
                        .config = {"-Dtaskmanager.network.netty.server.numThreads=1",
                                   "-Dtaskmanager.network.netty.client.numThreads=1"}});
  cluster.Start();
  std::string error;
  const std::string job = cluster.Submit(std::string(WEIR_JOBS_DIR) + "/network_shuffle.so",
                                         {"-p", std::to_string(kParallelism)},
                                         {"--records", std::to_string(kRecordsPerSubtask)}, &error);
  ASSERT_FALSE(job.empty()) << error;
  nlohmann::json status = cluster.WaitForJobEnd(job);
  ASSERT_FALSE(status.is_null()) << cluster.Logs();
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << "\n" << cluster.Logs();

  int64_t generated = 0;
  int64_t counted = 0;
  int counting_subtasks_with_records = 0;
  for (const auto& task : status["tasks"]) {
    const std::string name = task["name"].get<std::string>();
    if (absl::StrContains(name, "Generator")) generated += task["records_out"].get<int64_t>();
    if (absl::StrContains(name, "Count")) {
      counted += task["records_in"].get<int64_t>();
      if (task["records_in"].get<int64_t>() > 0) ++counting_subtasks_with_records;
    }
  }
  EXPECT_EQ(generated, kParallelism * kRecordsPerSubtask);
  EXPECT_EQ(counted, kParallelism * kRecordsPerSubtask) << "records were lost or counted twice";
  // 4096 keys over 16 subtasks: every keyed subtask had some, so records
  // crossed between the TaskManagers both ways.
  EXPECT_EQ(counting_subtasks_with_records, kParallelism);

  // Each TaskManager read from the other over one connection, with the
  // one network thread per side it was given.
  for (int i = 0; i < 2; ++i) {
    const int port = cluster.WeirJson({"cluster"})["taskmanagers"][i]["rest_port"].get<int>();
    testing::HttpResult metrics = testing::HttpGet(port, "/metrics");
    ASSERT_EQ(metrics.status, 200);
    EXPECT_TRUE(absl::StrContains(metrics.body, "weir_taskmanager_network_connections 1\n")) << metrics.body;
    EXPECT_TRUE(absl::StrContains(metrics.body, "weir_taskmanager_network_threads{side=\"server\"} 1\n"))
        << metrics.body;
  }
}

}  // namespace
}  // namespace weir
