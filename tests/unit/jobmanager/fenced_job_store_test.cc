// FencedJobStore over an in-memory election (fenced exactly like etcd's) and
// a local FileSystem: writes land only for the current epoch, a new leader
// reads what its predecessors wrote, and broken records or files are
// reported rather than loaded.
#include "jobmanager/fenced_job_store.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/fs/local_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobmanager/ha/in_memory_leader_election.h"

namespace weir::jobmanager {
namespace {

namespace stdfs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class NoListener : public ha::LeadershipListener {
 public:
  void Granted(ha::Epoch) override {}
  void Revoked() override {}
};

v1::SubmitJobRequest Submission(const std::string& name) {
  v1::SubmitJobRequest request;
  request.mutable_graph()->set_name(name);
  request.set_parallelism(2);
  request.add_args("--rate=10");
  return request;
}

// Every file under `dir`, relative to it.
std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : stdfs::recursive_directory_iterator(dir, ec)) {
    if (entry.is_regular_file()) found.push_back(stdfs::relative(entry.path(), dir).string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

class FencedJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (stdfs::path(::testing::TempDir()) / absl::StrCat("fenced-job-store-", getpid(), "-", counter_++))
               .string();
    stdfs::remove_all(dir_);
    ASSERT_TRUE(election_.Start(&listener_).ok());
  }
  void TearDown() override {
    election_.Stop();
    stdfs::remove_all(dir_);
  }

  // A JobManager's store: every one shares the election's store and the
  // directory, as JobManagers share etcd and high-availability.storageDir.
  std::unique_ptr<FencedJobStore> NewStore() {
    auto files = fs::LocalFileSystem::Open(dir_);
    EXPECT_TRUE(files.ok()) << files.status();
    return std::make_unique<FencedJobStore>(*std::move(files), "", dir_, &election_);
  }

  // The job store's file of `job`'s submission (there is one).
  std::string SubmissionFile(const std::string& job) {
    std::vector<std::string> files = FilesUnder(absl::StrCat(dir_, "/submissions/", job));
    EXPECT_THAT(files, SizeIs(1));
    return files.empty() ? "" : absl::StrCat(dir_, "/submissions/", job, "/", files[0]);
  }

  static int counter_;
  std::string dir_;
  NoListener listener_;
  ha::InMemoryLeaderElection election_{"jm-a:1"};
};
int FencedJobStoreTest::counter_ = 0;

TEST_F(FencedJobStoreTest, RoundTripsSubmissionsAttemptsAndFinalStatus) {
  auto store = NewStore();
  absl::StatusOr<ha::Epoch> epoch = election_.Grant();
  ASSERT_TRUE(epoch.ok());
  store->Unfence(*epoch);
  ASSERT_TRUE(store->SaveSubmission("aaaa", Submission("copy")).ok());
  ASSERT_TRUE(store->SaveAttempt("aaaa", 3).ok());
  ASSERT_TRUE(store->SaveSubmission("bbbb", Submission("count")).ok());
  v1::JobStatus ended;
  ended.set_job_id("bbbb");
  ended.set_state(v1::CANCELED);
  ASSERT_TRUE(store->SaveFinal("bbbb", ended).ok());
  // An attempt for a job the store does not know is refused, not invented.
  EXPECT_EQ(store->SaveAttempt("cccc", 1).code(), absl::StatusCode::kNotFound);

  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = NewStore()->Load(&problems);
  EXPECT_TRUE(problems.empty()) << problems[0];
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  EXPECT_EQ(jobs[0].request.graph().name(), "copy");
  EXPECT_EQ(jobs[0].request.args(0), "--rate=10");
  EXPECT_EQ(jobs[0].last_attempt, 3);
  EXPECT_FALSE(jobs[0].final_status.has_value());
  EXPECT_EQ(jobs[1].job_id, "bbbb");
  ASSERT_TRUE(jobs[1].final_status.has_value());
  EXPECT_EQ(jobs[1].final_status->state(), v1::CANCELED);

  // A removed job leaves neither its record nor its file.
  ASSERT_TRUE(store->Remove("bbbb").ok());
  EXPECT_FALSE(election_.Get(FencedJobStore::RecordKey("bbbb"))->has_value());
  EXPECT_THAT(FilesUnder(dir_), SizeIs(1));
  EXPECT_THAT(NewStore()->Load(&problems), SizeIs(1));
}

// In the process: nothing is written while fenced (a standby, or a leader
// after Revoked).
TEST_F(FencedJobStoreTest, WritesOnlyWhileUnfenced) {
  auto store = NewStore();
  absl::StatusOr<ha::Epoch> epoch = election_.Grant();
  ASSERT_TRUE(epoch.ok());
  absl::Status fenced = store->SaveSubmission("aaaa", Submission("copy"));
  EXPECT_EQ(fenced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fenced.message()), HasSubstr("does not lead"));
  EXPECT_TRUE(FilesUnder(dir_).empty());

  store->Unfence(*epoch);
  ASSERT_TRUE(store->SaveSubmission("aaaa", Submission("copy")).ok());
  ASSERT_TRUE(store->SaveAttempt("aaaa", 1).ok());
  store->Fence();
  EXPECT_EQ(store->SaveAttempt("aaaa", 2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->SaveFinal("aaaa", v1::JobStatus()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Remove("aaaa").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store->SaveAttempt("../escape", 1).ok());

  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = NewStore()->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].last_attempt, 1);
  EXPECT_FALSE(jobs[0].final_status.has_value());
}

// A leader that does not know it was deposed (frozen, cut off): its store
// is still unfenced in its process, but every write for its epoch is
// refused by the election's store, and changes nothing there.
TEST_F(FencedJobStoreTest, AWriteForAStaleEpochIsRefusedAndChangesNothing) {
  auto deposed = NewStore();
  absl::StatusOr<ha::Epoch> first = election_.Grant();
  ASSERT_TRUE(first.ok());
  deposed->Unfence(*first);
  ASSERT_TRUE(deposed->SaveSubmission("aaaa", Submission("copy")).ok());
  ASSERT_TRUE(deposed->SaveAttempt("aaaa", 1).ok());
  const std::vector<std::string> files_before = FilesUnder(dir_);

  absl::StatusOr<ha::Epoch> second = election_.GrantElsewhere("jm-b:1");
  ASSERT_TRUE(second.ok());
  ASSERT_GT(*second, *first);
  EXPECT_EQ(deposed->SaveAttempt("aaaa", 2).code(), absl::StatusCode::kAborted);
  v1::JobStatus failed;
  failed.set_state(v1::FAILED);
  EXPECT_EQ(deposed->SaveFinal("aaaa", failed).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(deposed->Remove("aaaa").code(), absl::StatusCode::kAborted);
  absl::Status submitted = deposed->SaveSubmission("dddd", Submission("late"));
  EXPECT_EQ(submitted.code(), absl::StatusCode::kAborted) << submitted;
  EXPECT_THAT(std::string(submitted.message()), HasSubstr("no longer leads"));

  // The store as it was: the job, its attempt 1, its file; no new job.
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = NewStore()->Load(&problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  EXPECT_EQ(jobs[0].last_attempt, 1);
  EXPECT_FALSE(jobs[0].final_status.has_value());
  EXPECT_FALSE(election_.Get(FencedJobStore::RecordKey("dddd"))->has_value());
  // The refused submission's file was written before its record was
  // refused; no record names it, and the next leader collects it.
  EXPECT_THAT(FilesUnder(absl::StrCat(dir_, "/submissions/dddd")), SizeIs(1));
  auto next = NewStore();
  absl::StatusOr<ha::Epoch> third = election_.GrantElsewhere("jm-c:1");
  ASSERT_TRUE(third.ok());
  next->Unfence(*third);
  EXPECT_THAT(next->Load(&problems), SizeIs(1));
  EXPECT_EQ(FilesUnder(dir_), files_before);
}

// The next leader reads what the last one wrote, goes on writing for its
// own epoch, and the last one's writes stay refused when it comes back.
TEST_F(FencedJobStoreTest, ANewLeaderLoadsTheJobsAndTakesOverTheirRecords) {
  auto first = NewStore();
  absl::StatusOr<ha::Epoch> epoch1 = election_.Grant();
  ASSERT_TRUE(epoch1.ok());
  first->Unfence(*epoch1);
  ASSERT_TRUE(first->SaveSubmission("aaaa", Submission("copy")).ok());
  ASSERT_TRUE(first->SaveAttempt("aaaa", 2).ok());
  ASSERT_TRUE(election_.Revoke().ok());
  first->Fence();

  auto second = NewStore();
  absl::StatusOr<ha::Epoch> epoch2 = election_.Grant();
  ASSERT_TRUE(epoch2.ok());
  second->Unfence(*epoch2);
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = second->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].last_attempt, 2);
  ASSERT_TRUE(second->SaveAttempt("aaaa", 3).ok());
  // The first store, unfenced with its old epoch, is refused.
  first->Unfence(*epoch1);
  EXPECT_EQ(first->SaveAttempt("aaaa", 9).code(), absl::StatusCode::kAborted);
  jobs = NewStore()->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].last_attempt, 3);
  // Its file, of an earlier epoch but named by the record, stays.
  EXPECT_THAT(FilesUnder(absl::StrCat(dir_, "/submissions/aaaa")), SizeIs(1));
  EXPECT_TRUE(problems.empty());
}

TEST_F(FencedJobStoreTest, AMissingOrCorruptSubmissionIsReportedAndTheOthersLoad) {
  auto store = NewStore();
  absl::StatusOr<ha::Epoch> epoch = election_.Grant();
  ASSERT_TRUE(epoch.ok());
  store->Unfence(*epoch);
  for (const char* id : {"aaaa", "bbbb", "cccc", "dddd"}) ASSERT_TRUE(store->SaveSubmission(id, Submission(id)).ok());
  // bbbb's file is gone, cccc's holds other bytes of its size, dddd's
  // record is not a record.
  stdfs::remove(SubmissionFile("bbbb"));
  {
    const std::string path = SubmissionFile("cccc");
    const auto size = stdfs::file_size(path);
    std::ofstream(path, std::ios::trunc) << std::string(size, 'x');
  }
  ASSERT_TRUE(election_.FencedPut(*epoch, FencedJobStore::RecordKey("dddd"), "\xff\xff not a record").ok());
  // Not a job id: reported, not loaded.
  ASSERT_TRUE(election_.FencedPut(*epoch, "jobs/../x", "").ok());

  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = NewStore()->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job_id, "aaaa");
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_THAT(problems[0], HasSubstr("jobs/../x"));
  EXPECT_THAT(problems[1], HasSubstr("job bbbb"));
  EXPECT_THAT(problems[1], HasSubstr("cannot be read"));
  EXPECT_THAT(problems[2], HasSubstr("job cccc"));
  EXPECT_THAT(problems[2], HasSubstr("SHA-256"));
  EXPECT_THAT(problems[3], HasSubstr("job dddd"));
}

TEST_F(FencedJobStoreTest, AFinalStatusOfManyTasksIsKeptWithinTheRecordBound) {
  auto store = NewStore();
  absl::StatusOr<ha::Epoch> epoch = election_.Grant();
  ASSERT_TRUE(epoch.ok());
  store->Unfence(*epoch);
  ASSERT_TRUE(store->SaveSubmission("aaaa", Submission("wide")).ok());
  v1::JobStatus ended;
  ended.set_state(v1::FAILED);
  ended.set_error(std::string(100 << 10, 'e'));
  for (int i = 0; i < 4000; ++i) {
    v1::TaskStatus* task = ended.add_tasks();
    task->set_name(std::string(100, 't'));
    task->set_error("boom");
  }
  ASSERT_GT(ended.ByteSizeLong(), static_cast<size_t>(FencedJobStore::kMaxRecordBytes));
  ASSERT_TRUE(store->SaveFinal("aaaa", ended).ok());
  std::vector<std::string> problems;
  std::vector<StoredJob> jobs = NewStore()->Load(&problems);
  ASSERT_EQ(jobs.size(), 1u);
  ASSERT_TRUE(jobs[0].final_status.has_value());
  EXPECT_EQ(jobs[0].final_status->state(), v1::FAILED);
  EXPECT_EQ(jobs[0].final_status->tasks_size(), 0);
  EXPECT_FALSE(jobs[0].final_status->error().empty());
}

}  // namespace
}  // namespace weir::jobmanager
