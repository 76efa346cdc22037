#include "jobmanager/job_master.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "common/wire_limits.h"

namespace weir::jobmanager {

bool IsTerminal(v1::TaskState state) {
  return state == v1::TASK_FINISHED || state == v1::TASK_CANCELED || state == v1::TASK_FAILED;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::FINISHED || state == v1::CANCELED || state == v1::FAILED;
}

JobMaster::JobMaster(std::string job_id, v1::SubmitJobRequest request, ExecutionGraph graph,
                     std::vector<SlotAssignment> slots, int max_parallelism, absl::Duration cancel_timeout,
                     TerminalCallback on_terminal)
    : job_id_(std::move(job_id)),
      request_(std::move(request)),
      graph_(std::move(graph)),
      max_parallelism_(max_parallelism),
      cancel_timeout_(cancel_timeout),
      on_terminal_(std::move(on_terminal)),
      submitted_at_(absl::Now()),
      log_(logging::Get("jobmaster")) {
  absl::MutexLock lock(&mu_);
  for (const Chain& chain : graph_.chains) {
    for (int s = 0; s < chain.parallelism; ++s) {
      TaskRecord task;
      task.task_id = ExecutionGraph::TaskId(job_id_, 1, chain.index, s);
      task.chain = chain.index;
      task.subtask = s;
      task.slot = slots.at(s);
      tasks_.push_back(std::move(task));
    }
  }
}

JobMaster::~JobMaster() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void JobMaster::Start() { worker_ = std::thread([this] { Run(); }); }

std::string JobMaster::TaskLabel(const TaskRecord& task) const {
  const Chain& chain = graph_.chains[task.chain];
  return absl::StrCat("'", chain.name, "' (", task.subtask + 1, "/", chain.parallelism, ") on TaskManager ",
                      task.slot.taskmanager_id);
}

JobMaster::TaskRecord* JobMaster::FindTaskLocked(const std::string& task_id) {
  for (TaskRecord& t : tasks_) {
    if (t.task_id == task_id) return &t;
  }
  return nullptr;
}

bool JobMaster::AllTasksTerminalLocked() const {
  for (const TaskRecord& t : tasks_) {
    if (!IsTerminal(t.state)) return false;
  }
  return true;
}

void JobMaster::FailLocked(const std::string& error) {
  if (state_ == v1::FAILING || state_ == v1::CANCELING || IsTerminal(state_)) return;
  log_->warn("job {} failing: {}", job_id_, error);
  state_ = v1::FAILING;
  error_ = error;
  cancel_requested_ = true;
  cancel_reason_ = absl::StrCat("job failing: ", error);
}

std::shared_ptr<v1::TaskExecutorService::Stub> JobMaster::StubFor(const std::string& address) {
  absl::MutexLock lock(&stubs_mu_);
  auto& stub = stubs_[address];
  if (stub == nullptr) stub = v1::TaskExecutorService::NewStub(rpc::CreateChannel(address));
  return stub;
}

v1::TaskDeploymentDescriptor JobMaster::Describe(const TaskRecord& task) const {
  const Chain& chain = graph_.chains[task.chain];
  const v1::JobGraphSpec& spec = graph_.spec;
  v1::TaskDeploymentDescriptor tdd;
  tdd.set_job_id(job_id_);
  tdd.set_attempt(1);
  tdd.set_task_id(task.task_id);
  for (int v : chain.vertices) tdd.add_vertex_ids(v);
  tdd.set_subtask_index(task.subtask);
  tdd.set_parallelism(chain.parallelism);
  tdd.set_artifact_sha256(request_.artifact_sha256());
  *tdd.mutable_args() = request_.args();
  *tdd.mutable_config() = request_.config();
  *tdd.mutable_graph() = spec;
  tdd.set_slot_index(task.slot.slot_index);
  tdd.set_max_parallelism(max_parallelism_);
  for (int v = 0; v < spec.vertices_size(); ++v) (*tdd.mutable_vertex_parallelism())[v] = graph_.vertex_parallelism[v];
  tdd.set_input_vertex(-1);
  if (chain.input_edge >= 0) {
    const int e = chain.input_edge;
    const int producer_vertex = spec.edges(e).source();
    const int producer_chain = graph_.chain_of_vertex[producer_vertex];
    tdd.set_input_vertex(producer_vertex);
    const bool forward = graph_.EffectivePartitioning(e) == v1::FORWARD;
    for (const TaskRecord& producer : tasks_) {
      if (producer.chain != producer_chain) continue;
      if (forward && producer.subtask != task.subtask) continue;
      v1::InputChannelSpec* in = tdd.add_inputs();
      in->set_partition_id(ExecutionGraph::PartitionId(job_id_, 1, producer_chain, producer.subtask, e));
      in->set_subpartition(task.subtask);
      in->set_producer_address(producer.slot.address);
      in->set_local(producer.slot.taskmanager_id == task.slot.taskmanager_id);
    }
  }
  for (int e : chain.output_edges) {
    const int target = spec.edges(e).target();
    v1::OutputSpec* out = tdd.add_outputs();
    out->set_partition_id(ExecutionGraph::PartitionId(job_id_, 1, task.chain, task.subtask, e));
    out->set_target_vertex(target);
    out->set_partitioning(graph_.EffectivePartitioning(e));
    out->set_num_subpartitions(graph_.vertex_parallelism[target]);
  }
  return tdd;
}

absl::Status JobMaster::DeployAll() {
  std::vector<std::pair<std::string, v1::TaskDeploymentDescriptor>> deployments;
  std::vector<std::string> labels;
  {
    absl::MutexLock lock(&mu_);
    for (TaskRecord& task : tasks_) {
      task.state = v1::TASK_DEPLOYING;
      deployments.emplace_back(task.slot.address, Describe(task));
      labels.push_back(TaskLabel(task));
    }
  }
  for (size_t i = 0; i < deployments.size(); ++i) {
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      stop = cancel_requested_ || shutting_down_;
    }
    if (stop) {
      MarkUndeployed(i);
      return absl::OkStatus();
    }
    const auto& [address, tdd] = deployments[i];
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::DeployTaskResponse response;
    grpc::Status status = StubFor(address)->DeployTask(&context, tdd, &response);
    if (!status.ok()) {
      MarkUndeployed(i);
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat("deploying task ", labels[i], " at ", address, ": ", status.error_message()));
    }
    log_->info("job {}: deployed task {} {} to {} slot {}", job_id_, tdd.task_id(), labels[i], address,
               tdd.slot_index());
  }
  return absl::OkStatus();
}

void JobMaster::MarkUndeployed(size_t first) {
  // Tasks no TaskManager has (or that failed to deploy) will never report:
  // they are done as far as this job is concerned.
  absl::MutexLock lock(&mu_);
  for (size_t i = first; i < tasks_.size(); ++i) {
    if (tasks_[i].state == v1::TASK_DEPLOYING) tasks_[i].state = v1::TASK_CANCELED;
  }
}

void JobMaster::CancelTasksOnTaskManagers(const std::string& reason) {
  std::set<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    for (const TaskRecord& t : tasks_) {
      if (!IsTerminal(t.state)) addresses.insert(t.slot.address);
    }
  }
  for (const std::string& address : addresses) {
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) return;
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::CancelJobTasksRequest request;
    request.set_job_id(job_id_);
    request.set_attempt(1);
    request.set_reason(reason);
    v1::CancelJobTasksResponse response;
    grpc::Status status = StubFor(address)->CancelJobTasks(&context, request, &response);
    if (!status.ok()) {
      log_->warn("job {}: cannot cancel its tasks at {}: {}", job_id_, address, status.error_message());
    }
  }
}

void JobMaster::Run() {
  size_t num_tasks = 0;
  {
    absl::MutexLock lock(&mu_);
    num_tasks = tasks_.size();
  }
  log_->info("job {} '{}' starting: {} tasks in {} slots", job_id_, graph_.spec.name(), num_tasks,
             graph_.slots_needed);
  absl::Status deployed = DeployAll();
  {
    absl::MutexLock lock(&mu_);
    if (!deployed.ok()) {
      FailLocked(std::string(deployed.message()));
    } else if (state_ == v1::CREATED) {
      state_ = v1::RUNNING;
      log_->info("job {} RUNNING", job_id_);
    }
  }
  bool cancel_sent = false;
  absl::Time cancel_deadline = absl::InfiniteFuture();
  v1::JobState final_state = v1::FAILED;
  while (true) {
    std::string reason;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutting_down_ || AllTasksTerminalLocked() || (cancel_requested_ && !cancel_sent);
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Seconds(1));
      if (shutting_down_) return;
      if (AllTasksTerminalLocked()) {
        bool all_finished = true;
        for (const TaskRecord& t : tasks_) all_finished = all_finished && t.state == v1::TASK_FINISHED;
        if (state_ == v1::CANCELING) {
          final_state = v1::CANCELED;
        } else if (state_ == v1::FAILING || !all_finished) {
          final_state = v1::FAILED;
          if (error_.empty()) error_ = "tasks ended without finishing";
        } else {
          final_state = v1::FINISHED;
        }
        state_ = final_state;
        ended_at_ = absl::Now();
        break;
      }
      if (cancel_sent && absl::Now() > cancel_deadline) {
        for (TaskRecord& t : tasks_) {
          if (IsTerminal(t.state)) continue;
          log_->warn("job {}: task {} did not acknowledge cancellation within {}; declaring it canceled", job_id_,
                     TaskLabel(t), absl::FormatDuration(cancel_timeout_));
          t.state = v1::TASK_CANCELED;
        }
        continue;
      }
      if (!cancel_requested_ || cancel_sent) continue;
      reason = cancel_reason_;
    }
    CancelTasksOnTaskManagers(reason);
    cancel_sent = true;
    cancel_deadline = absl::Now() + cancel_timeout_;
  }
  {
    absl::MutexLock lock(&mu_);
    if (final_state == v1::FAILED) {
      log_->error("job {} FAILED: {}", job_id_, error_);
    } else {
      log_->info("job {} {}", job_id_, v1::JobState_Name(final_state));
    }
  }
  on_terminal_(job_id_, final_state);
}

void JobMaster::OnTaskStateUpdate(const v1::TaskStateUpdate& update) {
  absl::MutexLock lock(&mu_);
  TaskRecord* task = FindTaskLocked(update.task_id());
  if (task == nullptr || IsTerminal(task->state)) return;
  task->state = update.state();
  task->records_in = std::max(task->records_in, update.records_in());
  task->records_out = std::max(task->records_out, update.records_out());
  if (update.state() == v1::TASK_FAILED) {
    // Error text from the wire is cut, not trusted to be small.
    task->error = update.error().substr(0, limits::kMaxErrorLength);
    log_->warn("job {}: task {} {} failed: {}", job_id_, task->task_id, TaskLabel(*task), task->error);
    FailLocked(absl::StrCat("task ", TaskLabel(*task), " failed: ", task->error));
  } else if (update.state() == v1::TASK_CANCELED && state_ != v1::CANCELING && state_ != v1::FAILING) {
    // Nobody here asked for it: its TaskManager stopped it (e.g. shutting down).
    log_->warn("job {}: task {} {} was canceled by its TaskManager", job_id_, task->task_id, TaskLabel(*task));
    FailLocked(absl::StrCat("task ", TaskLabel(*task), " was canceled by its TaskManager (stopped or restarted)"));
  } else {
    log_->info("job {}: task {} {} is {}", job_id_, task->task_id, TaskLabel(*task),
               v1::TaskState_Name(update.state()));
  }
}

void JobMaster::OnTaskMetrics(const v1::TaskMetrics& metrics) {
  absl::MutexLock lock(&mu_);
  TaskRecord* task = FindTaskLocked(metrics.task_id());
  if (task == nullptr) return;
  task->records_in = std::max(task->records_in, metrics.records_in());
  task->records_out = std::max(task->records_out, metrics.records_out());
}

void JobMaster::OnTaskManagerLost(const v1::TaskManagerInfo& info, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (IsTerminal(state_)) return;
  std::string first;
  for (TaskRecord& t : tasks_) {
    if (t.slot.taskmanager_id != info.taskmanager_id() || IsTerminal(t.state)) continue;
    t.state = v1::TASK_FAILED;
    t.error = absl::StrCat("TaskManager ", info.taskmanager_id(), " at ", info.address(), " lost: ", reason);
    if (first.empty()) first = TaskLabel(t);
  }
  if (first.empty()) return;
  FailLocked(absl::StrCat("TaskManager ", info.taskmanager_id(), " at ", info.address(), " lost (", reason,
                          ") while running task ", first,
                          "; if its process died, its log says why (e.g. a crash in user code)"));
}

absl::Status JobMaster::Cancel() {
  absl::MutexLock lock(&mu_);
  if (IsTerminal(state_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id_, " has already ended: ", v1::JobState_Name(state_)));
  }
  // A failing job is already being stopped; it must end FAILED, not CANCELED.
  if (state_ == v1::CANCELING || state_ == v1::FAILING) return absl::OkStatus();
  log_->info("job {} CANCELING (requested by a client)", job_id_);
  state_ = v1::CANCELING;
  cancel_requested_ = true;
  cancel_reason_ = "canceled by a client";
  return absl::OkStatus();
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
    ts->set_error(t.error);
  }
  return status;
}

}  // namespace weir::jobmanager
