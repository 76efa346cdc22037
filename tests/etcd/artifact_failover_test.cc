// Job binaries across a leader change, end to end: real weir-jobmanager
// processes with high-availability.type etcd against the "etcd" fixture's
// server, real TaskManagers and the real `weir` client. The binary is
// uploaded to leader A; A is SIGKILLed together with the only TaskManager
// that ever had the binary; a new TaskManager, with an empty private
// io.tmp.dirs and A's address as its jobmanager.rpc.address, runs the job's
// task under leader B, having downloaded the binary from B.
//
// Twice: with the JobManagers sharing one local high-availability.storageDir,
// and with high-availability.storageDir in S3 and no directory shared (the S3
// and etcd fixtures, artifact_failover_s3_test): then the job store's
// records are in etcd and its submissions, like the binaries, in the bucket.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/crypto/sha256.h"
#include "common/fs/s3/s3_file_system.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/etcd/etcd_test_server.h"
#include "tests/testing/http_get.h"
#include "tests/testing/process.h"

namespace weir {
namespace {

using testing::BinDir;
using testing::HttpGet;
using testing::RunCommand;
using testing::Subprocess;
using testing::WaitFor;

constexpr absl::Duration kDeadline = absl::Seconds(60);

struct JobManagerSeat {
  int rpc_port = 0;
  int rest_port = 0;
  std::unique_ptr<Subprocess> process;
  std::string address() const { return absl::StrCat("127.0.0.1:", rpc_port); }
};

class ArtifactFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("weir-artifact-failover");
    absl::BitGen gen;
    cluster_id_ = absl::StrCat("artifact-failover-", absl::Uniform<uint32_t>(gen));
  }

  void TearDown() override {
    for (JobManagerSeat& jm : jms_) jm.process.reset();
    taskmanagers_.clear();
    if (!HasFailure()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else {
      std::cerr << "kept " << dir_ << "\n";
    }
  }

  std::vector<std::string> HaConfig(const std::string& etcd) const {
    return {"-Dhigh-availability.type=etcd", absl::StrCat("-Dhigh-availability.etcd.endpoints=", etcd),
            absl::StrCat("-Dhigh-availability.cluster-id=", cluster_id_)};
  }

  // `storage`: the high-availability.storageDir and s3.* settings.
  void StartJobManager(int i, const std::string& etcd, const std::vector<std::string>& storage) {
    JobManagerSeat& jm = jms_[i];
    std::vector<std::string> argv = {BinDir() + "/weir-jobmanager", absl::StrCat("-Djobmanager.rpc.port=", jm.rpc_port),
                                     absl::StrCat("-Drest.port=", jm.rest_port),
                                     // Each its own local files.
                                     absl::StrCat("-Dio.tmp.dirs=", dir_, "/jobmanager-", i, "-tmp")};
    argv.insert(argv.end(), storage.begin(), storage.end());
    for (std::string& key : HaConfig(etcd)) argv.push_back(std::move(key));
    jm.process = std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/jobmanager-", i, ".log"));
  }

  // A TaskManager with its own, new io.tmp.dirs, configured with JobManager
  // `configured`'s address, finding the leader in etcd.
  Subprocess& StartTaskManager(const std::string& id, int configured, const std::string& etcd) {
    std::vector<std::string> argv = {BinDir() + "/weir-taskmanager",
                                     absl::StrCat("-Djobmanager.rpc.port=", jms_[configured].rpc_port),
                                     absl::StrCat("-Dtaskmanager.resource-id=", id),
                                     "-Dtaskmanager.numberOfTaskSlots=1", absl::StrCat("-Dio.tmp.dirs=", TmpDir(id))};
    for (std::string& key : HaConfig(etcd)) argv.push_back(std::move(key));
    argv.insert(argv.end(), taskmanager_settings_.begin(), taskmanager_settings_.end());
    taskmanagers_.push_back(std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/", id, ".log")));
    return *taskmanagers_.back();
  }

  std::string TmpDir(const std::string& taskmanager) const { return absl::StrCat(dir_, "/", taskmanager, "-tmp"); }

  testing::HttpResult Readyz(int i) const { return HttpGet(jms_[i].rest_port, "/readyz"); }

  nlohmann::json Weir(int i, std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/weir", "--jobmanager", jms_[i].address(), "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::CommandResult result = RunCommand(argv);
    if (result.exit_code != 0) {
      last_error_ = result.err;
      return nullptr;
    }
    return nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
  }

  nlohmann::json Rest(int i, const std::string& path) const {
    testing::HttpResult result = HttpGet(jms_[i].rest_port, path);
    if (result.status != 200) return nullptr;
    return nlohmann::json::parse(result.body, nullptr, /*allow_exceptions=*/false);
  }

  std::vector<std::string> Members(int via) {
    std::vector<std::string> ids;
    nlohmann::json cluster = Weir(via, {"cluster"});
    if (cluster.is_null()) return ids;
    for (const auto& tm : cluster["taskmanagers"]) ids.push_back(tm["id"]);
    return ids;
  }

  std::string Logs() const {
    std::string all;
    for (const JobManagerSeat& jm : jms_) {
      if (jm.process != nullptr) absl::StrAppend(&all, "--- ", jm.process->log_path(), "\n", jm.process->Log());
    }
    for (const auto& tm : taskmanagers_) absl::StrAppend(&all, "--- ", tm->log_path(), "\n", tm->Log());
    return all;
  }

  // The scenario of the file comment, with the JobManagers' `storage`.
  void NewTaskManagerGetsTheBinaryFromTheNewLeader(const std::vector<std::string>& storage);

  std::string dir_;
  std::string cluster_id_;
  // More settings of every TaskManager (the s3.* keys).
  std::vector<std::string> taskmanager_settings_;
  std::vector<JobManagerSeat> jms_;
  std::vector<std::unique_ptr<Subprocess>> taskmanagers_;
  std::string last_error_;
};

void ArtifactFailoverTest::NewTaskManagerGetsTheBinaryFromTheNewLeader(const std::vector<std::string>& storage) {
  const std::string etcd = testing::SharedEtcdEndpoint();
  ASSERT_FALSE(etcd.empty()) << "WEIR_TEST_ETCD_DIR is not set: run through ctest (the etcd fixture)";
  jms_.push_back(JobManagerSeat{testing::FreePort(), testing::FreePort()});
  jms_.push_back(JobManagerSeat{testing::FreePort(), testing::FreePort()});
  StartJobManager(0, etcd, storage);
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200 || !jms_[0].process->running(); }, kDeadline))
      << Logs();
  ASSERT_EQ(Readyz(0).status, 200) << Logs();
  StartJobManager(1, etcd, storage);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(1).body, jms_[0].address()); }, kDeadline))
      << Readyz(1).body << Logs();

  Subprocess& first = StartTaskManager("tm-first", /*configured=*/0, etcd);
  ASSERT_TRUE(WaitFor([&] { return Members(0) == std::vector<std::string>{"tm-first"}; }, kDeadline))
      << last_error_ << Logs();
  const std::string binary = std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so";
  absl::StatusOr<std::string> sha = crypto::Sha256OfFile(binary);
  ASSERT_TRUE(sha.ok()) << sha.status();
  nlohmann::json submitted = Weir(0, {"submit", binary, "-p", "1", "-Dexecution.checkpointing.interval=200ms"});
  ASSERT_FALSE(submitted.is_null()) << last_error_ << Logs();
  const std::string job = submitted["job_id"];
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json status = Rest(0, absl::StrCat("/jobs/", job));
        return !status.is_null() && status["state"] == "RUNNING";
      },
      kDeadline))
      << Logs();
  EXPECT_EQ(Rest(0, absl::StrCat("/jobs/", job))["artifact-sha256"], *sha);
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(first.Log(), absl::StrCat("loaded job binary ", *sha)); },
                      kDeadline))
      << first.Log();

  // The leader and the only TaskManager that had the binary die together.
  jms_[0].process->Signal(SIGKILL);
  first.Signal(SIGKILL);
  ASSERT_TRUE(jms_[0].process->Wait(absl::Seconds(10)).has_value());
  ASSERT_TRUE(first.Wait(absl::Seconds(10)).has_value());
  // A new TaskManager whose configured JobManager is the dead one: only
  // leader retrieval can send its download to B.
  ASSERT_FALSE(std::filesystem::exists(TmpDir("tm-new")));
  Subprocess& fresh = StartTaskManager("tm-new", /*configured=*/0, etcd);
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json status = Rest(1, absl::StrCat("/jobs/", job));
        return !status.is_null() && status["state"] == "RUNNING" &&
               Members(1) == std::vector<std::string>{"tm-new"};
      },
      kDeadline, absl::Milliseconds(50)))
      << Logs();
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(fresh.Log(), absl::StrCat("loaded job binary ", *sha)); },
                      kDeadline))
      << fresh.Log();
  EXPECT_TRUE(absl::StrContains(fresh.Log(), absl::StrCat("downloaded job binary ", *sha, " from the JobManager at ",
                                                          jms_[1].address())))
      << fresh.Log();
  const std::string kept = absl::StrCat(TmpDir("tm-new"), "/weir-tm-new/artifacts/", *sha, ".so");
  absl::StatusOr<std::string> kept_sha = crypto::Sha256OfFile(kept);
  ASSERT_TRUE(kept_sha.ok()) << kept_sha.status();
  EXPECT_EQ(*kept_sha, *sha);
  // Its task runs under B: checkpoints complete there.
  EXPECT_TRUE(WaitFor(
      [&] {
        nlohmann::json checkpoints = Rest(1, absl::StrCat("/jobs/", job, "/checkpoints"));
        if (checkpoints.is_null()) return false;
        const nlohmann::json& completed = checkpoints["latest"]["completed"];
        const nlohmann::json& restored = checkpoints["latest"]["restored"];
        if (completed.is_null()) return false;
        const int64_t restored_id = restored.is_null() ? 0 : restored["id"].get<int64_t>();
        return completed["id"].get<int64_t>() > restored_id;
      },
      kDeadline))
      << Logs();
}

TEST_F(ArtifactFailoverTest, ANewTaskManagerGetsTheBinaryFromTheNewLeader) {
  NewTaskManagerGetsTheBinaryFromTheNewLeader({absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha")});
}

// The storage in a bucket, and no directory the JobManagers share.
TEST_F(ArtifactFailoverTest, ANewTaskManagerGetsTheBinaryFromTheNewLeaderWithTheStorageInS3) {
  const char* s3_dir = std::getenv("WEIR_TEST_S3_DIR");
  if (s3_dir == nullptr) GTEST_SKIP() << "needs the S3 fixture: ctest runs it as artifact_failover_s3_test";
  const std::string endpoint =
      std::string(absl::StripAsciiWhitespace(testing::ReadFile(absl::StrCat(s3_dir, "/address"))));
  const std::vector<std::string> s3 = {absl::StrCat("-Ds3.endpoint=", endpoint), "-Ds3.path.style.access=true",
                                       "-Ds3.access-key=weir-test-access-key",
                                       "-Ds3.secret-key=weir-test-secret-key"};
  absl::BitGen gen;
  const std::string bucket = absl::StrFormat("failover-%08x", absl::Uniform<uint32_t>(gen));
  fs::S3Options options;
  options.endpoint = endpoint;
  options.path_style = true;
  options.access_key = "weir-test-access-key";
  options.secret_key = "weir-test-secret-key";
  absl::StatusOr<std::unique_ptr<fs::S3FileSystem>> bucket_fs = fs::S3FileSystem::Open(absl::StrCat("s3://", bucket), options);
  ASSERT_TRUE(bucket_fs.ok()) << bucket_fs.status();
  ASSERT_TRUE((*bucket_fs)->CreateBucket().ok());
  std::vector<std::string> storage = {absl::StrCat("-Dhigh-availability.storageDir=s3://", bucket, "/ha")};
  storage.insert(storage.end(), s3.begin(), s3.end());
  taskmanager_settings_ = s3;
  NewTaskManagerGetsTheBinaryFromTheNewLeader(storage);
  if (IsSkipped() || HasFailure()) return;
  absl::StatusOr<std::string> sha =
      crypto::Sha256OfFile(std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so");
  ASSERT_TRUE(sha.ok());
  EXPECT_TRUE((*bucket_fs)->Stat(absl::StrCat("ha/artifacts/sha256/", *sha)).ok());
}

}  // namespace
}  // namespace weir
