// Failover in a MiniCluster: restart strategies, a lost TaskManager, failed
// deployments and checkpoints, each on a SimulatedClock, so that restart
// delays, slot and checkpoint timeouts of minutes pass in no real time.
//
// Every test waits for what the JobMaster's threads do with a generous
// real-time deadline and asserts nothing about how long that took. Before it
// advances the clock over something the JobMaster waits for, a test makes
// sure the JobMaster waits already (SimulatedClock::WaitUntilParked): a
// restart delay counts from the failure, fixed before the job shows the
// restart, so the test waits for the restart count first.
//
// A leadership change is here as far as the JobMaster goes (it is revoked,
// and does nothing after); a new leader recovering the job needs a whole
// JobManager with its job store and election, which the MiniCluster does
// not run yet. Nor the failure-rate restart strategy, which Weir does not
// have.
#include "tests/minicluster/minicluster.h"

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::testing {
namespace {

using jobmanager::JobSettings;
using jobmanager::LossReason;
using jobmanager::RestartStrategyOptions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr absl::Duration kPatience = MiniCluster::kPatience;
const std::string kAddress1 = MiniCluster::TaskManagerAddress(1);
const std::string kAddress2 = MiniCluster::TaskManagerAddress(2);
const std::string kAddress3 = MiniCluster::TaskManagerAddress(3);

using TasksByAddress = std::map<std::string, std::set<std::string>>;

// Where attempt `attempt` of the source-to-sink job of parallelism 2 runs:
// subtask 0 of both chains at `first`, subtask 1 at `second`.
TasksByAddress Layout(int attempt, const std::string& first, const std::string& second) {
  return {{first, {MiniCluster::TaskId(attempt, 0, 0), MiniCluster::TaskId(attempt, 1, 0)}},
          {second, {MiniCluster::TaskId(attempt, 0, 1), MiniCluster::TaskId(attempt, 1, 1)}}};
}

JobSettings FixedDelay(int attempts, absl::Duration delay) {
  JobSettings settings;
  settings.restart.type = RestartStrategyOptions::Type::kFixedDelay;
  settings.restart.fixed_attempts = attempts;
  settings.restart.fixed_delay = delay;
  return settings;
}

class MiniClusterTest : public ::testing::Test {
 protected:
  void Start(JobSettings settings) {
    const absl::Status started = cluster_->StartJob(MiniCluster::SourceToSinkJob(2), std::move(settings));
    ASSERT_TRUE(started.ok()) << started;
  }

  v1::JobStatus Status() { return cluster_->job().Status(); }

  // Waits until the job restarted `count` times: the restart strategy was
  // asked and the delay fixed, and the JobMaster is about to wait it.
  bool AwaitRestarts(int count) {
    return WaitFor([&] { return Status().restarts() >= count; }, kPatience, absl::Milliseconds(1));
  }

  // Task (1, 1) of `attempt` (the sink on tm-2) fails; the JobMaster asks
  // both TaskManagers to cancel the attempt, and the other tasks end as
  // asked.
  void FailAttempt(int attempt, const std::string& error) {
    const size_t cancels = cluster_->gateway().cancels().size();
    cluster_->Report(attempt, 1, 1, v1::TASK_FAILED, error);
    ASSERT_TRUE(cluster_->gateway().AwaitCancels(cancels + 2, kPatience));
    for (size_t i = cancels; i < cancels + 2; ++i) {
      EXPECT_EQ(cluster_->gateway().cancels()[i].request.attempt(), attempt);
    }
    cluster_->Report(attempt, 0, 0, v1::TASK_CANCELED);
    cluster_->Report(attempt, 0, 1, v1::TASK_CANCELED);
    cluster_->Report(attempt, 1, 0, v1::TASK_CANCELED);
  }

  // Every task of `attempt` reports RUNNING, and the job shows it.
  void Run(int attempt) {
    ASSERT_TRUE(cluster_->gateway().AwaitDeploys(2 * attempt, kPatience));
    cluster_->ReportAll(attempt, v1::TASK_RUNNING);
    ASSERT_TRUE(cluster_->AwaitState(v1::RUNNING));
    ASSERT_EQ(Status().attempt(), attempt);
  }

  // With the JobMaster waiting out a restart delay of `delay`: a moment
  // before it ends nothing is deployed; at its end the next attempt is.
  void ExpectRestartAfter(absl::Duration delay) {
    time::SimulatedClock& clock = cluster_->clock();
    const size_t deploys = cluster_->gateway().deploys().size();
    ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
    clock.Advance(delay - absl::Milliseconds(1));
    ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
    EXPECT_EQ(cluster_->gateway().deploys().size(), deploys) << "deployed before the delay of " << delay << " ended";
    clock.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(cluster_->gateway().AwaitDeploys(deploys + 2, kPatience));
  }

  // Advances the clock a checkpoint interval at a time until checkpoint `id`
  // was triggered at both source tasks (the interval counts from when the
  // JobMaster handed the attempt's tasks to the coordinator, which the test
  // cannot see; so one or two intervals). `threads`: the JobMaster's worker
  // and the coordinator.
  void AwaitTrigger(int64_t id, absl::Duration interval) {
    ASSERT_TRUE(cluster_->AdvanceUntil(
        [&] {
          int calls = 0;
          for (const jobmanager::TriggerCheckpointsCall& call : cluster_->gateway().triggers()) {
            if (call.request.checkpoint_id() == id) ++calls;
          }
          return calls == 2;
        },
        interval, /*max_steps=*/3, /*threads=*/2));
  }

  std::optional<v1::CheckpointSummary> Checkpoint(int64_t id) {
    const v1::ListCheckpointsResponse checkpoints = cluster_->job().Checkpoints();
    for (const v1::CheckpointSummary& c : checkpoints.checkpoints()) {
      if (c.checkpoint_id() == id) return c;
    }
    return std::nullopt;
  }

  bool AwaitNotifications(int64_t id, size_t count) {
    return WaitFor([&] { return cluster_->NotificationsAbout(id).size() >= count; }, kPatience,
                   absl::Milliseconds(1));
  }

  // Two TaskManagers of one slot each unless a test makes its own.
  std::unique_ptr<MiniCluster> cluster_ = std::make_unique<MiniCluster>();
};

// restart-strategy fixed-delay: a failed task cancels the attempt on every
// TaskManager it used; once the delay passed on the clock the next attempt
// is deployed; the restarts show in the status until there are no more.
TEST_F(MiniClusterTest, FixedDelayRestartsAfterTheDelayUntilTheAttemptsAreUsedUp) {
  Start(FixedDelay(/*attempts=*/2, absl::Seconds(30)));
  Run(1);
  FailAttempt(1, "boom");
  std::set<std::string> canceled_at;
  for (const InMemoryTaskManagerGateway::CancelCall& cancel : cluster_->gateway().cancels()) {
    canceled_at.insert(cancel.address);
    EXPECT_THAT(cancel.request.reason(), HasSubstr("boom"));
  }
  EXPECT_EQ(canceled_at, (std::set<std::string>{kAddress1, kAddress2}));
  ASSERT_TRUE(AwaitRestarts(1));
  EXPECT_EQ(Status().state(), v1::RESTARTING);
  ExpectRestartAfter(absl::Seconds(30));
  EXPECT_EQ(cluster_->DeployedTasks(2, 4), Layout(2, kAddress1, kAddress2));
  Run(2);
  EXPECT_EQ(Status().restarts(), 1);
  EXPECT_THAT(Status().last_failure(), HasSubstr("boom"));

  FailAttempt(2, "boom again");
  ASSERT_TRUE(AwaitRestarts(2));
  ExpectRestartAfter(absl::Seconds(30));
  Run(3);
  EXPECT_EQ(Status().restarts(), 2);

  // The third failure finds no restart left.
  FailAttempt(3, "boom a third time");
  ASSERT_TRUE(cluster_->AwaitState(v1::FAILED));
  EXPECT_THAT(cluster_->AwaitTerminal(), ElementsAre(v1::FAILED));
  EXPECT_THAT(Status().error(), HasSubstr("boom a third time"));
  EXPECT_THAT(Status().error(), HasSubstr("no more restarts"));
  EXPECT_EQ(Status().restarts(), 2);
  EXPECT_EQ(cluster_->gateway().deploys().size(), 6u);
}

// restart-strategy exponential-delay: failures in a row wait the initial
// backoff, then twice, then four times as long; after a quiet period of the
// reset threshold the next failure waits the initial backoff again.
TEST_F(MiniClusterTest, ExponentialDelayDoublesWithEveryFailureAndStartsOverAfterAQuietPeriod) {
  JobSettings settings;
  settings.restart.type = RestartStrategyOptions::Type::kExponentialDelay;
  settings.restart.initial_backoff = absl::Seconds(1);
  settings.restart.multiplier = 2;
  settings.restart.max_backoff = absl::Minutes(1);
  settings.restart.reset_threshold = absl::Minutes(10);
  settings.restart.jitter = 0;
  Start(std::move(settings));
  int attempt = 1;
  for (const absl::Duration delay : {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4)}) {
    Run(attempt);
    FailAttempt(attempt, absl::StrCat("failure ", attempt));
    ASSERT_TRUE(AwaitRestarts(attempt));
    ExpectRestartAfter(delay);
    ++attempt;
  }
  Run(attempt);
  // Without the quiet period the next delay would be 8 s.
  cluster_->clock().Advance(absl::Minutes(10));
  FailAttempt(attempt, "after a quiet period");
  ASSERT_TRUE(AwaitRestarts(attempt));
  ExpectRestartAfter(absl::Seconds(1));
  Run(attempt + 1);
  EXPECT_EQ(Status().restarts(), 4);
}

// restart-strategy none: the first failure ends the job FAILED, the
// terminal callback says so, and the slots are given back.
TEST_F(MiniClusterTest, WithoutRestartsTheFirstFailureFailsTheJob) {
  Start(JobSettings{});
  Run(1);
  FailAttempt(1, "boom");
  ASSERT_TRUE(cluster_->AwaitState(v1::FAILED));
  EXPECT_THAT(cluster_->AwaitTerminal(), ElementsAre(v1::FAILED));
  EXPECT_THAT(Status().error(), HasSubstr("boom"));
  EXPECT_EQ(Status().restarts(), 0);
  EXPECT_EQ(cluster_->gateway().deploys().size(), 2u);
  EXPECT_EQ(cluster_->releases(), 1);
  for (const jobmanager::TaskManagerRecord& tm : cluster_->resource_manager().List()) {
    EXPECT_EQ(tm.free_slots(), 1) << tm.info.taskmanager_id();
  }
}

// A TaskManager the ResourceManager declares lost fails the tasks it ran;
// the next attempt is deployed on the slots that remain.
TEST_F(MiniClusterTest, ALostTaskManagersTasksRestartOnTheRemainingSlots) {
  cluster_ = std::make_unique<MiniCluster>(MiniClusterOptions{.taskmanagers = 3});
  Start(FixedDelay(/*attempts=*/1, absl::Seconds(10)));
  ASSERT_TRUE(cluster_->gateway().AwaitDeploys(2, kPatience));
  EXPECT_EQ(cluster_->DeployedTasks(0, 2), Layout(1, kAddress1, kAddress2));
  Run(1);

  cluster_->LoseTaskManager(2, LossReason::kHeartbeatTimeout);
  ASSERT_TRUE(cluster_->gateway().AwaitCancels(2, kPatience));
  EXPECT_THAT(Status().last_failure(), HasSubstr("TaskManager tm-2 at 127.0.0.1:2 lost (heartbeat timeout)"));
  cluster_->ReportAllOn(1, 1, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitRestarts(1));
  ExpectRestartAfter(absl::Seconds(10));
  EXPECT_EQ(cluster_->DeployedTasks(2, 4), Layout(2, kAddress1, kAddress3));
  Run(2);
}

// With too few slots left the restart waits for slots, up to
// slot.request.timeout on the clock, and then fails the job.
TEST_F(MiniClusterTest, ALostTaskManagerWithoutSlotsToSpareFailsTheJobAtTheSlotRequestTimeout) {
  JobSettings settings = FixedDelay(/*attempts=*/3, absl::Seconds(10));
  settings.slot_request_timeout = absl::Minutes(5);
  Start(std::move(settings));
  Run(1);
  cluster_->LoseTaskManager(2);
  ASSERT_TRUE(cluster_->gateway().AwaitCancels(2, kPatience));
  cluster_->ReportAllOn(1, 1, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitRestarts(1));
  // What the RESTARTING job waits for is in its status, not only the log.
  EXPECT_THAT(Status().waiting_for(), HasSubstr("the restart delay of 10 s"));
  ASSERT_TRUE(cluster_->clock().WaitUntilParked(1, kPatience));
  cluster_->clock().Advance(absl::Seconds(10));
  // The slot provider said no; the JobMaster asks again whenever slots are
  // offered, until the clock reaches the timeout.
  ASSERT_TRUE(cluster_->AwaitFailedAllocations(1));
  // Set once the refusal is back on the JobMaster's executor.
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Status().waiting_for(), "slots"); }, kPatience,
                      absl::Milliseconds(1)))
      << Status().waiting_for();
  EXPECT_THAT(Status().waiting_for(), HasSubstr("slots, until 5 min from now (slot.request.timeout)"));
  EXPECT_THAT(Status().waiting_for(), HasSubstr("the job needs 2 slots but the cluster has 1 free"));
  cluster_->clock().Advance(absl::Minutes(5) - absl::Seconds(1));
  // Slots offered just before the timeout (still too few) are asked for,
  // and the restart goes on waiting.
  const int failed = cluster_->failed_allocations();
  cluster_->job().OnSlotsOffered();
  ASSERT_TRUE(cluster_->AwaitFailedAllocations(failed + 1));
  EXPECT_EQ(Status().state(), v1::RESTARTING);

  cluster_->clock().Advance(absl::Seconds(1));
  ASSERT_TRUE(cluster_->AwaitState(v1::FAILED));
  EXPECT_THAT(cluster_->AwaitTerminal(), ElementsAre(v1::FAILED));
  EXPECT_THAT(Status().error(), HasSubstr("no slots to restart within 5 min (slot.request.timeout)"));
  EXPECT_THAT(Status().error(), HasSubstr("the job needs 2 slots but the cluster has 1 free"));
  EXPECT_EQ(cluster_->gateway().deploys().size(), 2u);
  EXPECT_EQ(cluster_->allocations(), 0);
}

// A restart waiting for slots takes those of a TaskManager that registers
// meanwhile.
TEST_F(MiniClusterTest, ARestartWaitingForSlotsDeploysOnATaskManagerThatJoins) {
  Start(FixedDelay(/*attempts=*/1, absl::Seconds(10)));
  Run(1);
  cluster_->LoseTaskManager(2);
  ASSERT_TRUE(cluster_->gateway().AwaitCancels(2, kPatience));
  cluster_->ReportAllOn(1, 1, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitRestarts(1));
  ASSERT_TRUE(cluster_->clock().WaitUntilParked(1, kPatience));
  cluster_->clock().Advance(absl::Seconds(10));
  ASSERT_TRUE(cluster_->AwaitFailedAllocations(1));
  EXPECT_EQ(cluster_->gateway().deploys().size(), 2u);

  EXPECT_EQ(cluster_->AddTaskManager(1), 3);
  ASSERT_TRUE(cluster_->gateway().AwaitDeploys(4, kPatience));
  EXPECT_EQ(cluster_->DeployedTasks(2, 4), Layout(2, kAddress1, kAddress3));
  Run(2);
  EXPECT_EQ(Status().waiting_for(), "");
}

// A deployment a TaskManager refuses, and one it never answers, each fail
// their attempt, which is canceled and restarted.
TEST_F(MiniClusterTest, ADeploymentRefusedOrNeverAnsweredFailsTheAttempt) {
  cluster_->gateway().SetDeployAnswer(
      [](const jobmanager::DeployTasksCall& call) -> absl::StatusOr<v1::DeployTasksResponse> {
        const int attempt = call.request.tasks(0).attempt();
        if (call.address != kAddress2 || attempt == 3) return InMemoryTaskManagerGateway::AllDeployed(call);
        if (attempt == 2) return InMemoryTaskManagerGateway::NoAnswer();
        v1::DeployTasksResponse refused;
        refused.set_deployed(0);
        refused.set_error_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
        refused.set_error("slot 0 is taken");
        return refused;
      });
  Start(FixedDelay(/*attempts=*/2, absl::Seconds(10)));

  // Attempt 1: tm-2 refuses; the tasks deployed on tm-1 are canceled.
  ASSERT_TRUE(cluster_->gateway().AwaitCancels(2, kPatience));
  EXPECT_THAT(Status().last_failure(), HasSubstr(absl::StrCat("at ", kAddress2, ": slot 0 is taken")));
  cluster_->ReportAllOn(1, 1, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitRestarts(1));
  ExpectRestartAfter(absl::Seconds(10));

  // Attempt 2: tm-2 never answers.
  ASSERT_TRUE(cluster_->gateway().AwaitCancels(4, kPatience));
  EXPECT_THAT(Status().last_failure(),
              HasSubstr(absl::StrCat("at ", kAddress2, ": ", InMemoryTaskManagerGateway::NoAnswer().message())));
  for (size_t i = 2; i < 4; ++i) EXPECT_EQ(cluster_->gateway().cancels()[i].request.attempt(), 2);
  cluster_->ReportAllOn(1, 2, v1::TASK_CANCELED);
  ASSERT_TRUE(AwaitRestarts(2));
  ExpectRestartAfter(absl::Seconds(10));

  // Attempt 3 is deployed everywhere.
  EXPECT_EQ(cluster_->DeployedTasks(4, 6), Layout(3, kAddress1, kAddress2));
  Run(3);
  EXPECT_EQ(Status().restarts(), 2);
}

// Checkpoints go to the source tasks; once every task acknowledged, the
// checkpoint completes and every TaskManager of the attempt is told.
TEST_F(MiniClusterTest, ACheckpointEveryTaskAcknowledgedCompletesAndEveryTaskManagerIsTold) {
  JobSettings settings;
  settings.checkpoint.interval = absl::Minutes(1);
  settings.checkpoint.timeout = absl::Minutes(10);
  Start(std::move(settings));
  Run(1);
  AwaitTrigger(1, absl::Minutes(1));
  std::map<std::string, std::vector<std::string>> sources;
  for (const jobmanager::TriggerCheckpointsCall& call : cluster_->gateway().triggers()) {
    EXPECT_EQ(call.request.checkpoint_id(), 1);
    EXPECT_EQ(call.request.attempt(), 1);
    sources[call.taskmanager.address].assign(call.request.task_ids().begin(), call.request.task_ids().end());
  }
  EXPECT_EQ(sources, (std::map<std::string, std::vector<std::string>>{{kAddress1, {MiniCluster::TaskId(1, 0, 0)}},
                                                                      {kAddress2, {MiniCluster::TaskId(1, 0, 1)}}}));

  cluster_->Acknowledge(1, 0, 0, 1);
  cluster_->Acknowledge(1, 0, 1, 1);
  cluster_->Acknowledge(1, 1, 0, 1);
  ASSERT_TRUE(Checkpoint(1).has_value());
  EXPECT_EQ(Checkpoint(1)->status(), "IN_PROGRESS");
  EXPECT_EQ(Checkpoint(1)->acknowledged_tasks(), 3);
  cluster_->Acknowledge(1, 1, 1, 1);
  ASSERT_TRUE(AwaitNotifications(1, 2));
  std::set<std::string> told;
  for (const InMemoryTaskManagerGateway::NotifyCall& call : cluster_->NotificationsAbout(1)) {
    EXPECT_TRUE(call.request.completed());
    EXPECT_EQ(call.request.attempt(), 1);
    told.insert(call.taskmanager.taskmanager_id);
  }
  EXPECT_EQ(told, (std::set<std::string>{"tm-1", "tm-2"}));
  EXPECT_EQ(Checkpoint(1)->status(), "COMPLETED");
  EXPECT_TRUE(std::filesystem::exists(cluster_->checkpoint_dir() + "/chk-1/_metadata"));
}

// A task that declines a checkpoint aborts it: the TaskManagers are told
// with the task's reason, and the next periodic checkpoint goes ahead.
TEST_F(MiniClusterTest, ADeclinedCheckpointIsAbortedAndTheNextOneGoesAhead) {
  JobSettings settings;
  settings.checkpoint.interval = absl::Minutes(1);
  settings.checkpoint.timeout = absl::Minutes(10);
  Start(std::move(settings));
  Run(1);
  AwaitTrigger(1, absl::Minutes(1));
  cluster_->Acknowledge(1, 0, 0, 1);
  cluster_->Decline(1, 1, 1, 1, "the disk is full");
  ASSERT_TRUE(AwaitNotifications(1, 2));
  for (const InMemoryTaskManagerGateway::NotifyCall& call : cluster_->NotificationsAbout(1)) {
    EXPECT_FALSE(call.request.completed());
    EXPECT_THAT(call.request.reason(), HasSubstr("the disk is full"));
  }
  EXPECT_EQ(Checkpoint(1)->status(), "FAILED");
  AwaitTrigger(2, absl::Minutes(1));
  cluster_->AcknowledgeAll(1, 2);
  ASSERT_TRUE(AwaitNotifications(2, 2));
  for (const InMemoryTaskManagerGateway::NotifyCall& call : cluster_->NotificationsAbout(2)) {
    EXPECT_TRUE(call.request.completed());
  }
  EXPECT_EQ(Status().state(), v1::RUNNING);
}

// execution.checkpointing.timeout on the clock: a checkpoint a task never
// acknowledges is aborted when the clock reaches its timeout, not before,
// and the TaskManagers are told; the job goes on.
TEST_F(MiniClusterTest, ACheckpointNotAcknowledgedExpiresAtItsTimeout) {
  JobSettings settings;
  settings.checkpoint.interval = absl::Minutes(1);
  settings.checkpoint.timeout = absl::Minutes(10);
  Start(std::move(settings));
  Run(1);
  AwaitTrigger(1, absl::Minutes(1));
  ASSERT_TRUE(Checkpoint(1).has_value());
  const absl::Time triggered_at = absl::FromUnixMillis(Checkpoint(1)->trigger_time_unix_ms());
  cluster_->Acknowledge(1, 0, 0, 1);
  cluster_->Acknowledge(1, 0, 1, 1);
  cluster_->Acknowledge(1, 1, 0, 1);

  cluster_->clock().AdvanceTo(triggered_at + absl::Minutes(10) - absl::Milliseconds(1));
  ASSERT_TRUE(cluster_->clock().WaitUntilParked(2, kPatience));
  EXPECT_THAT(cluster_->NotificationsAbout(1), SizeIs(0));
  EXPECT_EQ(Checkpoint(1)->status(), "IN_PROGRESS");

  cluster_->clock().Advance(absl::Milliseconds(1));
  ASSERT_TRUE(AwaitNotifications(1, 2));
  for (const InMemoryTaskManagerGateway::NotifyCall& call : cluster_->NotificationsAbout(1)) {
    EXPECT_FALSE(call.request.completed());
    EXPECT_THAT(call.request.reason(), HasSubstr("expired after 600 s"));
    EXPECT_THAT(call.request.reason(), HasSubstr(MiniCluster::TaskId(1, 1, 1)));
  }
  EXPECT_EQ(Checkpoint(1)->status(), "FAILED");
  EXPECT_EQ(cluster_->job().Checkpoints().failed_count(), 1);
  EXPECT_EQ(Status().state(), v1::RUNNING);
}

// After a failure the next attempt restores the newest completed
// checkpoint: each task's descriptor names it and carries the state handle
// its subtask acknowledged; a checkpoint still in progress at the failure
// is not restored.
TEST_F(MiniClusterTest, TheNextAttemptRestoresTheNewestCompletedCheckpoint) {
  JobSettings settings = FixedDelay(/*attempts=*/1, absl::Seconds(10));
  settings.checkpoint.interval = absl::Minutes(1);
  settings.checkpoint.timeout = absl::Minutes(10);
  Start(std::move(settings));
  Run(1);
  for (const jobmanager::DeployTasksCall& call : cluster_->gateway().deploys()) {
    for (const v1::TaskDeploymentDescriptor& tdd : call.request.tasks()) EXPECT_EQ(tdd.restore_checkpoint_id(), 0);
  }
  AwaitTrigger(1, absl::Minutes(1));
  cluster_->AcknowledgeAll(1, 1);
  ASSERT_TRUE(AwaitNotifications(1, 2));
  AwaitTrigger(2, absl::Minutes(1));
  cluster_->Acknowledge(1, 0, 0, 2);

  FailAttempt(1, "boom");
  ASSERT_TRUE(AwaitRestarts(1));
  // The worker waits out the delay; the coordinator waits, suspended.
  ASSERT_TRUE(cluster_->clock().WaitUntilParked(2, kPatience));
  cluster_->clock().Advance(absl::Seconds(10));
  ASSERT_TRUE(cluster_->gateway().AwaitDeploys(4, kPatience));
  for (int chain = 0; chain < 2; ++chain) {
    for (int subtask = 0; subtask < 2; ++subtask) {
      const std::optional<v1::TaskDeploymentDescriptor> tdd = cluster_->Descriptor(MiniCluster::TaskId(2, chain, subtask));
      ASSERT_TRUE(tdd.has_value());
      EXPECT_EQ(tdd->restore_checkpoint_id(), 1);
      EXPECT_EQ(tdd->restore_checkpoint_dir(), cluster_->checkpoint_dir() + "/chk-1");
      ASSERT_EQ(tdd->restore_sources_size(), 1);
      ASSERT_EQ(tdd->restore_sources(0).handles_size(), 1);
      const v1::TaskStateHandle& handle = tdd->restore_sources(0).handles(0);
      EXPECT_EQ(handle.file(), MiniCluster::SnapshotFile(1, chain, subtask));
      EXPECT_EQ(handle.subtask_index(), subtask);
    }
  }
  Run(2);
  EXPECT_EQ(Status().restored_checkpoint_id(), 1);
}

// The JobMaster waits for a deployment's answer up to deploy_timeout on its
// own clock (the gRPC gateway's deadline, 30 s): a TaskManager that does not
// answer fails the attempt when the clock reaches it, not before; the
// cancellation follows the deployment call, and the late answer changes
// nothing.
TEST_F(MiniClusterTest, ADeploymentUnansweredUntilTheDeployTimeoutOnTheClockFailsTheAttempt) {
  absl::Notification called;   // tm-2 got attempt 1's deployment
  absl::Notification answer;   // and may answer it now
  cluster_->gateway().SetDeployAnswer(
      [&](const jobmanager::DeployTasksCall& call) -> absl::StatusOr<v1::DeployTasksResponse> {
        if (call.address == kAddress2 && call.request.tasks(0).attempt() == 1) {
          called.Notify();
          answer.WaitForNotification();
        }
        return InMemoryTaskManagerGateway::AllDeployed(call);
      });
  Start(FixedDelay(/*attempts=*/1, absl::Seconds(10)));
  ASSERT_TRUE(called.WaitForNotificationWithTimeout(kPatience));

  cluster_->clock().Advance(absl::Seconds(30) - absl::Milliseconds(1));
  ASSERT_TRUE(cluster_->clock().WaitUntilParked(1, kPatience));
  EXPECT_EQ(Status().state(), v1::CREATED);
  EXPECT_EQ(Status().restarts(), 0);

  cluster_->clock().Advance(absl::Milliseconds(1));
  ASSERT_TRUE(AwaitRestarts(1));
  EXPECT_THAT(Status().last_failure(),
              HasSubstr(absl::StrCat("deploying attempt 1: no answer within 30 s from the TaskManagers at ", kAddress1,
                                     ", ", kAddress2)));
  // The cancellation goes out after the deployment call, which still waits.
  EXPECT_THAT(cluster_->gateway().cancels(), SizeIs(0));
  answer.Notify();
  ASSERT_TRUE(cluster_->gateway().AwaitCancels(2, kPatience));
  for (const InMemoryTaskManagerGateway::CancelCall& cancel : cluster_->gateway().cancels()) {
    EXPECT_EQ(cancel.request.attempt(), 1);
  }
  ExpectRestartAfter(absl::Seconds(10));
  EXPECT_EQ(cluster_->DeployedTasks(2, 4), Layout(2, kAddress1, kAddress2));
  Run(2);
  EXPECT_EQ(Status().restarts(), 1);
}

// Leadership revoked while a checkpoint is in flight: the acknowledgement
// that would complete it is ignored, and nothing after the revocation
// completes, expires, triggers or notifies a checkpoint, stores an attempt
// or an end, cancels or deploys: the JobMaster's threads end and leave the
// job, still RUNNING, to the next leader.
TEST_F(MiniClusterTest, AfterLeadershipIsRevokedNoCheckpointCompletesAndNothingIsToldOrStored) {
  absl::Mutex mu;
  std::vector<int> stored_attempts;
  JobSettings settings = FixedDelay(/*attempts=*/3, absl::Seconds(10));
  settings.checkpoint.interval = absl::Minutes(1);
  settings.checkpoint.timeout = absl::Minutes(10);
  settings.on_attempt = [&](int attempt) {
    absl::MutexLock lock(&mu);
    stored_attempts.push_back(attempt);
  };
  Start(std::move(settings));
  Run(1);
  AwaitTrigger(1, absl::Minutes(1));
  cluster_->Acknowledge(1, 0, 0, 1);
  cluster_->Acknowledge(1, 0, 1, 1);
  cluster_->Acknowledge(1, 1, 0, 1);

  cluster_->job().RevokeLeadership();
  cluster_->Acknowledge(1, 1, 1, 1);
  ASSERT_TRUE(Checkpoint(1).has_value());
  EXPECT_EQ(Checkpoint(1)->acknowledged_tasks(), 3);
  // What would complete, fail, expire and trigger checkpoints, and restart.
  cluster_->Report(1, 1, 1, v1::TASK_FAILED, "boom");
  cluster_->clock().Advance(absl::Minutes(20));
  // The JobMaster's executor and its coordinator end (alive, each would wait
  // on the clock again).
  ASSERT_TRUE(WaitFor([&] { return cluster_->clock().parked() == 0; }, kPatience, absl::Milliseconds(1)));

  EXPECT_THAT(cluster_->gateway().notifications(), SizeIs(0));
  EXPECT_THAT(cluster_->gateway().triggers(), SizeIs(2));
  EXPECT_THAT(cluster_->gateway().cancels(), SizeIs(0));
  EXPECT_THAT(cluster_->gateway().deploys(), SizeIs(2));
  EXPECT_EQ(Checkpoint(1)->status(), "IN_PROGRESS");
  EXPECT_EQ(cluster_->job().Checkpoints().completed_count(), 0);
  EXPECT_FALSE(std::filesystem::exists(cluster_->checkpoint_dir() + "/chk-1/_metadata"));
  // Not discarded either: the next leader's coordinator decides.
  EXPECT_TRUE(std::filesystem::exists(cluster_->checkpoint_dir() + "/chk-1"));
  EXPECT_THAT(cluster_->terminal(), SizeIs(0));
  EXPECT_EQ(Status().state(), v1::RUNNING);
  EXPECT_EQ(Status().restarts(), 0);
  EXPECT_TRUE(absl::IsUnavailable(cluster_->job().Cancel()));
  absl::MutexLock lock(&mu);
  EXPECT_THAT(stored_attempts, ElementsAre(1));
}

// Leadership revoked while the job waits out its restart delay: the delay
// passes and slots are offered, and no attempt is stored or deployed.
TEST_F(MiniClusterTest, AfterLeadershipIsRevokedWhileWaitingToRestartNothingIsDeployed) {
  absl::Mutex mu;
  std::vector<int> stored_attempts;
  JobSettings settings = FixedDelay(/*attempts=*/3, absl::Seconds(10));
  settings.on_attempt = [&](int attempt) {
    absl::MutexLock lock(&mu);
    stored_attempts.push_back(attempt);
  };
  Start(std::move(settings));
  Run(1);
  FailAttempt(1, "boom");
  ASSERT_TRUE(AwaitRestarts(1));
  ASSERT_TRUE(cluster_->clock().WaitUntilParked(1, kPatience));

  cluster_->job().RevokeLeadership();
  cluster_->clock().Advance(absl::Seconds(10));
  EXPECT_EQ(cluster_->AddTaskManager(1), 3);
  cluster_->job().OnSlotsOffered();
  ASSERT_TRUE(WaitFor([&] { return cluster_->clock().parked() == 0; }, kPatience, absl::Milliseconds(1)));

  EXPECT_THAT(cluster_->gateway().deploys(), SizeIs(2));
  EXPECT_EQ(cluster_->allocations(), 0);
  EXPECT_EQ(cluster_->clock().pending_timers(), 0u);
  EXPECT_THAT(cluster_->terminal(), SizeIs(0));
  EXPECT_EQ(Status().state(), v1::RESTARTING);
  EXPECT_EQ(Status().attempt(), 1);
  absl::MutexLock lock(&mu);
  EXPECT_THAT(stored_attempts, ElementsAre(1));
}

}  // namespace
}  // namespace weir::testing
