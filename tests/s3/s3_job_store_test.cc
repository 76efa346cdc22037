// The job store of JobManagers under an election with
// high-availability.storageDir in S3 (S3Proxy, the "s3" fixture): the
// submissions are objects, the records in the (in-memory) election's store.
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/config/configuration.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/s3/s3_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/s3/s3_test_server.h"
#include "jobmanager/fenced_job_store.h"
#include "jobmanager/ha/in_memory_leader_election.h"

namespace weir::jobmanager {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

class NoListener : public ha::LeadershipListener {
 public:
  void Granted(ha::Epoch) override {}
  void Revoked() override {}
};

class S3JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::S3TestBucket> bucket = testing::CreateS3TestBucket("jobstore");
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    bucket_ = bucket->name;
    ASSERT_TRUE(election_.Start(&listener_).ok());
  }

  void TearDown() override {
    election_.Stop();
    absl::StatusOr<fs::ObjectStorePath> bucket = fs::OpenObjectStorePath(absl::StrCat("s3://", bucket_));
    if (!bucket.ok()) return;
    EXPECT_TRUE(testing::EmptyS3TestBucket(*bucket->fs).ok());
  }

  // A JobManager's store on s3://<bucket>/ha, as the JobManager opens it.
  std::unique_ptr<FencedJobStore> NewStore() {
    const std::string uri = absl::StrCat("s3://", bucket_, "/ha");
    absl::StatusOr<fs::ObjectStorePath> location = fs::OpenObjectStorePath(uri);
    EXPECT_TRUE(location.ok()) << location.status();
    return std::make_unique<FencedJobStore>(location->fs, location->path, uri, &election_);
  }

  std::vector<std::string> Objects(const std::string& prefix) {
    absl::StatusOr<fs::ObjectStorePath> bucket = fs::OpenObjectStorePath(absl::StrCat("s3://", bucket_));
    absl::StatusOr<std::vector<fs::FileInfo>> listed = bucket->fs->List(prefix);
    EXPECT_TRUE(listed.ok()) << listed.status();
    std::vector<std::string> paths;
    if (listed.ok()) {
      for (const fs::FileInfo& f : *listed) paths.push_back(f.path);
    }
    return paths;
  }

  std::string bucket_;
  NoListener listener_;
  ha::InMemoryLeaderElection election_{"jm-a:1"};
};

TEST_F(S3JobStoreTest, SubmissionsAreObjectsAndALeaderChangeLoadsThem) {
  auto first = NewStore();
  absl::StatusOr<ha::Epoch> epoch1 = election_.Grant();
  ASSERT_TRUE(epoch1.ok());
  first->Unfence(*epoch1);
  v1::SubmitJobRequest request;
  request.mutable_graph()->set_name("copy");
  request.add_args(std::string(1 << 20, 'a'));  // large arguments: the object holds them, not etcd
  ASSERT_TRUE(first->SaveSubmission("aaaa", request).ok());
  ASSERT_TRUE(first->SaveAttempt("aaaa", 4).ok());
  ASSERT_TRUE(first->SaveSubmission("bbbb", request).ok());
  EXPECT_THAT(Objects("ha/submissions/"), SizeIs(2));

  ASSERT_TRUE(election_.Revoke().ok());
  first->Fence();
  auto second = NewStore();
  absl::StatusOr<ha::Epoch> epoch2 = election_.Grant();
  ASSERT_TRUE(epoch2.ok());
  second->Unfence(*epoch2);
  // bbbb's object is lost: reported; aaaa loads.
  std::vector<std::string> bbbb = Objects("ha/submissions/bbbb/");
  ASSERT_THAT(bbbb, SizeIs(1));
  absl::StatusOr<fs::ObjectStorePath> bucket = fs::OpenObjectStorePath(absl::StrCat("s3://", bucket_));
  ASSERT_TRUE(bucket->fs->Delete(bbbb[0]).ok());
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = second->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  EXPECT_EQ(jobs[0].last_attempt, 4);
  EXPECT_EQ(jobs[0].request.args(0).size(), 1u << 20);
  ASSERT_THAT(problems, SizeIs(1));
  EXPECT_THAT(problems[0], HasSubstr("job bbbb"));
  EXPECT_THAT(problems[0], HasSubstr(absl::StrCat("s3://", bucket_, "/ha/submissions/bbbb/")));

  // The old leader's late write is refused; the removal takes the object.
  first->Unfence(*epoch1);
  EXPECT_EQ(first->SaveAttempt("aaaa", 9).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(second->Remove("aaaa").ok());
  EXPECT_TRUE(Objects("ha/submissions/aaaa/").empty());
}

}  // namespace
}  // namespace weir::jobmanager
