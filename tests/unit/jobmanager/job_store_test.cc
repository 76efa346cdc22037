// JobStore: what a restarted JobManager reads back, and the lock that keeps
// a second JobManager off the same directory.
#include "jobmanager/job_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::jobmanager {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) / absl::StrCat("job-store-", getpid(), "-", counter_++)).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static int counter_;
  std::string dir_;
};
int JobStoreTest::counter_ = 0;

TEST_F(JobStoreTest, RoundTripsSubmissionsAttemptsAndFinalStatus) {
  auto store = DirectoryJobStore::Open(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::SubmitJobRequest a;
  a.mutable_graph()->set_name("copy");
  a.set_parallelism(2);
  a.set_artifact_sha256("abc");
  ASSERT_TRUE((*store)->SaveSubmission("aaaa", a).ok());
  ASSERT_TRUE((*store)->SaveAttempt("aaaa", 3).ok());
  v1::SubmitJobRequest b;
  b.mutable_graph()->set_name("count");
  ASSERT_TRUE((*store)->SaveSubmission("bbbb", b).ok());
  v1::JobStatus ended;
  ended.set_job_id("bbbb");
  ended.set_state(v1::CANCELED);
  ASSERT_TRUE((*store)->SaveFinal("bbbb", ended).ok());
  store->reset();  // releases the lock, as a JobManager that exits does

  auto again = DirectoryJobStore::Open(dir_);
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = (*again)->Load(&problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  EXPECT_EQ(jobs[0].request.graph().name(), "copy");
  EXPECT_EQ(jobs[0].request.parallelism(), 2);
  EXPECT_EQ(jobs[0].last_attempt, 3);
  EXPECT_FALSE(jobs[0].final_status.has_value());
  EXPECT_EQ(jobs[1].job_id, "bbbb");
  ASSERT_TRUE(jobs[1].final_status.has_value());
  EXPECT_EQ(jobs[1].final_status->state(), v1::CANCELED);
}

TEST_F(JobStoreTest, ASecondJobStoreOnTheDirectoryIsRefused) {
  auto first = DirectoryJobStore::Open(dir_);
  ASSERT_TRUE(first.ok());
  auto second = DirectoryJobStore::Open(dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("another JobManager uses"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(dir_));
}

TEST_F(JobStoreTest, AnObjectStoreDirectoryIsRefusedWithoutAnElection) {
  auto store = DirectoryJobStore::Open("s3://bucket/ha");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("high-availability.type etcd"));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("local directory"));
}

TEST_F(JobStoreTest, AnUnreadableJobIsReportedAndTheOthersLoad) {
  auto store = DirectoryJobStore::Open(dir_);
  ASSERT_TRUE(store.ok());
  v1::SubmitJobRequest a;
  a.mutable_graph()->set_name("fine");
  ASSERT_TRUE((*store)->SaveSubmission("aaaa", a).ok());
  fs::create_directories(fs::path(dir_) / "jobs" / "cccc");
  std::ofstream(fs::path(dir_) / "jobs" / "cccc" / "submission") << "\xff\xff not a protobuf";
  // Not a job id: ignored.
  fs::create_directories(fs::path(dir_) / "jobs" / "..hidden");
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = (*store)->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("cccc"));
  EXPECT_FALSE((*store)->SaveAttempt("../escape", 1).ok());
}

}  // namespace
}  // namespace weir::jobmanager
