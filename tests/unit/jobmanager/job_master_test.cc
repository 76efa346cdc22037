// A JobMaster driven in-process, in a MiniCluster: its calls to TaskManagers
// go to an InMemoryTaskManagerGateway, and the test reports task states as
// the TaskManagers would. Most tests run it on real time with restart delays of
// a millisecond; those about what time decides run it on a SimulatedClock and
// advance that. The tests wait for states and calls with a generous deadline
// and assert nothing about how long they took.
#include "jobmanager/job_master.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/time/simulated_clock.h"
#include "tests/minicluster/minicluster.h"
#include "tests/testing/in_memory_taskmanager_gateway.h"

namespace weir::jobmanager {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing::InMemoryTaskManagerGateway;
using testing::MiniCluster;

constexpr absl::Duration kPatience = MiniCluster::kPatience;
constexpr const char* kJob = MiniCluster::kJobId;
const std::string kAddress1 = MiniCluster::TaskManagerAddress(1);
const std::string kAddress2 = MiniCluster::TaskManagerAddress(2);

// A source of parallelism 2, hash-partitioned into a sink of parallelism 2
// (two chains, 0: source and 1: sink, of two subtasks each), on two
// TaskManagers of one slot each: subtask s of each chain runs on tm-<s+1>.
class JobMasterTest : public ::testing::Test {
 protected:
  // Creates and starts the JobMaster with `settings` (restart strategy none
  // unless the test sets one).
  void StartJob(JobSettings settings = {}) {
    const absl::Status started = cluster_.StartJob(MiniCluster::SourceToSinkJob(2), std::move(settings));
    ASSERT_TRUE(started.ok()) << started;
  }

  static JobSettings Restarting(int attempts) {
    JobSettings settings;
    settings.restart.type = RestartStrategyOptions::Type::kFixedDelay;
    settings.restart.fixed_attempts = attempts;
    settings.restart.fixed_delay = absl::Milliseconds(1);
    return settings;
  }

  static std::string TaskId(int attempt, int chain, int subtask) {
    return MiniCluster::TaskId(attempt, chain, subtask);
  }

  void Report(int attempt, int chain, int subtask, v1::TaskState state, const std::string& error = "") {
    cluster_.Report(attempt, chain, subtask, state, error);
  }
  void ReportAll(int attempt, v1::TaskState state) { cluster_.ReportAll(attempt, state); }
  bool AwaitState(v1::JobState state) { return cluster_.AwaitState(state); }
  std::map<std::string, std::set<std::string>> DeployedTasks(size_t from, size_t to) {
    return cluster_.DeployedTasks(from, to);
  }
  std::vector<v1::JobState> Terminal() { return cluster_.terminal(); }
  std::vector<v1::JobState> AwaitTerminal() { return cluster_.AwaitTerminal(); }

  // Real time, unless a test sets settings.clock = &clock_.
  MiniCluster cluster_{{.taskmanagers = 2, .slots_per_taskmanager = 1, .simulated_time = false}};
  time::SimulatedClock& clock_ = cluster_.clock();
  InMemoryTaskManagerGateway* const gateway_ = &cluster_.gateway();
};

TEST_F(JobMasterTest, DeploysTheFirstAttemptsTasksToTheirTaskManagers) {
  StartJob();
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  // One call per TaskManager, each with subtask s of both chains.
  EXPECT_EQ(gateway_->deploys().size(), 2u);
  EXPECT_EQ(DeployedTasks(0, 2),
            (std::map<std::string, std::set<std::string>>{{kAddress1, {TaskId(1, 0, 0), TaskId(1, 1, 0)}},
                                                          {kAddress2, {TaskId(1, 0, 1), TaskId(1, 1, 1)}}}));
  for (const DeployTasksCall& call : gateway_->deploys()) {
    for (const v1::TaskDeploymentDescriptor& tdd : call.request.tasks()) {
      EXPECT_EQ(tdd.job_id(), kJob);
      EXPECT_EQ(tdd.attempt(), 1);
      EXPECT_EQ(tdd.artifact_sha256(), "0123456789abcdef");
      EXPECT_EQ(tdd.parallelism(), 2);
      if (tdd.vertex_ids(0) == 1) {
        // The sink reads both source subtasks (hash), one of them local.
        ASSERT_EQ(tdd.inputs_size(), 2);
        std::set<std::string> producers;
        for (const v1::InputChannelSpec& in : tdd.inputs()) producers.insert(in.producer_address());
        EXPECT_EQ(producers, (std::set<std::string>{kAddress1, kAddress2}));
      }
    }
  }
  EXPECT_TRUE(gateway_->cancels().empty());
}

TEST_F(JobMasterTest, RunsOnceEveryTaskReportsRunning) {
  StartJob();
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  Report(1, 0, 0, v1::TASK_RUNNING);
  Report(1, 0, 1, v1::TASK_RUNNING);
  Report(1, 1, 0, v1::TASK_RUNNING);
  EXPECT_EQ(cluster_.job().Status().state(), v1::CREATED);
  Report(1, 1, 1, v1::TASK_RUNNING);
  EXPECT_EQ(cluster_.job().Status().state(), v1::RUNNING);
  const v1::JobStatus status = cluster_.job().Status();
  for (const v1::TaskStatus& task : status.tasks()) EXPECT_EQ(task.state(), v1::TASK_RUNNING);
}

TEST_F(JobMasterTest, AFailedTaskCancelsTheAttemptAndTheNextOneIsDeployed) {
  StartJob(Restarting(3));
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  ReportAll(1, v1::TASK_RUNNING);
  ASSERT_EQ(cluster_.job().Status().state(), v1::RUNNING);

  Report(1, 1, 1, v1::TASK_FAILED, "boom");
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  std::set<std::string> canceled_at;
  for (const InMemoryTaskManagerGateway::CancelCall& cancel : gateway_->cancels()) {
    canceled_at.insert(cancel.address);
    EXPECT_EQ(cancel.request.job_id(), kJob);
    EXPECT_EQ(cancel.request.attempt(), 1);
    EXPECT_THAT(cancel.request.reason(), HasSubstr("boom"));
  }
  EXPECT_EQ(canceled_at, (std::set<std::string>{kAddress1, kAddress2}));
  // Nothing of attempt 2 before attempt 1's tasks ended.
  EXPECT_EQ(gateway_->deploys().size(), 2u);
  Report(1, 0, 0, v1::TASK_CANCELED);
  Report(1, 0, 1, v1::TASK_CANCELED);
  Report(1, 1, 0, v1::TASK_CANCELED);

  ASSERT_TRUE(gateway_->AwaitDeploys(4, kPatience));
  EXPECT_EQ(DeployedTasks(2, 4),
            (std::map<std::string, std::set<std::string>>{{kAddress1, {TaskId(2, 0, 0), TaskId(2, 1, 0)}},
                                                          {kAddress2, {TaskId(2, 0, 1), TaskId(2, 1, 1)}}}));
  EXPECT_EQ(cluster_.releases(), 1);
  EXPECT_EQ(cluster_.allocations(), 1);
  // A straggler of attempt 1 changes nothing.
  Report(1, 1, 1, v1::TASK_RUNNING);
  ReportAll(2, v1::TASK_RUNNING);
  ASSERT_TRUE(AwaitState(v1::RUNNING));
  const v1::JobStatus status = cluster_.job().Status();
  EXPECT_EQ(status.attempt(), 2);
  EXPECT_EQ(status.restarts(), 1);
  EXPECT_THAT(status.last_failure(), HasSubstr("boom"));
}

// A restart delay of ten minutes passes on the JobMaster's clock, not on real
// time: attempt 2 is deployed only once the test has advanced the clock that
// far, however long the JobMaster has waited in real time.
TEST_F(JobMasterTest, ARestartDelayEndsOnlyWhenTheClockHasPassedIt) {
  JobSettings settings = Restarting(3);
  settings.restart.fixed_delay = absl::Minutes(10);
  settings.clock = &clock_;
  StartJob(std::move(settings));
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  ReportAll(1, v1::TASK_RUNNING);
  Report(1, 1, 1, v1::TASK_FAILED, "boom");
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  Report(1, 0, 0, v1::TASK_CANCELED);
  Report(1, 0, 1, v1::TASK_CANCELED);
  Report(1, 1, 0, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitState(v1::RESTARTING));
  // The JobMaster's thread waits on the clock for a time still ahead; real
  // time has been given to it, and it deployed nothing.
  ASSERT_TRUE(clock_.WaitUntilParked(1, kPatience));
  EXPECT_EQ(gateway_->deploys().size(), 2u);

  clock_.Advance(absl::Minutes(10) - absl::Seconds(1));
  // It woke, saw a second to go, and waits again.
  ASSERT_TRUE(clock_.WaitUntilParked(1, kPatience));
  EXPECT_EQ(gateway_->deploys().size(), 2u);
  EXPECT_EQ(cluster_.job().Status().state(), v1::RESTARTING);

  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(gateway_->AwaitDeploys(4, kPatience));
  EXPECT_EQ(DeployedTasks(2, 4),
            (std::map<std::string, std::set<std::string>>{{kAddress1, {TaskId(2, 0, 0), TaskId(2, 1, 0)}},
                                                          {kAddress2, {TaskId(2, 0, 1), TaskId(2, 1, 1)}}}));
  ReportAll(2, v1::TASK_RUNNING);
  ASSERT_TRUE(AwaitState(v1::RUNNING));
  EXPECT_EQ(cluster_.job().Status().restarts(), 1);
}

// task.cancellation.timeout goes by the clock too: a task that never
// acknowledges its cancellation is declared canceled once the clock passes
// the timeout, and not before.
TEST_F(JobMasterTest, ATaskThatIgnoresItsCancellationIsDeclaredCanceledWhenTheClockPassesTheTimeout) {
  JobSettings settings;
  settings.cancel_timeout = absl::Minutes(3);
  settings.clock = &clock_;
  StartJob(std::move(settings));
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  ReportAll(1, v1::TASK_RUNNING);
  Report(1, 1, 1, v1::TASK_FAILED, "boom");
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  Report(1, 0, 0, v1::TASK_CANCELED);
  Report(1, 0, 1, v1::TASK_CANCELED);
  // Task (1, 0) never answers.
  ASSERT_TRUE(clock_.WaitUntilParked(1, kPatience));
  clock_.Advance(absl::Minutes(3));
  ASSERT_TRUE(clock_.WaitUntilParked(1, kPatience));
  EXPECT_NE(cluster_.job().Status().state(), v1::FAILED);
  EXPECT_TRUE(Terminal().empty());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(AwaitState(v1::FAILED));
  EXPECT_THAT(AwaitTerminal(), ::testing::ElementsAre(v1::FAILED));
}

TEST_F(JobMasterTest, ADeploymentTheTaskManagerRefusesFailsTheAttempt) {
  gateway_->SetDeployAnswer([](const DeployTasksCall& call) -> absl::StatusOr<v1::DeployTasksResponse> {
    if (call.address == kAddress1) return InMemoryTaskManagerGateway::AllDeployed(call);
    v1::DeployTasksResponse refused;
    refused.set_deployed(0);
    refused.set_error_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
    refused.set_error("slot 0 is taken");
    return refused;
  });
  StartJob();
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  // The tasks that were deployed end as the cancellation asks.
  Report(1, 0, 0, v1::TASK_CANCELED);
  Report(1, 1, 0, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitState(v1::FAILED));
  const v1::JobStatus status = cluster_.job().Status();
  EXPECT_THAT(status.error(), HasSubstr(absl::StrCat("at ", kAddress2, ": slot 0 is taken")));
  EXPECT_EQ(status.restarts(), 0);
  EXPECT_EQ(gateway_->deploys().size(), 2u);
  EXPECT_EQ(AwaitTerminal(), std::vector<v1::JobState>{v1::FAILED});
}

TEST_F(JobMasterTest, ADeploymentWithoutAnswerFailsTheAttemptAndTheRestartDeploysAgain) {
  gateway_->SetDeployAnswer([](const DeployTasksCall& call) -> absl::StatusOr<v1::DeployTasksResponse> {
    if (call.address == kAddress2 && call.request.tasks(0).attempt() == 1) {
      return InMemoryTaskManagerGateway::NoAnswer();
    }
    return InMemoryTaskManagerGateway::AllDeployed(call);
  });
  StartJob(Restarting(1));
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  Report(1, 0, 0, v1::TASK_CANCELED);
  Report(1, 1, 0, v1::TASK_CANCELED);
  ASSERT_TRUE(gateway_->AwaitDeploys(4, kPatience));
  EXPECT_EQ(DeployedTasks(2, 4),
            (std::map<std::string, std::set<std::string>>{{kAddress1, {TaskId(2, 0, 0), TaskId(2, 1, 0)}},
                                                          {kAddress2, {TaskId(2, 0, 1), TaskId(2, 1, 1)}}}));
  ReportAll(2, v1::TASK_RUNNING);
  ASSERT_TRUE(AwaitState(v1::RUNNING));
  EXPECT_THAT(cluster_.job().Status().last_failure(),
              HasSubstr(absl::StrCat("at ", kAddress2, ": ", InMemoryTaskManagerGateway::NoAnswer().message())));
}

TEST_F(JobMasterTest, ALostTaskManagerFailsTheJobWithoutRestarts) {
  StartJob();
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  ReportAll(1, v1::TASK_RUNNING);
  cluster_.LoseTaskManager(2, LossReason::kHeartbeatTimeout);
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  Report(1, 0, 0, v1::TASK_CANCELED);
  Report(1, 1, 0, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitState(v1::FAILED));
  EXPECT_THAT(cluster_.job().Status().error(), HasSubstr("TaskManager tm-2 at 127.0.0.1:2 lost (heartbeat timeout)"));
  EXPECT_EQ(AwaitTerminal(), std::vector<v1::JobState>{v1::FAILED});
}

TEST_F(JobMasterTest, CancelCancelsTheTasksAndEndsCanceled) {
  StartJob(Restarting(3));
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  ReportAll(1, v1::TASK_RUNNING);
  ASSERT_TRUE(cluster_.job().Cancel().ok());
  EXPECT_EQ(cluster_.job().Status().state(), v1::CANCELING);
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  for (const InMemoryTaskManagerGateway::CancelCall& cancel : gateway_->cancels()) {
    EXPECT_EQ(cancel.request.attempt(), 1);
    EXPECT_EQ(cancel.request.reason(), "canceled by a client");
  }
  ReportAll(1, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitState(v1::CANCELED));
  EXPECT_EQ(AwaitTerminal(), std::vector<v1::JobState>{v1::CANCELED});
  // Canceled, not restarted, whatever the restart strategy allows.
  EXPECT_EQ(gateway_->deploys().size(), 2u);
  EXPECT_EQ(cluster_.job().Status().restarts(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(cluster_.job().Cancel()));
}

TEST_F(JobMasterTest, CheckpointTriggersReachTheSourceTasksThroughTheGateway) {
  // Into a directory of the MiniCluster's.
  JobSettings settings;
  settings.checkpoint.interval = absl::Milliseconds(10);
  settings.checkpoint.max_parallelism = 128;
  StartJob(settings);
  ASSERT_TRUE(gateway_->AwaitDeploys(2, kPatience));
  // No checkpoint before every task runs.
  Report(1, 0, 0, v1::TASK_RUNNING);
  EXPECT_TRUE(gateway_->triggers().empty());
  ReportAll(1, v1::TASK_RUNNING);
  // One call per TaskManager with its source task; the checkpoint is never
  // acknowledged here, so no second one is triggered (one at a time).
  ASSERT_TRUE(gateway_->AwaitTriggers(2, kPatience));
  std::map<std::string, std::vector<std::string>> sources;
  for (const TriggerCheckpointsCall& call : gateway_->triggers()) {
    EXPECT_EQ(call.request.job_id(), kJob);
    EXPECT_EQ(call.request.attempt(), 1);
    EXPECT_EQ(call.request.checkpoint_id(), 1);
    EXPECT_FALSE(call.request.stop());
    EXPECT_EQ(call.taskmanager.taskmanager_id, call.taskmanager.address == kAddress1 ? "tm-1" : "tm-2");
    sources[call.taskmanager.address].assign(call.request.task_ids().begin(), call.request.task_ids().end());
  }
  EXPECT_EQ(sources, (std::map<std::string, std::vector<std::string>>{{kAddress1, {TaskId(1, 0, 0)}},
                                                                      {kAddress2, {TaskId(1, 0, 1)}}}));
  ASSERT_TRUE(cluster_.job().Cancel().ok());
  ASSERT_TRUE(gateway_->AwaitCancels(2, kPatience));
  ReportAll(1, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitState(v1::CANCELED));
  EXPECT_EQ(gateway_->triggers().size(), 2u);
}

}  // namespace
}  // namespace weir::jobmanager

namespace weir::jobmanager {
namespace {

google::protobuf::Map<std::string, std::string> JobConfig(
    std::initializer_list<std::pair<const std::string, std::string>> entries) {
  google::protobuf::Map<std::string, std::string> map;
  for (const auto& [key, value] : entries) map[key] = value;
  return map;
}

// -D at submission is checked as the daemons' keys are: what Weir knows is
// honoured under its name or Flink's, a misspelling is refused naming the
// key meant, Flink's other settings pass with a notice, and the job's own
// settings pass as they are.
TEST(JobConfigKeysTest, MisspeltKeysAreRefusedNamingTheNearest) {
  std::vector<std::string> notices;
  absl::Status typo =
      CheckJobConfigKeys(JobConfig({{"execution.checkpointing.intervall", "1s"}}), &notices);
  EXPECT_TRUE(absl::IsInvalidArgument(typo)) << typo;
  EXPECT_TRUE(absl::StrContains(typo.message(), "did you mean 'execution.checkpointing.interval'")) << typo;

  absl::Status in_namespace = CheckJobConfigKeys(JobConfig({{"state.whatever", "1"}}), &notices);
  EXPECT_TRUE(absl::IsInvalidArgument(in_namespace)) << in_namespace;
  EXPECT_TRUE(absl::StrContains(in_namespace.message(), "may not start with 'state'")) << in_namespace;
  EXPECT_TRUE(notices.empty());
}

TEST(JobConfigKeysTest, FlinkOnlyKeysPassWithANoticeAndOwnKeysPassSilently) {
  std::vector<std::string> notices;
  ASSERT_TRUE(CheckJobConfigKeys(JobConfig({{"pipeline.object-reuse", "true"},
                                            {"input.topic", "clicks"},
                                            {"restart-strategy", "none"},
                                            {"execution.checkpointing.interval", "1s"}}),
                                 &notices)
                  .ok());
  EXPECT_THAT(notices, ::testing::ElementsAre(
                           "ignored: -D pipeline.object-reuse is a Flink setting Weir has no use for"));
}

TEST(JobConfigKeysTest, FlinkNamesOfJobLevelKeysAreHonoured) {
  config::Configuration cluster;
  // Checkpoints on: the default strategy would be exponential-delay.
  absl::StatusOr<JobSettings> settings = ResolveJobSettings(
      cluster,
      JobConfig({{"execution.checkpointing.interval", "1s"}, {"restart-strategy", "none"},
                 {"state.backend", "hashmap"}}),
      "job1");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->restart.type, RestartStrategyOptions::Type::kNone);
  EXPECT_EQ(settings->state_backend, "hashmap");
  // A cluster setting under a Flink name is still a cluster setting.
  absl::StatusOr<JobSettings> cluster_only =
      ResolveJobSettings(cluster, JobConfig({{"execution.checkpointing.dir", "/elsewhere"}}), "job2");
  EXPECT_TRUE(absl::IsInvalidArgument(cluster_only.status())) << cluster_only.status();
}

}  // namespace
}  // namespace weir::jobmanager
