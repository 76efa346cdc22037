#include "jobmanager/job_master.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/options.h"
#include "common/fs/file_system_registry.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "connectors/connector.h"
#include "jobmanager/checkpoint/savepoint.h"
#include "jobmanager/checkpoint/state_assignment.h"

namespace weir::jobmanager {

bool IsTerminal(v1::TaskState state) {
  return state == v1::TASK_FINISHED || state == v1::TASK_CANCELED || state == v1::TASK_FAILED;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::FINISHED || state == v1::CANCELED || state == v1::FAILED;
}

namespace {

namespace k = config::keys;

// Keys a submission may set for itself with -D.
bool IsJobLevelKey(absl::string_view key) {
  return absl::StartsWith(key, "execution.checkpointing.") || absl::StartsWith(key, "restart-strategy.") ||
         key == k::kCheckpointsRetained || key == k::kSlotRequestTimeout ||
         key == k::kStateBackendType || key == k::kLocalRecovery;
}

}  // namespace

absl::Status CheckJobConfigKeys(const google::protobuf::Map<std::string, std::string>& job_config,
                                std::vector<std::string>* notices) {
  // Sorted, so that errors and notices do not depend on the map's order.
  std::vector<std::string> keys;
  for (const auto& entry : job_config) keys.push_back(entry.first);
  std::sort(keys.begin(), keys.end());
  for (const std::string& key : keys) {
    if (config::FindOption(config::CanonicalKey(key)) != nullptr) continue;
    if (config::IsFlinkKeyWeirIgnores(key)) {
      notices->push_back(absl::StrCat("ignored: -D ", key, " is a Flink setting Weir has no use for"));
      continue;
    }
    if (std::optional<absl::string_view> nearest = config::NearestKey(key); nearest.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("-D ", key, " is not a setting Weir knows; did you mean '",
                                                     *nearest, "'? See docs/configuration.md"));
    }
    if (config::InWeirNamespace(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "-D ", key, " is not a setting Weir knows (docs/configuration.md lists them). A job's own settings "
          "may not start with '", key.substr(0, key.find('.')), "', which Weir's keys use: rename it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobSettings> ResolveJobSettings(const config::Configuration& cluster,
                                               const google::protobuf::Map<std::string, std::string>& job_config,
                                               const std::string& job_id) {
  config::Configuration config = cluster;
  for (const auto& [key, value] : job_config) {
    // Flink's names for Weir's keys count as those keys.
    const config::OptionSpec* spec = config::FindOption(config::CanonicalKey(key));
    // The job's own setting (OperatorContext::JobConfig), or one that
    // CheckJobConfigKeys refused at submission.
    if (spec == nullptr) continue;
    if (!IsJobLevelKey(spec->key)) {
      return absl::InvalidArgumentError(absl::StrCat("-D ", key, " is a cluster setting and cannot be set per job; "
                                                     "set it in the JobManager's configuration"));
    }
    RETURN_IF_ERROR(Annotate(config.Set(key, value, config::ValueSource::kCommandLine), "job setting"));
  }
  JobSettings settings;
  settings.max_parallelism = static_cast<int>(config.GetInt(k::kMaxParallelism));
  settings.cancel_timeout = config.GetDuration(k::kCancelTimeout);
  settings.slot_request_timeout = config.GetDuration(k::kSlotRequestTimeout);
  settings.state_backend = config.GetString(k::kStateBackendType);
  settings.incremental_checkpoints = config.GetBool(k::kCheckpointIncremental);
  settings.local_recovery = config.GetBool(k::kLocalRecovery);
  const std::string retention = config.GetString(k::kCheckpointRetention);
  settings.retention = retention == "RETAIN_ON_CANCELLATION"        ? JobSettings::Retention::kRetainOnCancellation
                       : retention == "NO_EXTERNALIZED_CHECKPOINTS" ? JobSettings::Retention::kNever
                                                                    : JobSettings::Retention::kDeleteOnCancellation;
  const absl::Duration interval = config.GetDuration(k::kCheckpointInterval);
  const bool checkpointing = interval > absl::ZeroDuration();
  if (checkpointing) {
    std::string root = config.GetString(k::kCheckpointsDir);
    if (root.empty()) root = absl::StrCat(config.GetString(k::kHaStorageDir), "/checkpoints");
    // Absolute: the path goes to TaskManagers (another working directory)
    // and into messages users act on (weir submit -s).
    // An object-store URI (s3://bucket/prefix) is used as it is.
    std::error_code ec;
    if (!fs::IsObjectStoreUri(root)) {
      const std::filesystem::path absolute = std::filesystem::absolute(root, ec);
      if (!ec) root = absolute.lexically_normal().string();
    }
    while (fs::IsObjectStoreUri(root) && absl::EndsWith(root, "/")) root.pop_back();
    settings.checkpoint_dir = absl::StrCat(root, "/", job_id);
    checkpoint::CheckpointCoordinatorOptions& c = settings.checkpoint;
    c.interval = interval;
    c.timeout = config.GetDuration(k::kCheckpointTimeout);
    c.min_pause = config.GetDuration(k::kCheckpointMinPause);
    c.max_concurrent = static_cast<int>(config.GetInt(k::kCheckpointMaxConcurrent));
    c.mode = config.GetString(k::kCheckpointMode) == "AT_LEAST_ONCE" ? v1::AT_LEAST_ONCE : v1::EXACTLY_ONCE;
    c.tolerable_failed = static_cast<int>(config.GetInt(k::kCheckpointTolerableFailures));
    c.num_retained = static_cast<int>(config.GetInt(k::kCheckpointsRetained));
    c.max_parallelism = settings.max_parallelism;
    RETURN_IF_ERROR(c.Validate());
  }
  ASSIGN_OR_RETURN(settings.restart, RestartStrategyOptions::FromConfig(config, checkpointing));
  return settings;
}

absl::StatusOr<std::shared_ptr<JobMaster>> JobMaster::Create(std::string job_id, v1::SubmitJobRequest request,
                                                             ExecutionGraph graph, std::vector<SlotAssignment> slots,
                                                             JobSettings settings, SlotProvider slot_provider,
                                                             std::shared_ptr<TaskManagerGateway> taskmanagers,
                                                             TerminalCallback on_terminal) {
  if (taskmanagers == nullptr) return absl::InvalidArgumentError("a JobMaster needs a TaskManager gateway");
  if (settings.checkpoint.clock == nullptr) settings.checkpoint.clock = settings.clock;
  std::optional<checkpoint::CheckpointStorage> storage;
  if (!settings.checkpoint_dir.empty()) {
    ASSIGN_OR_RETURN(storage, checkpoint::CheckpointStorage::Open(settings.checkpoint_dir));
    for (const v1::JobVertex& v : request.graph().vertices()) {
      settings.checkpoint.operator_signatures[v.uid()] = checkpoint::VertexSignature(v);
    }
  }
  std::shared_ptr<JobMaster> master(new JobMaster(std::move(job_id), std::move(request), std::move(graph),
                                                  std::move(slots), std::move(settings), std::move(slot_provider),
                                                  std::move(taskmanagers), std::move(on_terminal)));
  if (storage.has_value()) {
    master->coordinator_ = std::make_unique<checkpoint::CheckpointCoordinator>(
        master->job_id_, master->settings_.checkpoint, std::move(*storage),
        static_cast<checkpoint::CheckpointTaskGateway*>(master.get()));
  }
  return master;
}

JobMaster::JobMaster(std::string job_id, v1::SubmitJobRequest request, ExecutionGraph graph,
                     std::vector<SlotAssignment> slots, JobSettings settings, SlotProvider slot_provider,
                     std::shared_ptr<TaskManagerGateway> taskmanagers, TerminalCallback on_terminal)
    : job_id_(std::move(job_id)),
      request_(std::move(request)),
      graph_(std::move(graph)),
      settings_(std::move(settings)),
      clock_(settings_.clock != nullptr ? *settings_.clock : time::Clock::Real()),
      slot_provider_(std::move(slot_provider)),
      taskmanagers_(std::move(taskmanagers)),
      on_terminal_(std::move(on_terminal)),
      submitted_at_(settings_.submitted_at == absl::InfinitePast() ? clock_.Now() : settings_.submitted_at),
      log_(logging::Get("jobmaster")),
      executor_(absl::StrCat("job ", job_id_, " master"), clock_, settings_.liveness),
      calls_(absl::StrCat("job ", job_id_, " master calls"), time::Clock::Real(), settings_.liveness,
             kLivenessTickBound) {
  // Nothing runs on the executor before Start: the fields are this thread's.
  [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    restart_strategy_ = RestartStrategy::Create(settings_.restart);
    slots_ = std::move(slots);
    attempt_ = std::max(1, settings_.first_attempt);
  }();
}

JobMaster::~JobMaster() {
  executor_.Shutdown();
  calls_.Shutdown();
  executor_.Join();
  calls_.Join();
  if (coordinator_ != nullptr) coordinator_->Stop();
}

void JobMaster::Start() {
  if (coordinator_ != nullptr) coordinator_->Start();
  executor_.Start();
  calls_.Start();
  PostEvent([this] {
    executor_.AssertInExecutor();
    HandleStart();
  });
}

void JobMaster::PostEvent(absl::AnyInvocable<void()> handler) {
  executor_.Post([this, handler = std::move(handler)]() mutable {
    if (revoked_.load()) return;
    handler();
  });
}

// ---------------------------------------------------------------------------
// What other threads tell the JobMaster: events for the executor.

void JobMaster::PostEventAndWait(absl::AnyInvocable<void()> handler) {
  if (executor_.InExecutor()) {
    if (!revoked_.load()) handler();
    return;
  }
  // Not past kMaxEventWait: the caller is an RPC with a deadline of its
  // own, and the executor may be in a long step (a metadata write, a scan
  // of checkpoints); the event is then taken when it gets there.
  executor_.PostAndWait(
      [this, handler = std::move(handler)]() mutable {
        if (revoked_.load()) return;
        handler();
      },
      kMaxEventWait);
}

void JobMaster::OnTaskStateUpdate(const v1::TaskStateUpdate& update) {
  PostEventAndWait([this, update] {
    executor_.AssertInExecutor();
    HandleTaskStateUpdate(update);
  });
}

void JobMaster::OnTaskManagerReport(const v1::ReportTaskMetricsRequest& report) {
  // Every JobMaster hears every TaskManager's report each second: only one
  // that runs a task of the current attempt is an event.
  const std::shared_ptr<const AttemptRoutes> routes = this->routes();
  if (routes == nullptr || !routes->taskmanager_ids.contains(report.taskmanager_id())) return;
  PostEvent([this, report] {
    executor_.AssertInExecutor();
    HandleTaskManagerReport(report);
  });
}

void JobMaster::OnTaskManagerLost(const v1::TaskManagerInfo& info, absl::string_view reason) {
  // Posted only: the ResourceManager may call from a gRPC callback thread,
  // which must not wait.
  PostEvent([this, info, reason = std::string(reason)] {
    executor_.AssertInExecutor();
    HandleTaskManagerLost(info, reason);
  });
}

void JobMaster::OnSlotsOffered() {
  PostEvent([this] {
    executor_.AssertInExecutor();
    HandleSlotsOffered();
  });
}

void JobMaster::FailJob(const std::string& reason) {
  PostEvent([this, reason] {
    executor_.AssertInExecutor();
    HandleCheckpointFailure(reason);
  });
}

absl::Status JobMaster::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    if (IsTerminal(state_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id_, " has already ended: ", v1::JobState_Name(state_)));
    }
  }
  absl::Status status = absl::UnavailableError(
      absl::StrCat("job ", job_id_, " is no longer run by this JobManager (leadership revoked)"));
  const bool taken = executor_.PostAndWait([this, &status] {
    executor_.AssertInExecutor();
    if (!revoked_.load()) status = HandleCancelRequested();
  });
  if (!taken && !revoked_.load()) {
    absl::MutexLock lock(&mu_);
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_, " has already ended: ", v1::JobState_Name(state_)));
  }
  return status;
}

void JobMaster::RevokeLeadership() {
  if (revoked_.exchange(true)) return;
  log_->warn("job {}: leadership revoked; its job master stops deciding (no checkpoint, notification, write or "
             "deployment from now on), and leaves the job to the next leader",
             job_id_);
  // At once, whatever the executor is doing: the coordinator's thread acts
  // on its own.
  if (coordinator_ != nullptr) coordinator_->Revoke();
  calls_.Shutdown();  // a deployment not sent yet is never sent
  executor_.Post([this] {
    executor_.AssertInExecutor();
    HandleLeadershipRevoked();
  });
}

// ---------------------------------------------------------------------------
// Helpers over the attempt's tasks.

std::string JobMaster::TaskLabel(const TaskRecord& task) const {
  const Chain& chain = graph_.chains[task.chain];
  return absl::StrCat("'", chain.name, "' (", task.subtask + 1, "/", chain.parallelism, ") on TaskManager ",
                      task.slot.taskmanager_id);
}

JobMaster::TaskRecord* JobMaster::FindTaskLocked(const std::string& task_id) {
  auto it = task_index_.find(task_id);
  return it == task_index_.end() ? nullptr : &tasks_[it->second];
}

bool JobMaster::AllTasksTerminal() const { return terminal_tasks_ == task_index_.size(); }

void JobMaster::SetTaskStateLocked(TaskRecord& task, v1::TaskState state) {
  if (task.state == state) return;
  if (task.state == v1::TASK_RUNNING) --running_tasks_;
  if (IsTerminal(task.state)) --terminal_tasks_;
  task.state = state;
  if (state == v1::TASK_RUNNING) ++running_tasks_;
  if (IsTerminal(state)) ++terminal_tasks_;
}

void JobMaster::SetInputEndedLocked(TaskRecord& task) {
  if (task.input_ended) return;
  task.input_ended = true;
  if (graph_.chains[task.chain].input_edge < 0) final_checkpoint_wanted_ = true;
}

void JobMaster::FailLocked(const std::string& error) {
  if (attempt_failed_ || state_ == v1::CANCELING || IsTerminal(state_)) return;
  log_->warn("job {} attempt {} failing: {}", job_id_, attempt_, error);
  state_ = v1::FAILING;
  attempt_failed_ = true;
  last_failure_ = error;
  cancel_requested_ = true;
  cancel_reason_ = absl::StrCat("job failing: ", error);
}

std::shared_ptr<const JobMaster::AttemptRoutes> JobMaster::routes() const {
  absl::MutexLock lock(&routes_mu_);
  return routes_;
}

// ---------------------------------------------------------------------------
// The attempt's life, event by event.

void JobMaster::HandleStart() {
  log_->info("job {} '{}' starting: {} tasks in {} slots, checkpoints {}, restart strategy {}", job_id_,
             graph_.spec.name(), [&] {
               int n = 0;
               for (const Chain& c : graph_.chains) n += c.parallelism;
               return n;
             }(),
             graph_.slots_needed,
             coordinator_ == nullptr ? std::string("off")
                                     : absl::StrCat("every ", config::FormatDuration(settings_.checkpoint.interval),
                                                    " into ", settings_.checkpoint_dir),
             restart_strategy_->Describe());
  if (settings_.recovered) {
    // Taken over from a JobManager that stopped: its TaskManagers come back
    // and re-register (cancelling what they ran for it); then the job goes
    // on from its newest checkpoint.
    recovering_ = true;
    {
      absl::MutexLock lock(&mu_);
      state_ = v1::RESTARTING;
    }
    WaitForSlots();
    return;
  }
  if (settings_.savepoint.has_value()) {
    restore_ = settings_.savepoint;
    {
      absl::MutexLock lock(&mu_);
      restored_from_savepoint_ = true;
      NoteRestoreLocked(restore_);
    }
    if (coordinator_ != nullptr) coordinator_->SetNextCheckpointId(restore_->checkpoint_id() + 1);
    log_->info("job {}: starting from the savepoint {} (checkpoint {})", job_id_, settings_.savepoint_checkpoint_dir,
               restore_->checkpoint_id());
  }
  StartAttempt();
}

void JobMaster::StartAttempt() {
  int attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    attempt = attempt_;
  }
  if (settings_.on_attempt && !revoked_.load()) {
    Liveness::Loop::Busy busy(live());  // the job store's write
    settings_.on_attempt(attempt);
  }
  // Every descriptor first: one that cannot be built (e.g. the restored
  // checkpoint holds no state for a task) fails the attempt before any
  // task runs.
  std::vector<DeployTasksCall> batches;
  std::vector<std::vector<size_t>> batch_tasks;  // per batch: indexes into tasks_, in request order
  std::vector<size_t> batch_bytes;               // per batch: of the descriptors in its request
  auto routes = std::make_shared<AttemptRoutes>();
  routes->attempt = attempt;
  absl::Status described;
  {
    absl::MutexLock lock(&mu_);
    tasks_.clear();
    task_index_.clear();
    tasks_of_taskmanager_.clear();
    first_task_of_chain_.clear();
    running_tasks_ = terminal_tasks_ = 0;
    for (const Chain& chain : graph_.chains) {
      first_task_of_chain_.push_back(tasks_.size());
      for (int s = 0; s < chain.parallelism; ++s) {
        TaskRecord task;
        task.task_id = ExecutionGraph::TaskId(job_id_, attempt_, chain.index, s);
        task.chain = chain.index;
        task.subtask = s;
        task.slot = slots_.at(s);
        task.state = v1::TASK_DEPLOYING;
        task_index_[task.task_id] = tasks_.size();
        tasks_of_taskmanager_[task.slot.taskmanager_id].push_back(tasks_.size());
        routes->task_at[task.task_id] = {task.slot.taskmanager_id, task.slot.address};
        tasks_.push_back(std::move(task));
      }
    }
    std::set<std::pair<std::string, std::string>> taskmanagers;
    for (const TaskRecord& t : tasks_) taskmanagers.emplace(t.slot.taskmanager_id, t.slot.address);
    attempt_taskmanagers_.clear();
    for (const auto& [id, address] : taskmanagers) attempt_taskmanagers_.push_back({id, address});
    routes->taskmanagers = attempt_taskmanagers_;
    for (const TaskManagerAddress& taskmanager : attempt_taskmanagers_) {
      routes->taskmanager_ids.insert(taskmanager.taskmanager_id);
    }
    // One call per TaskManager (more when its descriptors are large), so
    // that no message comes near the TaskManager's receive limit.
    constexpr size_t kMaxBatchBytes = rpc::kControlPlaneMaxMessageBytes / 4;
    std::map<std::string, size_t> open_batch;  // address -> index in batches
    // Where each operator's state lies in the restored checkpoint.
    const absl::StatusOr<checkpoint::OperatorIndex> restore_index =
        restore_.has_value() ? checkpoint::IndexOperators(*restore_) : checkpoint::OperatorIndex{};
    for (size_t i = 0; i < tasks_.size() && described.ok(); ++i) {
      TaskRecord& task = tasks_[i];
      absl::StatusOr<v1::TaskDeploymentDescriptor> tdd =
          restore_index.ok() ? Describe(task, restore_, &*restore_index) : restore_index.status();
      if (!tdd.ok()) {
        described = tdd.status();
        break;
      }
      const size_t bytes = tdd->ByteSizeLong();
      auto open = open_batch.find(task.slot.address);
      if (open == open_batch.end() || batch_bytes[open->second] + bytes > kMaxBatchBytes) {
        batches.push_back({task.slot.address, {}});
        batch_tasks.emplace_back();
        batch_bytes.push_back(0);
        open = open_batch.insert_or_assign(task.slot.address, batches.size() - 1).first;
      }
      batch_bytes[open->second] += bytes;
      task.finished_on_restore = tdd->finished_on_restore();
      *batches[open->second].request.add_tasks() = *std::move(tdd);
      batch_tasks[open->second].push_back(i);
    }
    if (!described.ok()) {
      for (TaskRecord& t : tasks_) SetTaskStateLocked(t, v1::TASK_CANCELED);
      FailLocked(std::string(described.message()));
    }
  }
  {
    absl::MutexLock lock(&routes_mu_);
    routes_ = std::move(routes);
  }
  phase_ = Phase::kRunning;
  if (!described.ok()) {
    Step();  // every task ended: the attempt failed
    return;
  }
  phase_ = Phase::kDeploying;
  deployment_ = ++deployments_;
  const uint64_t deployment = deployment_;
  const size_t task_count = task_index_.size();
  // On the calls thread: the deadline starts as the call goes out, and the
  // answer comes back as an event; a timeout that fires first fails the
  // attempt, and the late answer is then ignored.
  calls_.Post([this, deployment, task_count, batches = std::move(batches),
               batch_tasks = std::move(batch_tasks)]() mutable {
    Liveness::Loop::Busy busy(calls_.liveness_loop());  // up to the deployment deadline
    const time::TimerHandle timeout = executor_.PostAt(clock_.Now() + settings_.deploy_timeout, [this, deployment] {
      if (revoked_.load()) return;
      executor_.AssertInExecutor();
      HandleDeploymentTimedOut(deployment);
    });
    const std::vector<std::vector<absl::Status>> results = taskmanagers_->DeployTasks(batches);
    executor_.CancelTimer(timeout);
    DeploymentAnswer answer;
    answer.deployment = deployment;
    answer.outcome.assign(task_count, absl::OkStatus());
    for (size_t b = 0; b < batches.size(); ++b) {
      for (size_t k = 0; k < batch_tasks[b].size(); ++k) answer.outcome[batch_tasks[b][k]] = results[b].at(k);
    }
    PostEvent([this, answer = std::move(answer)]() mutable {
      executor_.AssertInExecutor();
      HandleDeploymentAnswered(std::move(answer));
    });
  });
  Step();  // a cancellation that came meanwhile goes out after the deployment
}

void JobMaster::HandleDeploymentAnswered(DeploymentAnswer answer) {
  if (!InAttempt() || answer.deployment != deployment_) {
    log_->debug("job {}: ignoring the answer to deployment {}, which is no longer awaited", job_id_,
                answer.deployment);
    return;
  }
  TakeDeploymentOutcome(answer.outcome);
}

void JobMaster::HandleDeploymentTimedOut(uint64_t deployment) {
  if (!InAttempt() || deployment != deployment_) return;
  std::set<std::string> unique;
  for (const TaskManagerAddress& taskmanager : attempt_taskmanagers_) unique.insert(taskmanager.address);
  {
    absl::MutexLock lock(&mu_);
    FailLocked(absl::StrCat("deploying attempt ", attempt_, ": no answer within ",
                            config::FormatDuration(settings_.deploy_timeout), " from the TaskManagers at ",
                            absl::StrJoin(unique, ", ")));
  }
  // Tasks may have started all the same: the cancellation goes to every
  // TaskManager of the attempt, after the deployment call (calls_ keeps the
  // order), even when no task is known to run.
  phase_ = Phase::kCancelling;
  SendCancellation(cancel_reason_);
  // Every task counts as not deployed (kAborted: no failure of its own).
  TakeDeploymentOutcome(std::vector<absl::Status>(
      task_index_.size(), absl::AbortedError("no answer to the deployment")));
}

void JobMaster::TakeDeploymentOutcome(const std::vector<absl::Status>& outcome) {
  deployment_ = 0;
  if (phase_ == Phase::kDeploying) phase_ = Phase::kRunning;
  std::vector<std::string> deployed;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    std::optional<std::string> failure;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      TaskRecord& task = tasks_[i];
      if (outcome[i].ok()) {
        task.deployed = true;
        task.deployed_at = now;
        deployed.push_back(absl::StrCat("job ", job_id_, ": deployed task ", task.task_id, " ", TaskLabel(task),
                                        " to ", task.slot.address, " slot ", task.slot.slot_index));
        continue;
      }
      // Tasks no TaskManager has will never report: they are done as far
      // as this attempt is concerned. (A deployment that got no answer may
      // still have started: the cancellation of the attempt, sent to every
      // TaskManager it used after the deployment, stops it.)
      if (task.state == v1::TASK_DEPLOYING) SetTaskStateLocked(task, v1::TASK_CANCELED);
      if (!failure.has_value() && !absl::IsAborted(outcome[i])) {
        failure = absl::StrCat("deploying task ", TaskLabel(task), " at ", task.slot.address, ": ",
                               outcome[i].message());
      }
    }
    if (failure.has_value()) FailLocked(*failure);
  }
  for (const std::string& line : deployed) log_->info("{}", line);
  Step();
}

void JobMaster::HandleTaskStateUpdate(const v1::TaskStateUpdate& update) {
  if (!InAttempt()) return;
  {
    absl::MutexLock lock(&mu_);
    OnTaskStateUpdateLocked(update);
  }
  Step();
}

void JobMaster::HandleTaskManagerLost(const v1::TaskManagerInfo& info, const std::string& reason) {
  if (!InAttempt()) return;
  auto lost = tasks_of_taskmanager_.find(info.taskmanager_id());
  if (lost == tasks_of_taskmanager_.end()) return;
  {
    absl::MutexLock lock(&mu_);
    std::string first;
    for (size_t index : lost->second) {
      TaskRecord& t = tasks_[index];
      if (IsTerminal(t.state)) continue;
      SetTaskStateLocked(t, v1::TASK_FAILED);
      t.error = absl::StrCat("TaskManager ", info.taskmanager_id(), " at ", info.address(), " lost: ", reason);
      if (first.empty()) first = TaskLabel(t);
    }
    if (first.empty()) return;
    FailLocked(absl::StrCat("TaskManager ", info.taskmanager_id(), " at ", info.address(), " lost (", reason,
                            ") while running task ", first,
                            "; if its process died, its log says why (e.g. a crash in user code)"));
  }
  Step();
}

void JobMaster::HandleCheckpointFailure(const std::string& reason) {
  if (!InAttempt()) return;
  {
    absl::MutexLock lock(&mu_);
    FailLocked(reason);
  }
  Step();
}

absl::Status JobMaster::HandleCancelRequested() {
  {
    absl::MutexLock lock(&mu_);
    if (IsTerminal(state_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id_, " has already ended: ", v1::JobState_Name(state_)));
    }
    if (state_ == v1::CANCELING) return absl::OkStatus();
    log_->info("job {} CANCELING (requested by a client)", job_id_);
    state_ = v1::CANCELING;
  }
  if (InAttempt()) {
    cancel_requested_ = true;
    cancel_reason_ = "canceled by a client";
    Step();
  } else if (phase_ == Phase::kWaitingToRestart || phase_ == Phase::kWaitingForSlots) {
    // Nothing runs: the job ends here.
    Finish(v1::CANCELED);
  }
  return absl::OkStatus();
}

void JobMaster::SendCancellation(const std::string& reason) {
  cancel_sent_ = true;
  // task.cancellation.timeout 0: wait for the TaskManagers however long.
  // Declared once the clock has passed the timeout, not when it reaches it.
  if (settings_.cancel_timeout > absl::ZeroDuration()) {
    const uint64_t cancellation = ++cancellations_;
    cancel_timer_ = executor_.PostAt(clock_.Now() + settings_.cancel_timeout + absl::Nanoseconds(1),
                                     [this, cancellation] {
                                       if (revoked_.load()) return;
                                       executor_.AssertInExecutor();
                                       HandleCancellationTimedOut(cancellation);
                                     });
  }
  v1::CancelJobTasksRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_attempt(attempt_);
  }
  request.set_job_id(job_id_);
  request.set_reason(reason);
  std::set<std::string> unique;
  for (const TaskManagerAddress& taskmanager : attempt_taskmanagers_) unique.insert(taskmanager.address);
  std::vector<std::string> addresses(unique.begin(), unique.end());
  calls_.Post([this, addresses = std::move(addresses), request = std::move(request)] {
    Liveness::Loop::Busy busy(calls_.liveness_loop());  // up to 5 s
    const std::vector<absl::Status> results = taskmanagers_->CancelJobTasks(addresses, request);
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (!results[i].ok()) {
        log_->warn("job {}: cannot cancel its tasks at {}: {}", job_id_, addresses[i], results[i].message());
      }
    }
  });
}

void JobMaster::HandleCancellationTimedOut(uint64_t cancellation) {
  if (phase_ != Phase::kCancelling || cancellation != cancellations_) return;
  {
    absl::MutexLock lock(&mu_);
    for (TaskRecord& t : tasks_) {
      if (IsTerminal(t.state)) continue;
      log_->warn("job {}: task {} did not acknowledge cancellation within {}; declaring it canceled", job_id_,
                 TaskLabel(t), absl::FormatDuration(settings_.cancel_timeout));
      SetTaskStateLocked(t, v1::TASK_CANCELED);
    }
  }
  Step();
}

void JobMaster::Step() {
  if (!InAttempt()) return;
  std::vector<std::pair<std::string, v1::TaskStateHandle>> finished;
  std::vector<std::string> sources, all;
  std::vector<std::pair<std::string, v1::TaskStateHandle>> finished_already;
  int attempt = 0;
  const bool start_checkpoints = start_checkpoints_ && !attempt_failed_ && coordinator_ != nullptr;
  const bool request_final_checkpoint = final_checkpoint_wanted_ && !attempt_failed_;
  start_checkpoints_ = final_checkpoint_wanted_ = false;
  std::optional<AttemptEnd> end;
  {
    absl::MutexLock lock(&mu_);
    attempt = attempt_;
    for (const std::string& task_id : finished_tasks_) {
      if (const TaskRecord* task = FindTaskLocked(task_id)) finished.emplace_back(task_id, Identity(*task));
    }
    // The end of the attempt; a deployment still out is waited for, as the
    // tasks it deploys must hear of the cancellation after it.
    if (AllTasksTerminal() && deployment_ == 0) {
      bool all_finished = true;
      for (const TaskRecord& t : tasks_) all_finished = all_finished && t.state == v1::TASK_FINISHED;
      if (state_ == v1::CANCELING) {
        end = AttemptEnd::kCanceled;
      } else if (attempt_failed_) {
        end = AttemptEnd::kFailed;
      } else if (!all_finished) {
        FailLocked("tasks ended without finishing");
        end = AttemptEnd::kFailed;
      } else {
        end = AttemptEnd::kFinished;
      }
    } else if (start_checkpoints) {
      for (const TaskRecord& t : tasks_) {
        all.push_back(t.task_id);
        if (graph_.chains[t.chain].input_edge < 0) sources.push_back(t.task_id);
        if (t.finished_on_restore || t.state == v1::TASK_FINISHED) finished_already.emplace_back(t.task_id, Identity(t));
      }
    }
  }
  finished_tasks_.clear();
  if (end.has_value()) {
    EndAttempt(*end);
    return;
  }
  if (coordinator_ != nullptr) {
    if (request_final_checkpoint) {
      log_->info("job {}: a source reached the end of its input; triggering a checkpoint soon, after which it "
                 "ends", job_id_);
      coordinator_->RequestTriggerSoon();
    }
    if (start_checkpoints) {
      Liveness::Loop::Busy busy(live());  // may wait for a metadata write
      coordinator_->SetTasks(attempt, std::move(sources), std::move(all));
      // Before any trigger: a task restored as finished takes none (it
      // runs no operator), and one that ended is gone.
      for (const auto& [task_id, identity] : finished_already) {
        coordinator_->OnTaskFinished(attempt, task_id, identity);
      }
      coordinator_->Resume();
    }
    for (const auto& [task_id, identity] : finished) coordinator_->OnTaskFinished(attempt, task_id, identity);
  }
  if (cancel_requested_ && !cancel_sent_) {
    // No checkpoint may complete with a failing attempt's tasks.
    if (coordinator_ != nullptr) {
      Liveness::Loop::Busy busy(live());  // may wait for a metadata write
      coordinator_->Suspend();
    }
    phase_ = Phase::kCancelling;
    SendCancellation(cancel_reason_);
  }
}

void JobMaster::EndAttempt(AttemptEnd end) {
  executor_.CancelTimer(cancel_timer_);
  if (end == AttemptEnd::kFinished) {
    Finish(v1::FINISHED);
    return;
  }
  if (end == AttemptEnd::kCanceled) {
    Finish(v1::CANCELED);
    return;
  }
  // The attempt failed; every task of it has ended.
  if (coordinator_ != nullptr) {
    Liveness::Loop::Busy busy(live());  // may wait for a metadata write
    coordinator_->Suspend();
  }
  slot_provider_.release();
  std::string failure;
  int attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    failure = last_failure_;
    attempt = attempt_;
  }
  if (!unrecoverable_.empty()) {
    {
      absl::MutexLock lock(&mu_);
      error_ = absl::StrCat(unrecoverable_, " (not restarted: a restart cannot fix this failure)");
      log_->error("job {} FAILED without a restart: {}", job_id_, error_);
    }
    Finish(v1::FAILED);
    return;
  }
  const absl::Time failed_at = clock_.Now();
  const std::optional<absl::Duration> delay = restart_strategy_->OnFailure(failed_at);
  if (!delay.has_value()) {
    {
      absl::MutexLock lock(&mu_);
      error_ = failure;
      if (restarts_ > 0 || settings_.restart.type != RestartStrategyOptions::Type::kNone) {
        absl::StrAppend(&error_, " (restart strategy ", restart_strategy_->Describe(), ": no more restarts)");
      }
    }
    Finish(v1::FAILED);
    return;
  }
  // From the failure, fixed before the job shows RESTARTING.
  phase_ = Phase::kWaitingToRestart;
  restart_timer_ = executor_.PostAt(failed_at + *delay, [this] {
    if (revoked_.load()) return;
    executor_.AssertInExecutor();
    HandleRestartDelayElapsed();
  });
  int restarts = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != v1::CANCELING) state_ = v1::RESTARTING;
    restarts = ++restarts_;
    waiting_for_ = absl::StrCat("the restart delay of ", config::FormatDuration(*delay), " (restart strategy ",
                                restart_strategy_->Describe(), ")");
  }
  log_->warn("job {} RESTARTING in {} (restart {}, strategy {}) after attempt {} failed: {}", job_id_,
             config::FormatDuration(*delay), restarts, restart_strategy_->Describe(), attempt, failure);
}

void JobMaster::HandleRestartDelayElapsed() {
  if (phase_ != Phase::kWaitingToRestart) return;
  WaitForSlots();
}

void JobMaster::WaitForSlots() {
  phase_ = Phase::kWaitingForSlots;
  slot_deadline_ = clock_.Now() + settings_.slot_request_timeout;
  slot_refusal_ = absl::OkStatus();
  slot_refusal_logged_ = false;
  // Local recovery: subtask s back on the TaskManager that ran it, which
  // keeps its last snapshot.
  preferred_.clear();
  if (settings_.local_recovery) {
    for (const SlotAssignment& slot : slots_) preferred_.push_back(slot.taskmanager_id);
  }
  slot_timer_ = executor_.PostAt(slot_deadline_, [this] {
    if (revoked_.load()) return;
    executor_.AssertInExecutor();
    HandleSlotRequestTimedOut();
  });
  RequestSlots(/*last=*/false);
}

void JobMaster::HandleSlotsOffered() {
  if (phase_ != Phase::kWaitingForSlots) return;
  RequestSlots(/*last=*/false);
}

void JobMaster::HandleSlotRequestTimedOut() {
  if (phase_ != Phase::kWaitingForSlots) return;
  RequestSlots(/*last=*/true);
}

void JobMaster::RequestSlots(bool last) {
  absl::StatusOr<std::vector<SlotAssignment>> slots = slot_provider_.allocate(graph_.slots_needed, preferred_);
  if (slots.ok()) {
    executor_.CancelTimer(slot_timer_);
    slots_ = *std::move(slots);
    AfterSlots(absl::OkStatus());
    return;
  }
  slot_refusal_ = slots.status();
  {
    absl::MutexLock lock(&mu_);
    waiting_for_ = absl::StrCat("slots, until ", config::FormatDuration(slot_deadline_ - clock_.Now()),
                                " from now (slot.request.timeout): ", slot_refusal_.message());
  }
  if (!slot_refusal_logged_) {
    log_->warn("job {}: waiting up to {} for slots to restart: {}", job_id_,
               absl::FormatDuration(settings_.slot_request_timeout), slot_refusal_.message());
    slot_refusal_logged_ = true;
  }
  // Slots come with SlotsOffered; until the timeout, nothing else to do.
  if (!last && clock_.Now() < slot_deadline_) return;
  executor_.CancelTimer(slot_timer_);
  AfterSlots(absl::ResourceExhaustedError(absl::StrCat("no slots to restart within ",
                                                        config::FormatDuration(settings_.slot_request_timeout),
                                                        " (slot.request.timeout): ", slot_refusal_.message())));
}

void JobMaster::AfterSlots(absl::Status slots) {
  {
    absl::MutexLock lock(&mu_);
    waiting_for_.clear();
  }
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> chosen =
      slots.ok() ? ChooseRestore() : absl::StatusOr<std::optional<v1::CheckpointMetadata>>(slots);
  if (recovering_) {
    recovering_ = false;
    if (!chosen.ok()) {
      {
        absl::MutexLock lock(&mu_);
        error_ = absl::StrCat("recovering the job after a JobManager restart failed: ", chosen.status().message());
      }
      Finish(v1::FAILED);
      return;
    }
    restore_ = *std::move(chosen);
    absl::MutexLock lock(&mu_);
    NoteRestoreLocked(restore_);
    log_->info("job {} recovered after a JobManager restart: attempt {} starting from {}", job_id_, attempt_,
               restore_.has_value() ? absl::StrCat("checkpoint ", restore_->checkpoint_id())
                                    : std::string("no checkpoint (none had completed)"));
  } else {
    if (!chosen.ok()) {
      {
        absl::MutexLock lock(&mu_);
        error_ = absl::StrCat(last_failure_, "; restarting failed: ", chosen.status().message());
      }
      Finish(v1::FAILED);
      return;
    }
    restore_ = *std::move(chosen);
    attempt_failed_ = false;
    final_checkpoint_wanted_ = false;
    start_checkpoints_ = false;
    cancel_requested_ = false;
    cancel_sent_ = false;
    cancel_reason_.clear();
    unrecoverable_.clear();
    finished_tasks_.clear();
    absl::MutexLock lock(&mu_);
    NoteRestoreLocked(restore_);
    ++attempt_;
    log_->info("job {} attempt {} starting from {}", job_id_, attempt_,
               restore_.has_value() ? absl::StrCat("checkpoint ", restore_->checkpoint_id())
                                    : std::string("no checkpoint"));
  }
  StartAttempt();
}

void JobMaster::Finish(v1::JobState final_state) {
  phase_ = Phase::kEnded;
  executor_.CancelTimer(restart_timer_);
  executor_.CancelTimer(slot_timer_);
  executor_.CancelTimer(cancel_timer_);
  {
    Liveness::Loop::Busy busy(live());  // the end's storage work
    if (coordinator_ != nullptr) coordinator_->Stop();
    const bool keep = KeepsCheckpoints(final_state);
    const std::string retained = keep ? NewestKeptCheckpoint() : "";
    {
      absl::MutexLock lock(&mu_);
      state_ = final_state;
      ended_at_ = clock_.Now();
      if (final_state == v1::FAILED) {
        if (error_.empty()) error_ = last_failure_;
        if (!retained.empty()) absl::StrAppend(&error_, "; its last checkpoint is kept: resubmit with -s ", retained);
        log_->error("job {} FAILED: {}", job_id_, error_);
      } else {
        log_->info("job {} {}", job_id_, v1::JobState_Name(final_state));
      }
    }
    if (!revoked_.load()) {
      on_terminal_(job_id_, final_state);
      // Only once the final state is stored: a JobManager that dies before
      // would resume the job, and needs its checkpoints.
      if (!keep) DeleteCheckpoints(final_state);
    }
  }
  // Nothing more to decide: the threads end (the calls thread once the
  // cancellations it holds went out).
  calls_.Shutdown(/*drain=*/true);
  executor_.Shutdown();
}

void JobMaster::HandleLeadershipRevoked() {
  const Phase was = phase_;
  phase_ = Phase::kRevoked;
  executor_.CancelTimer(restart_timer_);
  executor_.CancelTimer(slot_timer_);
  executor_.CancelTimer(cancel_timer_);
  int attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    attempt = attempt_;
  }
  log_->warn("job {} attempt {}: job master stopped (leadership revoked{})", job_id_, attempt,
             was == Phase::kWaitingToRestart ? ", while waiting to restart"
             : was == Phase::kWaitingForSlots ? ", while waiting for slots"
                                              : "");
  executor_.Shutdown();
}

absl::Status JobMaster::DescribeRestore(const TaskRecord& task, const v1::CheckpointMetadata& restore,
                                        const checkpoint::OperatorIndex& index,
                                        v1::TaskDeploymentDescriptor* tdd) const {
  const Chain& chain = graph_.chains[task.chain];
  // The checkpoint's chains this task reads, in the order its operators
  // first need them; and whether each of those is finished at this subtask.
  std::vector<int> sources;
  std::vector<std::string> missing;
  bool any_running = false, any_finished = false;
  for (int v : chain.vertices) {
    const std::string& uid = graph_.spec.vertices(v).uid();
    auto found = index.chain_of.find(uid);
    if (found == index.chain_of.end() ||
        (restored_from_savepoint_ && settings_.savepoint_dropped_operators.contains(uid))) {
      missing.push_back(uid);
      continue;
    }
    if (std::find(sources.begin(), sources.end(), found->second) != sources.end()) continue;
    sources.push_back(found->second);
    const checkpoint::CheckpointChain& old = index.chains[found->second];
    const int n = static_cast<int>(old.handles.size());
    if (n == chain.parallelism ? old.handles[task.subtask]->finished() : old.finished == n) {
      any_finished = true;
    } else if (old.finished > 0 && n != chain.parallelism) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", restore.checkpoint_id(), " records ", old.finished, " of the ", n, " subtasks of the "
          "operator '", uid, "' as finished; it is restored only at the parallelism it had (", n, ")"));
    } else {
      any_running = true;
    }
  }
  if (!missing.empty() && !restored_from_savepoint_) {
    // The job's own checkpoint holds every operator of the job.
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", restore.checkpoint_id(), " holds no state for the operators ", absl::StrJoin(missing, ", "),
        " of task ", TaskLabel(task), ": the job's graph differs from the one that took it"));
  }
  if (sources.empty()) return absl::OkStatus();  // new to the job: starts empty
  if (any_finished && any_running) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", restore.checkpoint_id(), " records some operators of task ", TaskLabel(task),
        " as finished and others as running; a finished operator cannot be chained with a running one: chain "
        "them as they were"));
  }
  tdd->set_restore_checkpoint_id(restore.checkpoint_id());
  tdd->set_restore_checkpoint_dir(restored_from_savepoint_
                                      ? settings_.savepoint_checkpoint_dir
                                      : coordinator_->storage().CheckpointDir(restore.checkpoint_id()));
  if (any_finished) {
    tdd->set_finished_on_restore(true);
    return absl::OkStatus();
  }
  for (int c : sources) {
    const checkpoint::CheckpointChain& old = index.chains[c];
    v1::RestoreSource* source = tdd->add_restore_sources();
    if (static_cast<int>(old.handles.size()) == chain.parallelism) {
      *source->add_handles() = *old.handles[task.subtask];
    } else {
      for (const v1::TaskStateHandle* handle : old.handles) *source->add_handles() = *handle;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TaskDeploymentDescriptor> JobMaster::Describe(
    const TaskRecord& task, const std::optional<v1::CheckpointMetadata>& restore,
    const checkpoint::OperatorIndex* restore_index) const {
  const Chain& chain = graph_.chains[task.chain];
  const v1::JobGraphSpec& spec = graph_.spec;
  v1::TaskDeploymentDescriptor tdd;
  tdd.set_job_id(job_id_);
  tdd.set_attempt(attempt_);
  tdd.set_task_id(task.task_id);
  for (int v : chain.vertices) {
    tdd.add_vertex_ids(v);
    tdd.add_vertex_names(spec.vertices(v).name());
  }
  tdd.set_subtask_index(task.subtask);
  tdd.set_parallelism(chain.parallelism);
  tdd.set_artifact_sha256(request_.artifact_sha256());
  *tdd.mutable_args() = request_.args();
  *tdd.mutable_config() = request_.config();
  tdd.set_graph_sha256(graph_.spec_sha256);
  tdd.set_slot_index(task.slot.slot_index);
  tdd.set_max_parallelism(settings_.max_parallelism);
  tdd.set_input_vertex(-1);
  if (chain.input_edge >= 0) {
    const int e = chain.input_edge;
    const int producer_vertex = spec.edges(e).source();
    const int producer_chain = graph_.chain_of_vertex[producer_vertex];
    tdd.set_input_vertex(producer_vertex);
    const bool forward = graph_.EffectivePartitioning(e) == v1::FORWARD;
    // The producer chain's tasks are contiguous in tasks_, by subtask.
    const size_t first = first_task_of_chain_.at(producer_chain);
    const size_t count = graph_.chains[producer_chain].parallelism;
    for (size_t k = forward ? task.subtask : 0; k < (forward ? task.subtask + 1 : count); ++k) {
      const TaskRecord& producer = tasks_.at(first + k);
      v1::InputChannelSpec* in = tdd.add_inputs();
      in->set_partition_id(ExecutionGraph::PartitionId(job_id_, attempt_, producer_chain, producer.subtask, e));
      in->set_subpartition(task.subtask);
      in->set_producer_address(producer.slot.address);
      in->set_local(producer.slot.taskmanager_id == task.slot.taskmanager_id);
    }
  }
  for (int e : chain.output_edges) {
    const int target = spec.edges(e).target();
    v1::OutputSpec* out = tdd.add_outputs();
    out->set_partition_id(ExecutionGraph::PartitionId(job_id_, attempt_, task.chain, task.subtask, e));
    out->set_target_vertex(target);
    out->set_partitioning(graph_.EffectivePartitioning(e));
    out->set_num_subpartitions(graph_.vertex_parallelism[target]);
  }
  if (coordinator_ != nullptr) {
    tdd.set_checkpoint_dir(settings_.checkpoint_dir);
    tdd.set_checkpointing_mode(settings_.checkpoint.mode);
    // Exactly-once sinks commit with checkpoints: every task's bounded input
    // ends with one, so that what they write last (EndInput included) is
    // committed the same way.
    tdd.set_final_checkpoint(HasExactlyOnceSink());
  }
  tdd.set_state_backend(settings_.state_backend);
  tdd.set_incremental_checkpoints(settings_.incremental_checkpoints);
  tdd.set_local_recovery(settings_.local_recovery && coordinator_ != nullptr);
  for (int v : chain.vertices) tdd.add_operator_uids(spec.vertices(v).uid());
  if (restore.has_value()) RETURN_IF_ERROR(DescribeRestore(task, *restore, *restore_index, &tdd));
  return tdd;
}

v1::TaskStateHandle JobMaster::Identity(const TaskRecord& task) const {
  const Chain& chain = graph_.chains[task.chain];
  v1::TaskStateHandle identity;
  for (int v : chain.vertices) {
    identity.add_vertex_ids(v);
    identity.add_operator_uids(graph_.spec.vertices(v).uid());
  }
  identity.set_subtask_index(task.subtask);
  identity.set_parallelism(chain.parallelism);
  return identity;
}

bool JobMaster::HasExactlyOnceSink() const {
  for (const v1::JobVertex& v : request_.graph().vertices()) {
    if (connectors::WritesExactlyOnce(v.properties())) return true;
  }
  return false;
}

absl::StatusOr<std::string> JobMaster::TriggerSavepoint(const std::string& target) {
  ASSIGN_OR_RETURN(auto taken, TakeSavepoint(target, /*stop=*/false));
  return taken.first;
}

absl::StatusOr<std::string> JobMaster::StopWithSavepoint(const std::string& target) {
  int attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    if (IsTerminal(state_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id_, " has already ended ", v1::JobState_Name(state_)));
    }
    attempt = attempt_;
  }
  ASSIGN_OR_RETURN(auto taken, TakeSavepoint(target, /*stop=*/true));
  const auto& [path, id] = taken;
  {
    absl::MutexLock lock(&mu_);
    if (attempt_ != attempt || IsTerminal(state_)) {
      return absl::AbortedError(absl::StrCat("savepoint ", path, " was written, but job ", job_id_,
                                             " restarted or ended meanwhile and was not stopped"));
    }
  }
  coordinator_->FinishStop(id, /*end_input=*/true);
  log_->info("job {}: stopping after savepoint {} (checkpoint {})", job_id_, path, id);
  // The sinks commit at the end of their input; that takes a transaction
  // round trip per open transaction, bounded by the checkpoint timeout.
  const absl::Time deadline = clock_.Now() + settings_.checkpoint.timeout + absl::Seconds(30);
  absl::MutexLock lock(&mu_);
  auto ended = [this, attempt]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return IsTerminal(state_) || attempt_ != attempt;
  };
  clock_.AwaitWithDeadline(&mu_, absl::Condition(&ended), deadline);
  if (state_ == v1::FINISHED) return path;
  if (!IsTerminal(state_) && attempt_ == attempt) {
    return absl::DeadlineExceededError(absl::StrCat("savepoint ", path, " was written, but job ", job_id_,
                                                    " has not finished yet; see its status"));
  }
  return absl::AbortedError(absl::StrCat("savepoint ", path, " was written, but job ", job_id_,
                                         " did not finish: it is ", v1::JobState_Name(state_),
                                         last_failure_.empty() ? "" : absl::StrCat(" (", last_failure_, ")")));
}

absl::StatusOr<std::pair<std::string, int64_t>> JobMaster::TakeSavepoint(const std::string& target, bool stop) {
  if (coordinator_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id_, " has checkpoints off, and a savepoint is a checkpoint copied out: submit the job with "
        "-Dexecution.checkpointing.interval=... to take savepoints"));
  }
  const absl::Time deadline = clock_.Now() + settings_.checkpoint.timeout + absl::Seconds(10);
  absl::StatusOr<int64_t> triggered = coordinator_->TriggerNow(stop);
  // A periodic checkpoint in progress (max-concurrent-checkpoints): once it
  // ended (the coordinator tells), ours.
  while (absl::IsResourceExhausted(triggered.status()) && clock_.Now() < deadline) {
    coordinator_->AwaitCapacity(deadline);
    triggered = coordinator_->TriggerNow(stop);
  }
  if (!triggered.ok()) return Annotate(triggered.status(), "triggering the savepoint's checkpoint");
  const int64_t id = *triggered;
  coordinator_->Pin(id);
  struct Unpin {
    checkpoint::CheckpointCoordinator* c;
    int64_t id;
    ~Unpin() { c->Unpin(id); }
  } unpin{coordinator_.get(), id};
  // A stop that does not get as far as ending the input lets the job go on.
  auto give_up = [&](absl::Status status) {
    if (stop) coordinator_->FinishStop(id, /*end_input=*/false);
    return status;
  };
  // Returns when the checkpoint ended (completed or failed), the
  // coordinator stopped, or at the deadline.
  const std::optional<checkpoint::CheckpointRecord> record = coordinator_->AwaitEnd(id, deadline);
  if (record.has_value() && record->status == checkpoint::CheckpointStatus::kFailed) {
    return absl::AbortedError(absl::StrCat("the savepoint's checkpoint ", id, " failed: ", record->failure_reason));
  }
  if (record.has_value() && record->status == checkpoint::CheckpointStatus::kCompleted) {
    absl::StatusOr<std::string> path = checkpoint::WriteSavepoint(coordinator_->storage(), id, target, job_id_);
    if (!path.ok()) return give_up(path.status());
    log_->info("job {}: savepoint written to {} (checkpoint {})", job_id_, *path, id);
    return std::make_pair(*std::move(path), id);
  }
  if (clock_.Now() < deadline) {
    return absl::AbortedError(
        absl::StrCat("the savepoint's checkpoint ", id, " was given up: job ", job_id_, " stopped checkpointing"));
  }
  // The coordinator expires it by then; a stop resumes when it does.
  return give_up(
      absl::DeadlineExceededError(absl::StrCat("the savepoint's checkpoint ", id, " did not complete in time")));
}
absl::StatusOr<std::optional<v1::CheckpointMetadata>> JobMaster::ChooseRestore() {
  Liveness::Loop::Busy busy(live());  // reads and checks checkpoints in storage
  ASSIGN_OR_RETURN(std::optional<v1::CheckpointMetadata> chosen, ChooseCheckpoint());
  bool from_savepoint = false;
  {
    absl::MutexLock lock(&mu_);
    restored_from_savepoint_ = from_savepoint = !chosen.has_value() && settings_.savepoint.has_value();
  }
  if (from_savepoint) {
    chosen = settings_.savepoint;
    log_->info("job {}: restoring from the savepoint it was submitted from (checkpoint {}, {})", job_id_,
               chosen->checkpoint_id(), settings_.savepoint_checkpoint_dir);
    if (coordinator_ != nullptr) coordinator_->SetNextCheckpointId(chosen->checkpoint_id() + 1);
  }
  return chosen;
}

absl::StatusOr<std::optional<v1::CheckpointMetadata>> JobMaster::ChooseCheckpoint() {
  if (coordinator_ == nullptr) return std::nullopt;
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(std::optional<v1::CheckpointMetadata> chosen, coordinator_->storage().LatestValid(&skipped));
  for (const std::string& why : skipped) {
    log_->error("job {}: NOT restoring from {}; falling back to an older checkpoint", job_id_, why);
  }
  if (!skipped.empty() && HasExactlyOnceSink()) {
    log_->error("job {}: its exactly-once sinks committed output of the skipped checkpoints; restoring an older "
                "one writes that output again (at-least-once for this restore)",
                job_id_);
  }
  if (chosen.has_value()) {
    log_->info("job {}: restoring from checkpoint {} ({} tasks, taken {})", job_id_, chosen->checkpoint_id(),
               chosen->tasks_size(),
               absl::FormatTime(absl::FromUnixMillis(chosen->trigger_time_unix_ms()), absl::UTCTimeZone()));
    coordinator_->SetNextCheckpointId(chosen->checkpoint_id() + 1);
  } else if (!skipped.empty()) {
    log_->error("job {}: no intact checkpoint is left; restarting WITHOUT state", job_id_);
  } else {
    log_->info("job {}: no checkpoint completed yet; restarting without state", job_id_);
  }
  return chosen;
}

bool JobMaster::KeepsCheckpoints(v1::JobState final_state) const {
  switch (settings_.retention) {
    case JobSettings::Retention::kRetainOnCancellation:
      return true;
    case JobSettings::Retention::kDeleteOnCancellation:
      return final_state == v1::FAILED;
    case JobSettings::Retention::kNever:
      return false;
  }
  return true;
}

std::string JobMaster::NewestKeptCheckpoint() {
  if (coordinator_ == nullptr) return "";
  const checkpoint::CheckpointStorage& storage = coordinator_->storage();
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> latest = storage.LatestValid(nullptr);
  if (!latest.ok() || !latest->has_value()) {
    log_->info("job {}: no complete checkpoint to keep in {}", job_id_, storage.job_dir());
    return "";
  }
  const std::string path = storage.CheckpointDir((*latest)->checkpoint_id());
  log_->info("job {}: its checkpoints are kept in {}; submit with -s {} to go on from the newest", job_id_,
             storage.job_dir(), path);
  return path;
}

void JobMaster::DeleteCheckpoints(v1::JobState final_state) {
  if (coordinator_ == nullptr) return;
  const std::string& dir = coordinator_->storage().job_dir();
  if (absl::Status deleted = coordinator_->storage().DiscardAll(); !deleted.ok()) {
    log_->warn("job {}: deleting its checkpoints in {} failed: {}; delete them by hand", job_id_, dir,
               deleted.message());
    return;
  }
  log_->info("job {}: checkpoints deleted ({} and retention {})", job_id_, v1::JobState_Name(final_state),
             settings_.retention == JobSettings::Retention::kNever ? "NO_EXTERNALIZED_CHECKPOINTS"
                                                                  : "DELETE_ON_CANCELLATION");
}

void JobMaster::OnTaskStateUpdateLocked(const v1::TaskStateUpdate& update) {
  if (update.attempt() != attempt_) return;  // a previous attempt's straggler
  TaskRecord* task = FindTaskLocked(update.task_id());
  if (task == nullptr || IsTerminal(task->state)) return;
  if (!update.taskmanager_id().empty() && update.taskmanager_id() != task->slot.taskmanager_id) {
    log_->warn("job {}: ignoring a state report for task {} from TaskManager {}, which does not run it", job_id_,
               task->task_id, update.taskmanager_id());
    return;
  }
  // Only the states a task reports, and never back from RUNNING.
  const v1::TaskState reported = update.state();
  const bool known = reported == v1::TASK_DEPLOYING || reported == v1::TASK_RUNNING || IsTerminal(reported);
  if (!known || (reported == v1::TASK_DEPLOYING && task->state == v1::TASK_RUNNING)) {
    log_->warn("job {}: ignoring state {} reported for task {} (it is {})", job_id_, static_cast<int>(reported),
               task->task_id, v1::TaskState_Name(task->state));
    return;
  }
  SetTaskStateLocked(*task, update.state());
  if (update.input_ended() && update.state() == v1::TASK_RUNNING && !task->input_ended) {
    SetInputEndedLocked(*task);
    log_->info("job {}: task {} {} reached the end of its input; it ends once a checkpoint after it completed",
               job_id_, task->task_id, TaskLabel(*task));
  }
  task->records_in = std::max(task->records_in, update.records_in());
  task->records_out = std::max(task->records_out, update.records_out());
  if (update.has_watermark_ms()) task->watermark_ms = update.watermark_ms();
  if (update.state() == v1::TASK_FAILED) {
    // Error text from the wire is cut, not trusted to be small.
    task->error = update.error().substr(0, limits::kMaxErrorLength);
    // While the attempt ends anyway (cancelled, or another task failed
    // first), what its tasks report is a consequence: info.
    log_->log(state_ == v1::CANCELING || attempt_failed_ ? spdlog::level::info : spdlog::level::warn,
              "job {}: task {} {} failed{}: {}", job_id_, task->task_id, TaskLabel(*task),
              update.unrecoverable() ? " (unrecoverable)" : "", task->error);
    if (update.unrecoverable() && unrecoverable_.empty()) {
      unrecoverable_ = absl::StrCat("task ", TaskLabel(*task), " failed: ", task->error);
    }
    FailLocked(absl::StrCat("task ", TaskLabel(*task), " failed: ", task->error));
  } else if (update.state() == v1::TASK_CANCELED && state_ != v1::CANCELING && !attempt_failed_) {
    // Nobody here asked for it: its TaskManager stopped it (e.g. shutting down).
    log_->warn("job {}: task {} {} was canceled by its TaskManager", job_id_, task->task_id, TaskLabel(*task));
    FailLocked(absl::StrCat("task ", TaskLabel(*task), " was canceled by its TaskManager (stopped or restarted)"));
  } else {
    log_->info("job {}: task {} {} is {}", job_id_, task->task_id, TaskLabel(*task),
               v1::TaskState_Name(update.state()));
    if (update.state() == v1::TASK_FINISHED) finished_tasks_.push_back(task->task_id);
    const bool up = update.state() == v1::TASK_RUNNING || update.state() == v1::TASK_FINISHED;
    if (up && !attempt_failed_ && (state_ == v1::CREATED || state_ == v1::RESTARTING)) {
      // Every task runs, or has finished already (a short bounded input, or
      // one the restored checkpoint records as finished).
      if (running_tasks_ + terminal_tasks_ == tasks_.size()) {
        state_ = v1::RUNNING;
        start_checkpoints_ = coordinator_ != nullptr;
        log_->info("job {} RUNNING (attempt {}, {} tasks{})", job_id_, attempt_, tasks_.size(),
                   restored_checkpoint_id_ > 0 ? absl::StrCat(", restored from checkpoint ", restored_checkpoint_id_)
                                               : std::string());
      }
    }
  }
}

void JobMaster::HandleTaskManagerReport(const v1::ReportTaskMetricsRequest& report) {
  if (!InAttempt()) return;
  {
  absl::MutexLock lock(&mu_);
  const std::string& taskmanager_id = report.taskmanager_id();
  auto mine = tasks_of_taskmanager_.find(taskmanager_id);
  if (mine == tasks_of_taskmanager_.end()) return;  // none of this attempt's tasks are there
  absl::flat_hash_set<const TaskRecord*> reported;
  reported.reserve(report.tasks_size());
  for (const v1::TaskMetrics& metrics : report.tasks()) {
    if (metrics.job_id() != job_id_ || metrics.attempt() != attempt_) continue;
    TaskRecord* task = FindTaskLocked(metrics.task_id());
    if (task == nullptr || task->slot.taskmanager_id != taskmanager_id) continue;
    reported.insert(task);
    task->records_in = std::max(task->records_in, metrics.records_in());
    task->records_out = std::max(task->records_out, metrics.records_out());
    task->backpressured_ms = std::max(task->backpressured_ms, metrics.backpressured_ms());
    if (metrics.has_watermark_ms()) task->watermark_ms = metrics.watermark_ms();
    if (IsTerminal(metrics.final_state()) && !IsTerminal(task->state)) {
      log_->warn("job {}: task {} {} ended {}, which its own report did not tell (lost?); its TaskManager's "
                 "metrics report did",
                 job_id_, task->task_id, TaskLabel(*task), v1::TaskState_Name(metrics.final_state()));
      v1::TaskStateUpdate update;
      update.set_job_id(job_id_);
      update.set_attempt(attempt_);
      update.set_task_id(task->task_id);
      update.set_taskmanager_id(taskmanager_id);
      update.set_state(metrics.final_state());
      update.set_error(metrics.error());
      update.set_unrecoverable(metrics.unrecoverable());
      update.set_records_in(metrics.records_in());
      update.set_records_out(metrics.records_out());
      OnTaskStateUpdateLocked(update);
    }
  }
  const absl::Time now = clock_.Now();
  for (size_t index : mine->second) {
    TaskRecord& task = tasks_[index];
    if (!task.deployed || IsTerminal(task.state)) continue;
    if (reported.contains(&task)) {
      task.missed_reports = 0;
      continue;
    }
    if (now - task.deployed_at < kReportGrace || ++task.missed_reports < kMissedReportsForLost) continue;
    if (state_ == v1::CANCELING || attempt_failed_) {
      SetTaskStateLocked(task, v1::TASK_CANCELED);  // what was asked of it
      continue;
    }
    SetTaskStateLocked(task, v1::TASK_FAILED);
    task.error = absl::StrCat("TaskManager ", taskmanager_id, " no longer runs it, and how it ended never arrived");
    log_->warn("job {}: task {} {} failed: {} ({} reports of that TaskManager in a row left it out)", job_id_,
               task.task_id, TaskLabel(task), task.error, task.missed_reports);
    FailLocked(absl::StrCat("task ", TaskLabel(task), " failed: ", task.error));
  }
  }
  Step();
}
void JobMaster::OnCheckpointAcknowledged(const v1::AcknowledgeCheckpointRequest& ack) {
  if (coordinator_ != nullptr) coordinator_->OnAcknowledge(ack);
}

void JobMaster::OnCheckpointsAcknowledged(absl::Span<const v1::AcknowledgeCheckpointRequest* const> acks) {
  if (coordinator_ != nullptr) coordinator_->OnAcknowledgeBatch(acks);
}

void JobMaster::OnCheckpointDeclined(const v1::DeclineCheckpointRequest& decline) {
  if (coordinator_ != nullptr) coordinator_->OnDecline(decline);
}

absl::Status JobMaster::TriggerCheckpoints(int attempt, const std::vector<std::string>& task_ids, int64_t id,
                                           int64_t timestamp_unix_ms, bool stop) {
  if (revoked_.load()) {
    return absl::UnavailableError(absl::StrCat("not triggering checkpoint ", id, ": leadership revoked"));
  }
  const std::shared_ptr<const AttemptRoutes> routes = this->routes();
  std::map<std::string, v1::TriggerCheckpointsRequest> by_address;
  std::map<std::string, std::string> taskmanager_at;  // address -> id
  for (const std::string& task_id : task_ids) {
    const bool current = routes != nullptr && routes->attempt == attempt;
    auto at = current ? routes->task_at.find(task_id) : routes->task_at.end();
    if (!current || at == routes->task_at.end()) {
      return absl::NotFoundError(absl::StrCat("triggering source task ", task_id, " failed: it is not running"));
    }
    by_address[at->second.address].add_task_ids(task_id);
    taskmanager_at[at->second.address] = at->second.taskmanager_id;
  }
  std::vector<TriggerCheckpointsCall> calls;
  calls.reserve(by_address.size());
  for (auto& [address, request] : by_address) {
    request.set_job_id(job_id_);
    request.set_attempt(attempt);
    request.set_checkpoint_id(id);
    request.set_timestamp_unix_ms(timestamp_unix_ms);
    request.set_stop(stop);
    calls.push_back({{taskmanager_at[address], address}, std::move(request)});
  }
  const std::vector<TriggerCheckpointsResult> results = taskmanagers_->TriggerCheckpoints(calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (results[i].status.ok()) continue;
    return absl::Status(results[i].status.code(),
                        absl::StrCat("triggering source task ", results[i].task_id, " at ",
                                     calls[i].taskmanager.address, " failed: ", results[i].status.message()));
  }
  return absl::OkStatus();
}

void JobMaster::NotifyCheckpoint(int attempt, int64_t id, bool completed, const std::string& reason) {
  v1::NotifyCheckpointRequest request;
  request.set_completed(completed);
  request.set_reason(reason);
  SendNotification(attempt, id, std::move(request));
}

void JobMaster::FinishStop(int attempt, int64_t id, bool end_input) {
  v1::NotifyCheckpointRequest request;
  request.set_completed(true);
  request.set_finish_stop(true);
  request.set_end_input(end_input);
  SendNotification(attempt, id, std::move(request));
}

void JobMaster::SendNotification(int attempt, int64_t id, v1::NotifyCheckpointRequest request) {
  // A deposed leader's word would make sinks commit: never sent.
  if (revoked_.load()) return;
  const std::shared_ptr<const AttemptRoutes> routes = this->routes();
  if (routes == nullptr || routes->attempt != attempt) return;
  const std::vector<TaskManagerAddress>& taskmanagers = routes->taskmanagers;
  request.set_job_id(job_id_);
  request.set_attempt(attempt);
  request.set_checkpoint_id(id);
  const std::vector<absl::Status> results = taskmanagers_->NotifyCheckpoint(taskmanagers, request);
  const std::string what = request.finish_stop()
                               ? (request.end_input() ? "that the stop ends the input" : "that the stop is given up")
                               : (request.completed() ? "that it completed" : "that it was aborted");
  for (size_t i = 0; i < taskmanagers.size(); ++i) {
    if (!results[i].ok()) {
      log_->warn("job {}: cannot tell TaskManager {} about checkpoint {} ({}): {}", job_id_, taskmanagers[i].address,
                 id, what, results[i].message());
    }
  }
}

v1::JobStatus JobMaster::Status() const {
  absl::MutexLock lock(&mu_);
  v1::JobStatus status;
  status.set_job_id(job_id_);
  status.set_name(graph_.spec.name());
  status.set_state(state_);
  status.set_error(error_);
  status.set_parallelism(graph_.slots_needed);
  status.set_submitted_at_unix_ms(absl::ToUnixMillis(submitted_at_));
  if (IsTerminal(state_)) status.set_ended_at_unix_ms(absl::ToUnixMillis(ended_at_));
  status.set_artifact_sha256(request_.artifact_sha256());
  status.set_attempt(attempt_);
  status.set_restarts(restarts_);
  status.set_restored_checkpoint_id(restored_checkpoint_id_);
  status.set_last_failure(last_failure_);
  status.set_checkpointing(coordinator_ != nullptr);
  if (state_ == v1::RESTARTING) status.set_waiting_for(waiting_for_);
  for (const TaskRecord& t : tasks_) {
    v1::TaskStatus* ts = status.add_tasks();
    ts->set_task_id(t.task_id);
    ts->set_name(graph_.chains[t.chain].name);
    ts->set_subtask_index(t.subtask);
    ts->set_parallelism(graph_.chains[t.chain].parallelism);
    ts->set_taskmanager_id(t.slot.taskmanager_id);
    ts->set_taskmanager_address(t.slot.address);
    ts->set_state(t.state);
    ts->set_records_in(t.records_in);
    ts->set_records_out(t.records_out);
    ts->set_backpressured_ms(t.backpressured_ms);
    if (t.watermark_ms.has_value()) ts->set_watermark_ms(*t.watermark_ms);
    ts->set_error(t.error);
  }
  return status;
}

void JobMaster::NoteRestoreLocked(const std::optional<v1::CheckpointMetadata>& restore) {
  restored_checkpoint_id_ = restore.has_value() ? restore->checkpoint_id() : 0;
  if (!restore.has_value()) return;
  ++restored_count_;
  restored_at_ = clock_.Now();
}

v1::ListCheckpointsResponse JobMaster::Checkpoints() const {
  v1::ListCheckpointsResponse response;
  {
    absl::MutexLock lock(&mu_);
    response.set_restored_checkpoint_id(restored_checkpoint_id_);
    response.set_restored_count(restored_count_);
    response.set_restored_is_savepoint(restored_from_savepoint_ && restored_checkpoint_id_ > 0);
    if (restored_checkpoint_id_ > 0) response.set_restored_at_ms(absl::ToUnixMillis(restored_at_));
  }
  response.set_checkpointing(coordinator_ != nullptr);
  if (coordinator_ == nullptr) return response;
  response.set_completed_count(coordinator_->completed_count());
  response.set_failed_count(coordinator_->failed_count());
  for (const checkpoint::CheckpointRecord& r : coordinator_->History()) {
    v1::CheckpointSummary* c = response.add_checkpoints();
    c->set_checkpoint_id(r.id);
    c->set_status(std::string(checkpoint::CheckpointStatusName(r.status)));
    c->set_attempt(r.attempt);
    c->set_trigger_time_unix_ms(absl::ToUnixMillis(r.trigger_time));
    c->set_duration_ms(absl::ToInt64Milliseconds(r.duration));
    c->set_size_bytes(r.size_bytes);
    c->set_longest_alignment_ms(r.longest_alignment_ms);
    c->set_longest_sync_ms(r.longest_sync_ms);
    c->set_longest_async_ms(r.longest_async_ms);
    c->set_longest_pre_barrier_ms(r.longest_pre_barrier_ms);
    c->set_longest_start_delay_ms(r.longest_start_delay_ms);
    c->set_metadata_ms(r.metadata_ms);
    c->set_failure_reason(r.failure_reason);
    c->set_acknowledged_tasks(r.acknowledged_tasks);
    c->set_expected_tasks(r.expected_tasks);
    if (r.trigger_fanout.has_value()) c->set_trigger_fanout_us(absl::ToInt64Microseconds(*r.trigger_fanout));
    if (r.notify_fanout.has_value()) {
      c->set_notify_fanout_us(absl::ToInt64Microseconds(*r.notify_fanout));
      c->set_coordinator_cpu_us(absl::ToInt64Microseconds(r.coordinator_cpu));
    }
  }
  return response;
}

}  // namespace weir::jobmanager
