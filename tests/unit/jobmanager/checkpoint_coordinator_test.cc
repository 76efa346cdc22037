#include "jobmanager/checkpoint/checkpoint_coordinator.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/time/simulated_clock.h"
#include "tests/testing/process.h"

namespace weir::jobmanager::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::Duration kWait = absl::Seconds(30);
const char kJob[] = "job-1";

// Records every call; a test waits for calls with a deadline.
class FakeGateway final : public CheckpointTaskGateway {
 public:
  struct Trigger {
    int attempt = 0;
    std::string task_id;
    int64_t id = 0;
    int64_t timestamp_unix_ms = 0;
    bool stop = false;
  };
  struct Notice {
    int attempt = 0;
    int64_t id = 0;
    bool completed = false;
    std::string reason;
    // Whether chk-<id>/_metadata read back valid when the tasks were told.
    bool metadata_valid = false;
  };
  struct Calls {
    std::vector<Trigger> triggers;
    std::vector<Notice> notices;
    std::vector<std::string> fail_job;
    // FinishStop calls: (id, end_input), and how many notices came before.
    std::vector<std::pair<int64_t, bool>> finish_stops;
    std::vector<size_t> notices_before_finish;
    // The most checkpoints in progress seen when a trigger was sent.
    int max_in_progress = 0;
  };

  explicit FakeGateway(CheckpointStorage storage) : storage_(std::move(storage)) {}

  void set_coordinator(CheckpointCoordinator* coordinator) { coordinator_ = coordinator; }
  void FailTriggersWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    trigger_status_ = std::move(status);
  }

  absl::Status TriggerCheckpoints(int attempt, const std::vector<std::string>& task_ids, int64_t id,
                                  int64_t timestamp_unix_ms, bool stop) override {
    int in_progress = 0;
    if (coordinator_ != nullptr) {
      for (const CheckpointRecord& record : coordinator_->History()) {
        if (record.status == CheckpointStatus::kInProgress) ++in_progress;
      }
    }
    absl::MutexLock lock(&mu_);
    for (const std::string& task_id : task_ids) {
      calls_.triggers.push_back({attempt, task_id, id, timestamp_unix_ms, stop});
      calls_.max_in_progress = std::max(calls_.max_in_progress, in_progress);
      if (!trigger_status_.ok()) {
        return absl::Status(trigger_status_.code(),
                            absl::StrCat("triggering source task ", task_id, " failed: ", trigger_status_.message()));
      }
    }
    return absl::OkStatus();
  }

  void NotifyCheckpoint(int attempt, int64_t id, bool completed, const std::string& reason) override {
    const bool valid = storage_.ReadMetadata(id).ok();
    absl::MutexLock lock(&mu_);
    calls_.notices.push_back({attempt, id, completed, reason, valid});
  }

  void FinishStop(int /*attempt*/, int64_t id, bool end_input) override {
    absl::MutexLock lock(&mu_);
    calls_.finish_stops.emplace_back(id, end_input);
    calls_.notices_before_finish.push_back(calls_.notices.size());
  }

  void FailJob(const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    calls_.fail_job.push_back(reason);
  }

  Calls calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  // Waits until `done(calls)` holds; false after `wait`.
  bool WaitFor(const std::function<bool(const Calls&)>& done, absl::Duration wait = kWait) {
    absl::MutexLock lock(&mu_);
    auto condition = [&]() {
      mu_.AssertReaderHeld();
      return done(calls_);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&condition), wait);
  }

  // The notice about checkpoint `id`, once there is one.
  std::optional<Notice> WaitForNotice(int64_t id) {
    std::optional<Notice> found;
    WaitFor([&](const Calls& calls) {
      for (const Notice& notice : calls.notices) {
        if (notice.id == id) found = notice;
      }
      return found.has_value();
    });
    return found;
  }

  // Whether every one of `sources` was asked to start checkpoint `id`.
  bool WaitForTriggers(int64_t id, const std::vector<std::string>& sources) {
    return WaitFor([&](const Calls& calls) {
      std::set<std::string> asked;
      for (const Trigger& trigger : calls.triggers) {
        if (trigger.id == id) asked.insert(trigger.task_id);
      }
      return asked.size() == sources.size();
    });
  }

  size_t NoticesAbout(int64_t id) const {
    absl::MutexLock lock(&mu_);
    return static_cast<size_t>(std::count_if(calls_.notices.begin(), calls_.notices.end(),
                                             [&](const Notice& notice) { return notice.id == id; }));
  }

 private:
  const CheckpointStorage storage_;
  CheckpointCoordinator* coordinator_ = nullptr;
  mutable absl::Mutex mu_;
  Calls calls_ ABSL_GUARDED_BY(mu_);
  absl::Status trigger_status_ ABSL_GUARDED_BY(mu_);
};

const std::vector<std::string> kSources = {"src-0", "src-1"};
const std::vector<std::string> kAllTasks = {"src-0", "src-1", "sink-0"};

class CheckpointCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = weir::testing::MakeTempDir("checkpoint-coordinator-test");
    absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(root_ + "/" + kJob);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_.emplace(*storage);
    gateway_ = std::make_unique<FakeGateway>(*storage);
  }
  void TearDown() override {
    if (coordinator_ != nullptr) coordinator_->Stop();
    coordinator_.reset();
    fs::remove_all(root_);
  }

  static CheckpointCoordinatorOptions Options() {
    CheckpointCoordinatorOptions options;
    options.mode = v1::EXACTLY_ONCE;
    options.max_parallelism = 128;
    return options;
  }

  // A started coordinator with the tasks of attempt 1 set.
  CheckpointCoordinator& StartCoordinator(CheckpointCoordinatorOptions options) {
    EXPECT_TRUE(options.Validate().ok()) << options.Validate();
    coordinator_ = std::make_unique<CheckpointCoordinator>(kJob, options, *storage_, gateway_.get());
    gateway_->set_coordinator(coordinator_.get());
    coordinator_->Start();
    coordinator_->SetTasks(1, kSources, kAllTasks);
    return *coordinator_;
  }

  // What `task` sends once it wrote its snapshot file into chk-<id>.
  v1::AcknowledgeCheckpointRequest Ack(const std::string& task, int64_t id, int attempt = 1,
                                       int64_t alignment_ms = 0, bool write_file = true) {
    const std::string file = task + ".snapshot";
    const std::string contents = absl::StrCat("state of ", task, " at checkpoint ", id);
    if (write_file) {
      std::ofstream out(storage_->CheckpointDir(id) + "/" + file, std::ios::binary);
      out << contents;
    }
    v1::AcknowledgeCheckpointRequest ack;
    ack.set_job_id(kJob);
    ack.set_attempt(attempt);
    ack.set_task_id(task);
    ack.set_checkpoint_id(id);
    ack.mutable_state()->set_file(file);
    ack.mutable_state()->set_size_bytes(static_cast<int64_t>(contents.size()));
    ack.mutable_state()->set_sha256(std::string(64, '0'));
    ack.set_alignment_ms(alignment_ms);
    return ack;
  }

  v1::DeclineCheckpointRequest Decline(const std::string& task, int64_t id, const std::string& reason,
                                       int attempt = 1) {
    v1::DeclineCheckpointRequest decline;
    decline.set_job_id(kJob);
    decline.set_attempt(attempt);
    decline.set_task_id(task);
    decline.set_checkpoint_id(id);
    decline.set_reason(reason);
    return decline;
  }

  // Triggers a checkpoint, has every task acknowledge it, and waits until
  // the tasks were told it completed.
  int64_t CompleteOne(CheckpointCoordinator& coordinator, int attempt = 1) {
    absl::StatusOr<int64_t> id = coordinator.TriggerNow();
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return -1;
    for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, *id, attempt));
    std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(*id);
    EXPECT_TRUE(notice.has_value() && notice->completed) << "checkpoint " << *id;
    return *id;
  }

  std::optional<CheckpointRecord> RecordOf(const CheckpointCoordinator& coordinator, int64_t id) {
    for (const CheckpointRecord& record : coordinator.History()) {
      if (record.id == id) return record;
    }
    return std::nullopt;
  }

  std::string root_;
  std::optional<CheckpointStorage> storage_;
  std::unique_ptr<FakeGateway> gateway_;
  // For tests that set options.clock; outlives coordinator_.
  time::SimulatedClock clock_;
  std::unique_ptr<CheckpointCoordinator> coordinator_;
};

TEST_F(CheckpointCoordinatorTest, CompletesOnlyAfterEveryAcknowledgementAndItsMetadata) {
  CheckpointCoordinatorOptions options = Options();
  options.max_concurrent = 2;
  CheckpointCoordinator& coordinator = StartCoordinator(options);

  absl::StatusOr<int64_t> id = coordinator.TriggerNow();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 1);
  ASSERT_TRUE(gateway_->WaitForTriggers(1, kSources));
  for (const FakeGateway::Trigger& trigger : gateway_->calls().triggers) {
    EXPECT_EQ(trigger.attempt, 1);
    EXPECT_GT(trigger.timestamp_unix_ms, 0);
  }
  EXPECT_TRUE(fs::is_directory(storage_->CheckpointDir(1)));

  coordinator.OnAcknowledge(Ack("src-0", 1, 1, /*alignment_ms=*/0));
  coordinator.OnAcknowledge(Ack("src-1", 1, 1, /*alignment_ms=*/7));
  // The coordinator's thread has handled everything queued before this
  // trigger when it returns: checkpoint 1 must still wait for sink-0.
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 2);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1) + "/_metadata"));
  EXPECT_EQ(gateway_->NoticesAbout(1), 0u);
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kInProgress);
  EXPECT_EQ(record->acknowledged_tasks, 2);
  EXPECT_EQ(record->expected_tasks, 3);
  EXPECT_EQ(coordinator.completed_count(), 0);

  coordinator.OnAcknowledge(Ack("sink-0", 1, 1, /*alignment_ms=*/31));
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_TRUE(notice->completed);
  EXPECT_EQ(notice->attempt, 1);
  EXPECT_TRUE(notice->metadata_valid) << "the tasks were told before _metadata was written";

  absl::StatusOr<v1::CheckpointMetadata> metadata = storage_->ReadMetadata(1);
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->job_id(), kJob);
  EXPECT_EQ(metadata->checkpoint_id(), 1);
  EXPECT_EQ(metadata->mode(), v1::EXACTLY_ONCE);
  EXPECT_EQ(metadata->max_parallelism(), 128);
  EXPECT_EQ(metadata->trigger_time_unix_ms(), gateway_->calls().triggers[0].timestamp_unix_ms);
  EXPECT_GE(metadata->completion_time_unix_ms(), metadata->trigger_time_unix_ms());
  ASSERT_EQ(metadata->tasks_size(), 3);
  EXPECT_EQ(metadata->tasks(0).file(), "src-0.snapshot");
  EXPECT_EQ(metadata->tasks(2).file(), "sink-0.snapshot");
  EXPECT_TRUE(storage_->VerifyTaskFiles(*metadata).ok());

  EXPECT_EQ(coordinator.completed_count(), 1);
  EXPECT_EQ(coordinator.latest_completed_id(), std::optional<int64_t>(1));
  record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kCompleted);
  EXPECT_EQ(record->acknowledged_tasks, 3);
  EXPECT_EQ(record->longest_alignment_ms, 31);
  int64_t bytes = 0;
  for (const v1::TaskStateHandle& handle : metadata->tasks()) bytes += handle.size_bytes();
  EXPECT_EQ(record->size_bytes, bytes);
}

// A TaskManager's batch of acknowledgements (AcknowledgeCheckpoints) is
// taken in under one lock with the same rules as single ones: stale ones
// (another attempt, a task it does not wait for, a repeat) are ignored and
// the others count.
TEST_F(CheckpointCoordinatorTest, ABatchOfAcknowledgementsCountsLikeSingleOnes) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  const v1::AcknowledgeCheckpointRequest src0 = Ack("src-0", 1, 1, /*alignment_ms=*/5);
  const v1::AcknowledgeCheckpointRequest stale = Ack("src-1", 1, /*attempt=*/0);
  const v1::AcknowledgeCheckpointRequest unknown = Ack("not-a-task", 1);
  const v1::AcknowledgeCheckpointRequest src1 = Ack("src-1", 1, 1, /*alignment_ms=*/9);
  coordinator.OnAcknowledgeBatch({&src0, &stale, &unknown, &src0, &src1});
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kInProgress);
  EXPECT_EQ(record->acknowledged_tasks, 2);
  EXPECT_EQ(record->longest_alignment_ms, 9);
  EXPECT_EQ(gateway_->NoticesAbout(1), 0u);

  const v1::AcknowledgeCheckpointRequest sink0 = Ack("sink-0", 1);
  coordinator.OnAcknowledgeBatch({&sink0});
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_TRUE(notice->completed);
  record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->acknowledged_tasks, 3);
  EXPECT_GT(record->coordinator_cpu, absl::ZeroDuration());
}

TEST_F(CheckpointCoordinatorTest, DeclineAbortsAndNotifies) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnAcknowledge(Ack("src-0", 1));
  coordinator.OnDecline(Decline("src-1", 1, "disk full"));

  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  EXPECT_EQ(notice->reason, "task src-1 declined: disk full");
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kFailed);
  EXPECT_EQ(record->failure_reason, "task src-1 declined: disk full");
  EXPECT_EQ(coordinator.failed_count(), 1);

  // Late acknowledgements of the aborted checkpoint change nothing.
  coordinator.OnAcknowledge(Ack("src-1", 1, 1, 0, /*write_file=*/false));
  coordinator.OnAcknowledge(Ack("sink-0", 1, 1, 0, /*write_file=*/false));
  EXPECT_EQ(CompleteOne(coordinator), 2);
  EXPECT_EQ(gateway_->NoticesAbout(1), 1u);
  EXPECT_FALSE(storage_->ReadMetadata(1).ok());
  EXPECT_TRUE(gateway_->calls().fail_job.empty());
}

TEST_F(CheckpointCoordinatorTest, UnacknowledgedCheckpointExpiresNamingTheMissingTask) {
  CheckpointCoordinatorOptions options = Options();
  options.timeout = absl::Milliseconds(300);
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnAcknowledge(Ack("src-0", 1));
  coordinator.OnAcknowledge(Ack("src-1", 1));

  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  EXPECT_EQ(notice->reason, "expired after 300 ms; no acknowledgement from: sink-0");
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kFailed);
  EXPECT_GE(record->duration, absl::Milliseconds(300));

  coordinator.OnAcknowledge(Ack("sink-0", 1, 1, 0, /*write_file=*/false));  // too late
  EXPECT_EQ(CompleteOne(coordinator), 2);
  EXPECT_TRUE(storage_->ReadMetadata(2).ok());
  EXPECT_EQ(coordinator.completed_count(), 1);
  EXPECT_EQ(coordinator.failed_count(), 1);
}

// checkpoint.timeout goes by the coordinator's clock: a checkpoint that
// misses an acknowledgement expires when the clock reaches its timeout, and
// not a moment before, however long that takes in real time.
TEST_F(CheckpointCoordinatorTest, ACheckpointExpiresWhenTheClockReachesItsTimeout) {
  CheckpointCoordinatorOptions options = Options();
  options.timeout = absl::Minutes(10);
  options.clock = &clock_;
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  const absl::Time triggered_at = clock_.Now();
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnAcknowledge(Ack("src-0", 1));
  coordinator.OnAcknowledge(Ack("src-1", 1));
  ASSERT_TRUE(clock_.WaitUntilParked(1, kWait));

  clock_.Advance(absl::Minutes(10) - absl::Milliseconds(1));
  // The coordinator's thread woke, found the checkpoint not yet due, and
  // waits again; nothing was told about checkpoint 1.
  ASSERT_TRUE(clock_.WaitUntilParked(1, kWait));
  EXPECT_EQ(gateway_->NoticesAbout(1), 0u);
  ASSERT_TRUE(RecordOf(coordinator, 1).has_value());
  EXPECT_EQ(RecordOf(coordinator, 1)->status, CheckpointStatus::kInProgress);

  clock_.Advance(absl::Milliseconds(1));
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  EXPECT_EQ(notice->reason, "expired after 600 s; no acknowledgement from: sink-0");
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kFailed);
  EXPECT_EQ(record->trigger_time, triggered_at);
  EXPECT_EQ(record->duration, absl::Minutes(10));
  EXPECT_EQ(coordinator.failed_count(), 1);
}

// execution.checkpointing.interval goes by the coordinator's clock: the
// first periodic checkpoint is triggered an interval after the tasks were
// set, on the clock, and the next an interval after that.
TEST_F(CheckpointCoordinatorTest, PeriodicTriggersFollowTheClock) {
  CheckpointCoordinatorOptions options = Options();
  options.interval = absl::Minutes(1);
  options.clock = &clock_;
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_TRUE(clock_.WaitUntilParked(1, kWait));
  clock_.Advance(absl::Seconds(59));
  ASSERT_TRUE(clock_.WaitUntilParked(1, kWait));
  EXPECT_THAT(gateway_->calls().triggers, IsEmpty());

  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(gateway_->WaitForTriggers(1, kSources));
  for (const FakeGateway::Trigger& trigger : gateway_->calls().triggers) {
    EXPECT_EQ(trigger.timestamp_unix_ms, absl::ToUnixMillis(clock_.Now()));
  }
  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 1));
  ASSERT_TRUE(gateway_->WaitForNotice(1).has_value());
  ASSERT_TRUE(clock_.WaitUntilParked(1, kWait));
  EXPECT_EQ(gateway_->calls().triggers.size(), kSources.size());

  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(gateway_->WaitForTriggers(2, kSources));
  EXPECT_EQ(coordinator.latest_completed_id().value_or(0), 1);
}

TEST_F(CheckpointCoordinatorTest, IdsKeepGrowingAcrossAttemptsAndCoordinators) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  EXPECT_EQ(CompleteOne(coordinator), 1);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 2);

  // A restart: the pending checkpoint is aborted without telling the tasks.
  coordinator.SetTasks(2, kSources, kAllTasks);
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 2);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kFailed);
  EXPECT_EQ(record->failure_reason, "job restarting");
  coordinator.SetNextCheckpointId(2);  // restored 1: lower than the next id, ignored
  absl::StatusOr<int64_t> id = coordinator.TriggerNow();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 3);
  EXPECT_EQ(gateway_->NoticesAbout(2), 0u);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(2)));
  for (const FakeGateway::Trigger& trigger : gateway_->calls().triggers) {
    EXPECT_EQ(trigger.attempt, trigger.id == 3 ? 2 : 1);
  }
  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 3, /*attempt=*/2));
  ASSERT_TRUE(gateway_->WaitForNotice(3).has_value());

  coordinator.SetNextCheckpointId(10);
  EXPECT_EQ(CompleteOne(coordinator, /*attempt=*/2), 10);
  coordinator.Stop();

  // A new coordinator on the same directory (a restarted JobManager): its
  // history starts with the complete checkpoint it finds there.
  CheckpointCoordinator next(kJob, Options(), *storage_, gateway_.get());
  std::vector<CheckpointRecord> history = next.History();
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].id, 10);
  EXPECT_EQ(history[0].status, CheckpointStatus::kCompleted);
  EXPECT_GT(history[0].size_bytes, 0);
  next.Start();
  next.SetTasks(1, kSources, kAllTasks);
  EXPECT_EQ(next.TriggerNow().value_or(-1), 11);
  next.Stop();
}

TEST_F(CheckpointCoordinatorTest, RetentionKeepsTheNewestAndDropsOlderIncompleteOnes) {
  // Left behind by an earlier run: an incomplete checkpoint.
  ASSERT_TRUE(storage_->CreateCheckpointDir(1).ok());
  CheckpointCoordinatorOptions options = Options();
  options.num_retained = 2;
  CheckpointCoordinator& coordinator = StartCoordinator(options);

  EXPECT_EQ(CompleteOne(coordinator), 2);
  EXPECT_EQ(CompleteOne(coordinator), 3);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
  EXPECT_THAT(storage_->ListCheckpointIds(), ElementsAre(2, 3));
  EXPECT_EQ(CompleteOne(coordinator), 4);
  coordinator.Stop();  // joins the thread, so the last retention pass is done
  EXPECT_THAT(storage_->ListCheckpointIds(), ElementsAre(3, 4));
  EXPECT_TRUE(storage_->ReadMetadata(3).ok());
  EXPECT_TRUE(storage_->ReadMetadata(4).ok());
}

TEST_F(CheckpointCoordinatorTest, StaleMessagesAreIgnored) {
  CheckpointCoordinatorOptions options = Options();
  options.max_concurrent = 2;
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);

  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 1, /*attempt=*/0));
  coordinator.OnDecline(Decline("src-0", 1, "from the previous attempt", /*attempt=*/0));
  coordinator.OnDecline(Decline("src-0", 99, "unknown checkpoint"));
  coordinator.OnAcknowledge(Ack("stranger", 1));
  v1::AcknowledgeCheckpointRequest other_job = Ack("src-0", 1);
  other_job.set_job_id("job-2");
  coordinator.OnAcknowledge(other_job);
  coordinator.OnTaskFinished(/*attempt=*/0, "src-0");

  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 2);  // handled everything before
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kInProgress);
  EXPECT_EQ(record->acknowledged_tasks, 0);
  EXPECT_EQ(gateway_->NoticesAbout(1), 0u);

  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 1));
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_TRUE(notice->completed);
  // A second acknowledgement of a completed checkpoint is ignored too.
  coordinator.OnAcknowledge(Ack("src-0", 1, 1, 0, /*write_file=*/false));
  EXPECT_EQ(coordinator.completed_count(), 1);
}

TEST_F(CheckpointCoordinatorTest, ToleranceZeroFailsTheJobOnTheFirstFailure) {
  CheckpointCoordinatorOptions options = Options();
  options.tolerable_failed = 0;
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnDecline(Decline("sink-0", 1, "transaction fenced"));
  ASSERT_TRUE(gateway_->WaitFor([](const FakeGateway::Calls& calls) { return !calls.fail_job.empty(); }));
  const std::vector<std::string> fail_job = gateway_->calls().fail_job;
  ASSERT_EQ(fail_job.size(), 1u);
  EXPECT_THAT(fail_job[0], HasSubstr("execution.checkpointing.tolerable-failed-checkpoints (0)"));
  EXPECT_THAT(fail_job[0], HasSubstr("checkpoint 1: task sink-0 declined: transaction fenced"));
}

TEST_F(CheckpointCoordinatorTest, OnlyConsecutiveFailuresCount) {
  CheckpointCoordinatorOptions options = Options();
  options.tolerable_failed = 1;
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnDecline(Decline("src-0", 1, "first"));
  ASSERT_TRUE(gateway_->WaitForNotice(1).has_value());
  EXPECT_EQ(CompleteOne(coordinator), 2);  // resets the count
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 3);
  coordinator.OnDecline(Decline("src-0", 3, "second"));
  ASSERT_TRUE(gateway_->WaitForNotice(3).has_value());
  // A trigger waits for the abort of 3 to be handled in full.
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 4);
  EXPECT_THAT(gateway_->calls().fail_job, IsEmpty());
  coordinator.OnDecline(Decline("src-1", 4, "third"));
  ASSERT_TRUE(gateway_->WaitFor([](const FakeGateway::Calls& calls) { return calls.fail_job.size() == 1; }));
  EXPECT_THAT(gateway_->calls().fail_job[0], HasSubstr("2 consecutive checkpoints failed"));
}

TEST_F(CheckpointCoordinatorTest, TriggerNowRespectsMaxConcurrent) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  absl::StatusOr<int64_t> second = coordinator.TriggerNow();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("max-concurrent-checkpoints"));
  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 1));
  ASSERT_TRUE(gateway_->WaitForNotice(1).has_value());
  EXPECT_EQ(coordinator.TriggerNow().value_or(-1), 2);
}

TEST_F(CheckpointCoordinatorTest, PeriodicTriggersNeverExceedMaxConcurrent) {
  CheckpointCoordinatorOptions options = Options();
  options.interval = absl::Milliseconds(1);
  options.timeout = absl::Milliseconds(150);
  options.max_concurrent = 2;
  StartCoordinator(options);
  // Nobody acknowledges: each checkpoint lives until it expires.
  ASSERT_TRUE(gateway_->WaitFor([](const FakeGateway::Calls& calls) {
    return !calls.triggers.empty() && calls.triggers.back().id >= 6;
  }));
  const FakeGateway::Calls calls = gateway_->calls();
  EXPECT_EQ(calls.max_in_progress, 2);
  // Checkpoint n+2 is triggered only after checkpoint n ended.
  for (const FakeGateway::Trigger& trigger : calls.triggers) {
    if (trigger.id < 3) continue;
    bool older_ended = false;
    for (const FakeGateway::Notice& notice : calls.notices) older_ended |= notice.id == trigger.id - 2;
    EXPECT_TRUE(older_ended) << "checkpoint " << trigger.id;
  }
}

TEST_F(CheckpointCoordinatorTest, PeriodicCheckpointsComplete) {
  CheckpointCoordinatorOptions options = Options();
  options.interval = absl::Milliseconds(20);
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  for (int64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(gateway_->WaitForTriggers(id, kSources)) << "checkpoint " << id;
    for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, id));
    std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(id);
    ASSERT_TRUE(notice.has_value());
    EXPECT_TRUE(notice->completed);
  }
  EXPECT_EQ(coordinator.latest_completed_id().value_or(0), 3);
}

TEST_F(CheckpointCoordinatorTest, NothingIsTriggeredWithoutTasksOrWhileSuspended) {
  CheckpointCoordinator coordinator(kJob, Options(), *storage_, gateway_.get());
  EXPECT_EQ(coordinator.TriggerNow().status().code(), absl::StatusCode::kFailedPrecondition);  // not started
  coordinator.Start();
  absl::StatusOr<int64_t> id = coordinator.TriggerNow();
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(), HasSubstr("no tasks"));

  coordinator.SetTasks(1, kSources, kAllTasks);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.Suspend();
  id = coordinator.TriggerNow();
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(), HasSubstr("suspended"));
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kFailed);

  coordinator.Resume();
  EXPECT_EQ(coordinator.TriggerNow().value_or(-1), 2);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
  EXPECT_EQ(gateway_->NoticesAbout(1), 0u);
  coordinator.Stop();
}

TEST_F(CheckpointCoordinatorTest, TriggerFailureAborts) {
  gateway_->FailTriggersWith(absl::UnavailableError("TaskManager tm-2 unreachable"));
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  EXPECT_EQ(notice->reason, "triggering source task src-0 failed: TaskManager tm-2 unreachable");
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
}

// Checkpoints go on after a task finished (bounded sources ending apart): a
// pending checkpoint still waiting for it completes with it recorded as
// finished, later ones trigger only the sources still running and record it
// the same way, and only once every source finished is nothing triggered.
TEST_F(CheckpointCoordinatorTest, CheckpointsGoOnAfterATaskFinishedAndRecordItAsFinished) {
  CheckpointCoordinatorOptions options = Options();
  options.tolerable_failed = 0;
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnAcknowledge(Ack("src-0", 1));
  coordinator.OnAcknowledge(Ack("sink-0", 1));
  v1::TaskStateHandle identity;
  identity.add_vertex_ids(0);
  identity.add_operator_uids("source");
  identity.set_subtask_index(1);
  identity.set_parallelism(2);
  identity.set_file("ignored.snapshot");  // only the identity is taken
  coordinator.OnTaskFinished(1, "src-1", identity);
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_TRUE(notice->completed) << notice->reason;
  auto finished_in = [&](int64_t id) -> std::optional<v1::TaskStateHandle> {
    absl::StatusOr<v1::CheckpointMetadata> metadata = storage_->ReadMetadata(id);
    EXPECT_TRUE(metadata.ok()) << metadata.status();
    if (!metadata.ok()) return std::nullopt;
    EXPECT_EQ(metadata->tasks_size(), 3);
    for (const v1::TaskStateHandle& handle : metadata->tasks()) {
      if (handle.finished()) return handle;
    }
    return std::nullopt;
  };
  std::optional<v1::TaskStateHandle> marker = finished_in(1);
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->file(), "");
  EXPECT_THAT(marker->vertex_ids(), ElementsAre(0));
  EXPECT_THAT(marker->operator_uids(), ElementsAre("source"));
  EXPECT_EQ(marker->subtask_index(), 1);
  EXPECT_EQ(marker->parallelism(), 2);
  EXPECT_TRUE(storage_->VerifyTaskFiles(*storage_->ReadMetadata(1)).ok());

  // The next one asks only src-0 and waits only for src-0 and sink-0.
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 2);
  ASSERT_TRUE(gateway_->WaitForTriggers(2, {"src-0"}));
  coordinator.OnAcknowledge(Ack("src-0", 2));
  coordinator.OnAcknowledge(Ack("sink-0", 2));
  notice = gateway_->WaitForNotice(2);
  ASSERT_TRUE(notice.has_value());
  EXPECT_TRUE(notice->completed) << notice->reason;
  for (const FakeGateway::Trigger& trigger : gateway_->calls().triggers) {
    if (trigger.id == 2) {
      EXPECT_EQ(trigger.task_id, "src-0");
    }
  }
  ASSERT_TRUE(finished_in(2).has_value());

  // Every source finished: nothing more to trigger.
  coordinator.OnTaskFinished(1, "src-0", identity);
  absl::StatusOr<int64_t> id = coordinator.TriggerNow();
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(id.status().message(), HasSubstr("every source task"));
  coordinator.Stop();
  EXPECT_THAT(gateway_->calls().fail_job, IsEmpty());
}

// Once every source finished nothing is triggered, and the tasks still
// running wait only for the last completion: a lost notice would leave them
// waiting forever, so it is sent again until every task finished.
TEST_F(CheckpointCoordinatorTest, TheLastCompletionIsToldAgainUntilEveryTaskFinished) {
  CheckpointCoordinatorOptions options = Options();
  options.final_notice_repeat = absl::Milliseconds(20);
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  for (const char* task : {"src-0", "src-1", "sink-0"}) coordinator.OnAcknowledge(Ack(task, 1));
  ASSERT_TRUE(gateway_->WaitForNotice(1).has_value());
  auto notices_of_1 = [](const FakeGateway::Calls& calls) {
    return std::count_if(calls.notices.begin(), calls.notices.end(),
                         [](const FakeGateway::Notice& n) { return n.id == 1 && n.completed; });
  };
  // A source still running: no repeat (its next checkpoint will come).
  v1::TaskStateHandle identity;
  coordinator.OnTaskFinished(1, "src-0", identity);
  EXPECT_FALSE(gateway_->WaitFor([&](const FakeGateway::Calls& calls) { return notices_of_1(calls) > 1; },
                                 absl::Milliseconds(400)));
  coordinator.OnTaskFinished(1, "src-1", identity);
  EXPECT_TRUE(gateway_->WaitFor([&](const FakeGateway::Calls& calls) { return notices_of_1(calls) >= 3; }));
  coordinator.OnTaskFinished(1, "sink-0", identity);
  const int64_t told = notices_of_1(gateway_->calls());
  EXPECT_FALSE(gateway_->WaitFor([&](const FakeGateway::Calls& calls) { return notices_of_1(calls) > told + 1; },
                                 absl::Milliseconds(400)))
      << "still repeating after every task finished";
  coordinator.Stop();
}

// A source that ended between the plan and the trigger (the gateway says
// kNotFound) aborts that checkpoint without counting it as a failure.
TEST_F(CheckpointCoordinatorTest, ATriggerThatFindsATaskEndedIsNoFailure) {
  CheckpointCoordinatorOptions options = Options();
  options.tolerable_failed = 0;
  gateway_->FailTriggersWith(absl::NotFoundError("task src-0 has ended"));
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  coordinator.Stop();
  EXPECT_THAT(gateway_->calls().fail_job, IsEmpty());
}

TEST_F(CheckpointCoordinatorTest, MissingTaskFileAbortsInsteadOfCompleting) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.OnAcknowledge(Ack("src-0", 1));
  coordinator.OnAcknowledge(Ack("src-1", 1));
  coordinator.OnAcknowledge(Ack("sink-0", 1, 1, 0, /*write_file=*/false));
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  EXPECT_THAT(notice->reason, HasSubstr("sink-0.snapshot is missing"));
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
  EXPECT_EQ(coordinator.completed_count(), 0);
}

TEST_F(CheckpointCoordinatorTest, UnusableStateHandleAborts) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  v1::AcknowledgeCheckpointRequest ack = Ack("src-0", 1);
  ack.mutable_state()->set_file("../../escape");
  coordinator.OnAcknowledge(ack);
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(1);
  ASSERT_TRUE(notice.has_value());
  EXPECT_FALSE(notice->completed);
  EXPECT_THAT(notice->reason, HasSubstr("task src-0 acknowledged with an unusable state handle"));
}

TEST_F(CheckpointCoordinatorTest, StopAbortsWithoutNotifying) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow().value_or(-1), 1);
  coordinator.Stop();
  EXPECT_EQ(gateway_->NoticesAbout(1), 0u);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(1)));
  std::optional<CheckpointRecord> record = RecordOf(coordinator, 1);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kFailed);
  EXPECT_EQ(coordinator.TriggerNow().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointCoordinatorTest, HistoryKeepsTheLastFiftyNewestFirst) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  for (int64_t id = 1; id <= 55; ++id) {
    ASSERT_EQ(coordinator.TriggerNow().value_or(-1), id);
    coordinator.OnDecline(Decline("src-0", id, "no"));
    ASSERT_TRUE(gateway_->WaitForNotice(id).has_value());
  }
  const std::vector<CheckpointRecord> history = coordinator.History();
  ASSERT_EQ(history.size(), CheckpointCoordinator::kHistorySize);
  EXPECT_EQ(history.front().id, 55);
  EXPECT_EQ(history.back().id, 6);
  EXPECT_EQ(coordinator.failed_count(), 55);
}

TEST(CheckpointCoordinatorOptionsTest, ValidateNamesTheKey) {
  CheckpointCoordinatorOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.max_concurrent = 0;
  EXPECT_THAT(options.Validate().message(), HasSubstr("execution.checkpointing.max-concurrent-checkpoints"));
  options = {};
  options.interval = absl::ZeroDuration();
  EXPECT_THAT(options.Validate().message(), HasSubstr("execution.checkpointing.interval"));
  options = {};
  options.num_retained = 0;
  EXPECT_THAT(options.Validate().message(), HasSubstr("state.checkpoints.num-retained"));
  options = {};
  options.tolerable_failed = -2;
  EXPECT_THAT(options.Validate().message(), HasSubstr("tolerable-failed-checkpoints"));
}

TEST_F(CheckpointCoordinatorTest, StopCheckpointHoldsOtherTriggersAndEndsInputAfterTheNotice) {
  CheckpointCoordinatorOptions options = Options();
  options.interval = absl::Milliseconds(20);
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  coordinator.SetNextCheckpointId(10);
  absl::StatusOr<int64_t> stop = coordinator.TriggerNow(/*stop=*/true);
  if (absl::IsResourceExhausted(stop.status())) {  // a periodic one got there first
    ASSERT_TRUE(gateway_->WaitForTriggers(10, kSources));
    for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 10));
    ASSERT_TRUE(gateway_->WaitForNotice(10).has_value());
    stop = coordinator.TriggerNow(/*stop=*/true);
  }
  ASSERT_TRUE(stop.ok()) << stop.status();
  ASSERT_TRUE(gateway_->WaitForTriggers(*stop, kSources));
  for (const FakeGateway::Trigger& trigger : gateway_->calls().triggers) {
    EXPECT_EQ(trigger.stop, trigger.id == *stop) << "checkpoint " << trigger.id;
  }
  // Nothing else is triggered while the stop is pending, periodic or not.
  absl::StatusOr<int64_t> other = coordinator.TriggerNow();
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("stopping with a savepoint"));
  absl::SleepFor(absl::Milliseconds(100));
  for (const FakeGateway::Trigger& trigger : gateway_->calls().triggers) EXPECT_LE(trigger.id, *stop);

  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, *stop));
  std::optional<FakeGateway::Notice> notice = gateway_->WaitForNotice(*stop);
  ASSERT_TRUE(notice.has_value());
  EXPECT_TRUE(notice->completed);
  // Still held after completion, until the JobMaster finishes the stop.
  EXPECT_FALSE(coordinator.TriggerNow().ok());
  coordinator.FinishStop(*stop + 7, /*end_input=*/true);  // not the stop checkpoint: ignored
  coordinator.FinishStop(*stop, /*end_input=*/true);
  ASSERT_TRUE(gateway_->WaitFor([](const FakeGateway::Calls& calls) { return !calls.finish_stops.empty(); }));
  const FakeGateway::Calls calls = gateway_->calls();
  ASSERT_EQ(calls.finish_stops.size(), 1u);
  EXPECT_EQ(calls.finish_stops[0], std::make_pair(*stop, true));
  // The tasks heard of the completion before the sources were told to end.
  size_t notices_of_stop = 0;
  for (size_t i = 0; i < calls.notices_before_finish[0]; ++i) notices_of_stop += calls.notices[i].id == *stop;
  EXPECT_EQ(notices_of_stop, 1u);
}

TEST_F(CheckpointCoordinatorTest, AbortedOrGivenUpStopLetsCheckpointsGoOn) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  ASSERT_EQ(coordinator.TriggerNow(/*stop=*/true).value_or(-1), 1);
  coordinator.OnDecline(Decline("sink-0", 1, "disk full"));
  std::optional<FakeGateway::Notice> aborted = gateway_->WaitForNotice(1);
  ASSERT_TRUE(aborted.has_value());
  EXPECT_FALSE(aborted->completed);
  EXPECT_EQ(CompleteOne(coordinator), 2);  // triggering works again

  ASSERT_EQ(coordinator.TriggerNow(/*stop=*/true).value_or(-1), 3);
  for (const std::string& task : kAllTasks) coordinator.OnAcknowledge(Ack(task, 3));
  ASSERT_TRUE(gateway_->WaitForNotice(3).has_value());
  coordinator.FinishStop(3, /*end_input=*/false);  // e.g. the savepoint copy failed
  ASSERT_TRUE(gateway_->WaitFor([](const FakeGateway::Calls& calls) { return !calls.finish_stops.empty(); }));
  EXPECT_EQ(gateway_->calls().finish_stops[0], std::make_pair(int64_t{3}, false));
  EXPECT_EQ(CompleteOne(coordinator), 4);
}

// Revoke (leadership lost): the acknowledgement that would complete a
// pending checkpoint is ignored; nothing more is triggered, completed,
// notified or written, and the pending checkpoint keeps its directory
// through Stop (the next leader's coordinator decides). AwaitEnd does not
// wait for a checkpoint that will never end.
TEST_F(CheckpointCoordinatorTest, ARevokedCoordinatorCompletesNotifiesTriggersAndDeletesNothing) {
  CheckpointCoordinator& coordinator = StartCoordinator(Options());
  const int64_t first = CompleteOne(coordinator);
  absl::StatusOr<int64_t> id = coordinator.TriggerNow();
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(gateway_->WaitForTriggers(*id, kSources));
  coordinator.OnAcknowledge(Ack("src-0", *id));
  coordinator.OnAcknowledge(Ack("src-1", *id));

  coordinator.Revoke();
  coordinator.OnAcknowledge(Ack("sink-0", *id));
  ASSERT_TRUE(RecordOf(coordinator, *id).has_value());
  EXPECT_EQ(RecordOf(coordinator, *id)->acknowledged_tasks, 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(coordinator.TriggerNow().status()));
  const std::optional<CheckpointRecord> record = coordinator.AwaitEnd(*id, absl::InfiniteFuture());
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->status, CheckpointStatus::kInProgress);
  // Joins the thread: whatever it was to do is done.
  coordinator.Stop();

  const FakeGateway::Calls calls = gateway_->calls();
  ASSERT_EQ(calls.notices.size(), 1u);
  EXPECT_EQ(calls.notices[0].id, first);
  EXPECT_EQ(calls.triggers.size(), 2 * kSources.size());
  EXPECT_THAT(calls.fail_job, IsEmpty());
  EXPECT_EQ(coordinator.completed_count(), 1);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(*id) + "/_metadata"));
  EXPECT_TRUE(fs::exists(storage_->CheckpointDir(*id)));
}

// A JobManager whose lease is not fresh (resumed from a freeze, before its
// revocation) sends no trigger and makes no directory; once the lease is
// renewed, checkpoints go on.
TEST_F(CheckpointCoordinatorTest, NothingIsTriggeredWhileTheLeadershipIsNotConfirmed) {
  auto leading = std::make_shared<std::atomic<bool>>(true);
  CheckpointCoordinatorOptions options = Options();
  options.leading = [leading] { return leading->load(); };
  CheckpointCoordinator& coordinator = StartCoordinator(options);
  const int64_t first = CompleteOne(coordinator);

  leading->store(false);
  absl::StatusOr<int64_t> held = coordinator.TriggerNow();
  EXPECT_TRUE(absl::IsCancelled(held.status())) << held.status();
  EXPECT_THAT(std::string(held.status().message()), HasSubstr("not confirmed"));
  ASSERT_TRUE(RecordOf(coordinator, first + 1).has_value());
  EXPECT_EQ(RecordOf(coordinator, first + 1)->status, CheckpointStatus::kFailed);
  EXPECT_FALSE(fs::exists(storage_->CheckpointDir(first + 1)));

  leading->store(true);
  EXPECT_EQ(CompleteOne(coordinator), first + 2);
  coordinator.Stop();
  EXPECT_EQ(gateway_->calls().triggers.size(), 2 * kSources.size()) << "the held trigger was sent";
}

}  // namespace
}  // namespace weir::jobmanager::checkpoint
