// FencedJobStore on a real etcd (the "etcd" fixture's server): a leader cut
// off from etcd that has not noticed it lost (its store still open in its
// process) is refused by etcd itself once a standby leads, and the store
// stays as the new leader wrote it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/etcd/etcd_client.h"
#include "common/fs/local_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobmanager/fenced_job_store.h"
#include "jobmanager/ha/etcd_leader_election.h"
#include "tests/etcd/etcd_test_server.h"
#include "tests/testing/process.h"

namespace weir::jobmanager {
namespace {

using ::testing::HasSubstr;
using ::weir::testing::WaitFor;

constexpr absl::Duration kDeadline = absl::Seconds(60);

// Knows the epoch; never fences the store: a leader that has not noticed.
class EpochListener : public ha::LeadershipListener {
 public:
  void Granted(ha::Epoch epoch) override { epoch_ = epoch; }
  void Revoked() override { revoked_ = true; }
  std::atomic<ha::Epoch> epoch_{0};
  std::atomic<bool> revoked_{false};
};

struct JobManagerSeat {
  EpochListener listener;
  std::unique_ptr<ha::EtcdLeaderElection> election;
  std::unique_ptr<FencedJobStore> store;
};

class FencedJobStoreEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_ = testing::SharedEtcdEndpoint();
    ASSERT_FALSE(endpoint_.empty()) << "WEIR_TEST_ETCD_DIR is not set: run through ctest (the etcd fixture)";
    absl::BitGen gen;
    cluster_id_ = absl::StrCat("job-store-", absl::Uniform<uint32_t>(gen));
    files_dir_ = testing::MakeTempDir("weir-fenced-job-store");
  }
  void TearDown() override {
    for (JobManagerSeat* seat : {&a_, &b_}) {
      if (seat->election != nullptr) seat->election->Stop();
    }
    std::error_code ec;
    std::filesystem::remove_all(files_dir_, ec);
  }

  void Start(JobManagerSeat& seat, const std::string& address) {
    etcd::EtcdClientOptions options;
    options.endpoints = {endpoint_};
    auto client = etcd::EtcdClient::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    ha::EtcdLeaderElectionOptions election;
    election.cluster_id = cluster_id_;
    election.address = address;
    auto created = ha::EtcdLeaderElection::Create(std::shared_ptr<etcd::EtcdClient>(*std::move(client)), election);
    ASSERT_TRUE(created.ok()) << created.status();
    seat.election = *std::move(created);
    auto files = fs::LocalFileSystem::Open(files_dir_);
    ASSERT_TRUE(files.ok()) << files.status();
    seat.store = std::make_unique<FencedJobStore>(*std::move(files), "", files_dir_, seat.election.get());
    ASSERT_TRUE(seat.election->Start(&seat.listener).ok());
  }

  std::string endpoint_, cluster_id_, files_dir_;
  JobManagerSeat a_, b_;
};

TEST_F(FencedJobStoreEtcdTest, ALeaderThatHasNotNoticedItLostIsRefusedByEtcd) {
  Start(a_, "jm-a:6123");
  ASSERT_TRUE(WaitFor([&] { return a_.listener.epoch_ != 0; }, kDeadline));
  const ha::Epoch old_epoch = a_.listener.epoch_;
  a_.store->Unfence(old_epoch);
  v1::SubmitJobRequest request;
  request.mutable_graph()->set_name("copy");
  ASSERT_TRUE(a_.store->SaveSubmission("aaaa", request).ok());
  ASSERT_TRUE(a_.store->SaveAttempt("aaaa", 1).ok());

  // Cut off: no keep-alive reaches etcd; the lease runs out and the standby
  // leads. A's store stays open in its process (its listener never fences).
  Start(b_, "jm-b:6123");
  a_.election->SetCutOffForTesting(true);
  ASSERT_TRUE(WaitFor([&] { return b_.listener.epoch_ != 0; }, kDeadline));
  const ha::Epoch new_epoch = b_.listener.epoch_;
  ASSERT_GT(new_epoch, old_epoch);
  b_.store->Unfence(new_epoch);
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = b_.store->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].last_attempt, 1);
  ASSERT_TRUE(b_.store->SaveAttempt("aaaa", 2).ok());

  absl::Status late = a_.store->SaveAttempt("aaaa", 7);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  EXPECT_THAT(std::string(late.message()), HasSubstr(absl::StrCat("epoch ", old_epoch, " no longer leads")));
  v1::JobStatus canceled;
  canceled.set_state(v1::CANCELED);
  EXPECT_EQ(a_.store->SaveFinal("aaaa", canceled).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(a_.store->Remove("aaaa").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(a_.store->SaveSubmission("bbbb", request).code(), absl::StatusCode::kAborted);

  jobs = b_.store->Load(&problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  EXPECT_EQ(jobs[0].last_attempt, 2);
  EXPECT_FALSE(jobs[0].final_status.has_value());
  // The refused submission's file (epoch old_epoch, named by no record) was
  // collected by that Load.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(files_dir_) / "submissions" / "bbbb") &&
               !std::filesystem::is_empty(std::filesystem::path(files_dir_) / "submissions" / "bbbb"));
}

}  // namespace
}  // namespace weir::jobmanager
