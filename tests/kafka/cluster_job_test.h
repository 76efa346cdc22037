// ClusterJobTest: the fixture of the tests that run jobs on a real local
// cluster against the test broker — start a cluster, make topics, and wait
// for a job's attempts and checkpoints as `weir --json` reports them.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace weir::testing {

class ClusterJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = test::TestKafkaBootstrap();
    ASSERT_FALSE(bootstrap_.empty());
  }

  // `taskmanagers` TaskManagers of one slot each.
  void StartCluster(int taskmanagers) {
    cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{taskmanagers, 1, {}, ""});
    cluster_->Start();
  }

  // A new topic of 4 partitions.
  std::string NewTopic(const std::string& prefix, int partitions = 4) {
    std::string topic = test::UniqueTopicName(prefix);
    absl::Status created = test::CreateTopic(bootstrap_, topic, partitions);
    EXPECT_TRUE(created.ok()) << created;
    return topic;
  }

  // The job and every task RUNNING, in an attempt after `min_attempt - 1`.
  bool WaitUntilRunning(const std::string& job, int min_attempt = 1) {
    return WaitFor([&] {
      nlohmann::json s = cluster_->WeirJson({"status", job});
      if (s.is_null() || s["state"] != "RUNNING" || s["attempt"].get<int>() < min_attempt) return false;
      for (const auto& t : s["tasks"]) {
        if (t["state"] != "RUNNING") return false;
      }
      return true;
    }, absl::Seconds(120));
  }

  // Waits until a checkpoint of attempt >= `attempt` (and id > `after_id`)
  // has completed.
  bool WaitForCompletedCheckpoint(const std::string& job, int attempt, int64_t after_id = 0) {
    return WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
      if (c.is_null()) return false;
      for (const auto& cp : c["checkpoints"]) {
        if (cp["status"] == "COMPLETED" && cp["attempt"].get<int>() >= attempt && cp["id"].get<int64_t>() > after_id) {
          return true;
        }
      }
      return false;
    }, absl::Seconds(60));
  }

  // Records read by the Kafka source tasks of the attempt `status` (a
  // `weir --json status` answer) shows.
  static int64_t SourceRecordsIn(const nlohmann::json& status) {
    int64_t read = 0;
    if (status.is_null()) return read;
    for (const auto& t : status["tasks"]) {
      if (t["name"].get<std::string>().find("KafkaSource") != std::string::npos) read += t["records_in"].get<int64_t>();
    }
    return read;
  }

  // The index of a TaskManager that runs a task of `job`, at random.
  int BusyTaskManager(const std::string& job, std::mt19937& random) {
    nlohmann::json s = cluster_->WeirJson({"status", job});
    std::vector<std::string> ids;
    for (const auto& t : s["tasks"]) ids.push_back(t["taskmanager_id"]);
    std::string id = ids.at(std::uniform_int_distribution<size_t>(0, ids.size() - 1)(random));
    int index = 0;
    EXPECT_TRUE(absl::SimpleAtoi(id.substr(3), &index)) << id;  // "tm-<i>"
    return index;
  }

  std::string bootstrap_;
  std::unique_ptr<LocalCluster> cluster_;
};

}  // namespace weir::testing
