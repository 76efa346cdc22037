// Checkpoints and savepoints in an object store, on a real cluster: the
// weir daemons with state.checkpoints.dir and state.savepoints.dir at
// s3://<bucket>/..., a real S3-compatible server (S3Proxy, started by
// scripts/s3.sh for each test, so that a test may stop and restart it) and
// the real Kafka broker (WEIR_TEST_KAFKA_DIR). keyed_count keeps its counts
// in RocksDB with incremental checkpoints, so the shared files go to S3 too.
#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fs/s3/s3_file_system.h"
#include "gtest/gtest.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/script_server.h"

namespace weir {
namespace {

using test::KafkaMessage;
using testing::KeyedCountBatch;
using testing::LocalCluster;
using testing::ScriptServer;
using testing::WaitFor;

const std::string kJobs = WEIR_JOBS_DIR;
constexpr char kAccessKey[] = "weir-test-access-key";
constexpr char kSecretKey[] = "weir-test-secret-key";

class S3ClusterTest : public testing::ClusterJobTest {
 protected:
  void SetUp() override {
    ClusterJobTest::SetUp();
    absl::StatusOr<std::unique_ptr<ScriptServer>> s3 = ScriptServer::Start("s3.sh");
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = *std::move(s3);
    bucket_ = absl::StrFormat("weir-%08x", std::random_device()());
    fs::S3Options options;
    options.endpoint = s3_->address();
    options.access_key = kAccessKey;
    options.secret_key = kSecretKey;
    options.path_style = true;
    auto bucket = fs::S3FileSystem::Open(absl::StrCat("s3://", bucket_), options);
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    bucket_fs_ = *std::move(bucket);
    ASSERT_TRUE(bucket_fs_->CreateBucket().ok());
  }

  // The cluster first (its daemons may still write), then the server and
  // its directory of objects.
  void TearDown() override {
    cluster_.reset();
    if (s3_ == nullptr) return;
    const std::string dir = s3_->dir();
    s3_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // `taskmanagers` one-slot TaskManagers whose checkpoints and savepoints go
  // to the bucket.
  void StartS3Cluster(int taskmanagers) {
    LocalCluster::Options options{taskmanagers, 1, {}, ""};
    options.config = {absl::StrCat("-Ds3.endpoint=", s3_->address()), "-Ds3.path.style.access=true",
                      absl::StrCat("-Ds3.access-key=", kAccessKey), absl::StrCat("-Ds3.secret-key=", kSecretKey),
                      absl::StrCat("-Dstate.checkpoints.dir=s3://", bucket_, "/checkpoints"),
                      absl::StrCat("-Dstate.savepoints.dir=s3://", bucket_, "/savepoints")};
    cluster_ = std::make_unique<LocalCluster>(options);
    cluster_->Start();
  }

  std::string Submit(std::vector<std::string> options, const std::string& in, const std::string& out,
                     std::string* error = nullptr) {
    std::string ignored;
    std::string job = cluster_->Submit(kJobs + "/keyed_count.so", options,
                                       {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out},
                                       error != nullptr ? error : &ignored);
    if (error == nullptr) {
      EXPECT_FALSE(job.empty()) << ignored << cluster_->Logs();
    }
    return job;
  }

  bool CaughtUp(const std::string& out, const std::map<std::string, int64_t>& truth) {
    std::map<std::string, int64_t> last;
    const bool ok = WaitFor([&] {
      last = LastCounts(out);
      return last == truth;
    }, absl::Seconds(90), absl::Seconds(1));
    int wrong = 0;
    for (const auto& [key, count] : truth) {
      if (last[key] != count && ++wrong <= 5) ADD_FAILURE() << key << ": last count " << last[key] << ", true " << count;
    }
    return ok;
  }

  // Object paths in the bucket under `prefix`.
  std::vector<std::string> Objects(const std::string& prefix) {
    std::vector<std::string> paths;
    absl::StatusOr<std::vector<fs::FileInfo>> files = bucket_fs_->List(prefix);
    EXPECT_TRUE(files.ok()) << files.status();
    if (files.ok()) {
      for (const fs::FileInfo& f : *files) paths.push_back(f.path);
    }
    return paths;
  }

  static int CountEnding(const std::vector<std::string>& paths, absl::string_view suffix) {
    return static_cast<int>(std::count_if(paths.begin(), paths.end(),
                                          [&](const std::string& p) { return absl::EndsWith(p, suffix); }));
  }

  std::unique_ptr<ScriptServer> s3_;
  std::string bucket_;
  std::unique_ptr<fs::S3FileSystem> bucket_fs_;
};

// keyed_count at parallelism 2 on three TaskManagers, checkpoints every
// 300 ms into S3; a TaskManager that runs tasks is SIGKILLed while records
// arrive. The job restores from the checkpoint in S3 and every key ends with
// its true count.
TEST_F(S3ClusterTest, KilledTaskManagerRestoresFromACheckpointInS3) {
  StartS3Cluster(3);
  const std::string in = NewTopic("s3-recovery-in"), out = NewTopic("s3-recovery-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                                  "-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.attempts=5",
                                  "-Drestart-strategy.fixed-delay.delay=200ms"},
                                 in, out);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::mt19937 random(std::random_device{}());
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 8000, kDistinct = 500;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();
  absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 800)(random)));
  cluster_->KillTaskManager(BusyTaskManager(job, random));
  cluster_->StartTaskManager();
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  EXPECT_TRUE(CaughtUp(out, truth)) << cluster_->Logs();

  nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_EQ(status["restarts"].get<int>(), 1) << status.dump(2);
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  EXPECT_LT(SourceRecordsIn(status), 2 * kBatch) << status.dump(2);
  // The state came from the bucket, and only the bucket holds checkpoints.
  EXPECT_TRUE(absl::StrContains(cluster_->Logs(), "downloaded the state of checkpoint")) << cluster_->Logs();
  const std::vector<std::string> objects = Objects(absl::StrCat("checkpoints/", job, "/"));
  EXPECT_GE(CountEnding(objects, "/_metadata"), 1);
  EXPECT_GE(CountEnding(objects, ".snapshot"), 2);
  EXPECT_TRUE(std::any_of(objects.begin(), objects.end(), [&](const std::string& p) {
    return absl::StartsWith(p, absl::StrCat("checkpoints/", job, "/shared/c"));
  })) << "incremental checkpoints upload their SST files into shared/";
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(cluster_->dir(), "/ha/checkpoints/", job)));
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  ASSERT_EQ(cluster_->WaitForJobEnd(job, absl::Seconds(60))["state"], "CANCELED");
  // A canceled job's checkpoints go (DELETE_ON_CANCELLATION).
  EXPECT_TRUE(WaitFor([&] { return Objects(absl::StrCat("checkpoints/", job, "/")).empty(); }, absl::Seconds(30)));
}

// The JobManager is SIGKILLed while the job runs and restarted: it finds the
// job's newest checkpoint in S3 (listing the bucket, reading _metadata back)
// and the job goes on from it with exact counts.
TEST_F(S3ClusterTest, ARestartedJobManagerResumesFromItsCheckpointInS3) {
  StartS3Cluster(2);
  const std::string in = NewTopic("s3-jm-kill-in"), out = NewTopic("s3-jm-kill-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 6000, kDistinct = 300;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();
  cluster_->RestartJobManager();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  EXPECT_TRUE(CaughtUp(out, truth)) << cluster_->Logs();
  const nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_GT(status["attempt"].get<int>(), 1) << status.dump(2);
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// weir savepoint into S3, cancel, and a new job from that savepoint: its
// counts go on from the savepoint's, its sources from its offsets.
TEST_F(S3ClusterTest, ASavepointInS3CarriesStateIntoANewJob) {
  StartS3Cluster(2);
  const std::string in = NewTopic("s3-savepoint-in"), out = NewTopic("s3-savepoint-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 6000, kDistinct = 300;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(CaughtUp(out, truth)) << cluster_->Logs();
  nlohmann::json saved = cluster_->WeirJson({"savepoint", job});
  ASSERT_FALSE(saved.is_null()) << cluster_->Logs();
  const std::string path = saved["savepoint_path"];
  const std::string prefix = absl::StrCat("s3://", bucket_, "/savepoints/");
  ASSERT_TRUE(absl::StartsWith(path, prefix)) << path;
  const std::string key = path.substr(absl::StrCat("s3://", bucket_, "/").size());
  EXPECT_TRUE(*bucket_fs_->Exists(absl::StrCat(key, "/_savepoint"))) << path;
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  ASSERT_EQ(cluster_->WaitForJobEnd(job, absl::Seconds(60))["state"], "CANCELED");

  const std::string resumed = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-s", path}, in, out);
  ASSERT_FALSE(resumed.empty());
  ASSERT_TRUE(WaitUntilRunning(resumed)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  EXPECT_TRUE(CaughtUp(out, truth)) << cluster_->Logs();
  nlohmann::json status = cluster_->WeirJson({"status", resumed});
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  EXPECT_EQ(SourceRecordsIn(status), kBatch) << status.dump(2);
  // A savepoint path outside state.savepoints.dir is refused.
  std::string error;
  EXPECT_TRUE(Submit({"-p", "2", "-s", absl::StrCat("s3://", bucket_, "/elsewhere")}, in, out, &error).empty());
  EXPECT_TRUE(absl::StrContains(error, "neither inside state.savepoints.dir")) << error;
  ASSERT_EQ(cluster_->Weir({"cancel", resumed}).exit_code, 0);
}

// A JobManager whose checkpoint bucket does not exist, or whose keys the
// store refuses, does not start; its error names the key, the bucket and the
// HTTP status.
TEST_F(S3ClusterTest, AMissingBucketOrWrongKeysStopTheJobManagerAtStart) {
  const std::string storage = absl::StrCat(::testing::TempDir(), "/s3-bad-", bucket_);
  struct Case {
    std::string bucket, secret, expected;
  };
  for (const Case& c : {Case{"no-such-bucket-weir", kSecretKey, "HTTP 404"}, Case{bucket_, "wrong-secret", "HTTP 403"}}) {
    testing::CommandResult result = testing::RunCommand(
        {testing::BinDir() + "/weir-jobmanager", absl::StrCat("-Dhigh-availability.storageDir=", storage),
         absl::StrCat("-Ds3.endpoint=", s3_->address()), "-Ds3.path.style.access=true",
         absl::StrCat("-Ds3.access-key=", kAccessKey), absl::StrCat("-Ds3.secret-key=", c.secret),
         absl::StrCat("-Dstate.checkpoints.dir=s3://", c.bucket, "/checkpoints")});
    EXPECT_NE(result.exit_code, 0) << result.err;
    EXPECT_TRUE(absl::StrContains(result.err, "state.checkpoints.dir")) << result.err;
    EXPECT_TRUE(absl::StrContains(result.err, c.bucket)) << result.err;
    EXPECT_TRUE(absl::StrContains(result.err, c.expected)) << result.err;
  }
  std::filesystem::remove_all(storage);
}

// S3 goes away while the job runs: checkpoints fail, the job keeps running
// (no restart), and once S3 is back a later checkpoint completes and the
// counts stay exact.
TEST_F(S3ClusterTest, AnS3OutageFailsCheckpointsNotTheJob) {
  StartS3Cluster(2);
  const std::string in = NewTopic("s3-outage-in"), out = NewTopic("s3-outage-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                                  "-Dexecution.checkpointing.timeout=20s"},
                                 in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 5000, kDistinct = 300;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();

  ASSERT_TRUE(s3_->Stop().ok());
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  int64_t failed_id = 0;
  std::string reason;
  ASSERT_TRUE(WaitFor([&] {
    nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
    if (c.is_null()) return false;
    for (const auto& cp : c["checkpoints"]) {
      if (cp["status"] != "FAILED" || cp["id"].get<int64_t>() <= failed_id) continue;
      failed_id = cp["id"].get<int64_t>();
      reason = cp["failure_reason"];
    }
    return failed_id > 0;
  }, absl::Seconds(90))) << cluster_->Logs();
  // Failed for want of the store: an upload or a request to it.
  EXPECT_TRUE(absl::StrContains(reason, "s3://") || absl::StrContains(reason, "localhost")) << reason;
  nlohmann::json during = cluster_->WeirJson({"status", job});
  EXPECT_EQ(during["state"], "RUNNING") << during.dump(2);
  EXPECT_EQ(during["restarts"].get<int>(), 0) << during.dump(2);

  ASSERT_TRUE(s3_->Restart().ok());
  EXPECT_TRUE(WaitForCompletedCheckpoint(job, 1, failed_id)) << cluster_->Logs();
  EXPECT_TRUE(CaughtUp(out, truth)) << cluster_->Logs();
  nlohmann::json after = cluster_->WeirJson({"status", job});
  EXPECT_EQ(after["restarts"].get<int>(), 0) << after.dump(2);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

}  // namespace
}  // namespace weir
