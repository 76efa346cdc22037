#include "taskmanager/taskmanager.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/configuration.h"
#include "common/fs/file_system_registry.h"
#include "common/http/metric_families.h"
#include "common/logging/logging.h"
#include "common/process/code_pages.h"
#include "common/process/fault_injection.h"
#include "common/process/proc_status.h"
#include "common/random_id.h"
#include "common/retry/backoff.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "common/wire_limits.h"
#include "connectors/builtin.h"
#include "common/etcd/leader_retrieval.h"
#include "taskmanager/state/rocksdb_keyed_state.h"

namespace weir::taskmanager {

class TaskManager::Service final : public v1::TaskExecutorService::Service {
 public:
  explicit Service(TaskManager* tm) : tm_(tm) {}

  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetTaskManagerStatusRequest*,
                         v1::GetTaskManagerStatusResponse* response) override {
    WEIR_RPC_AUTHORIZE(context);
    *response->mutable_info() = tm_->info_;
    *response->mutable_slots() = tm_->slots_->Report();
    if (tm_->connection_) response->set_jobmanager_session_id(tm_->connection_->jobmanager_session_id());
    return grpc::Status::OK;
  }

  grpc::Status DeployTask(grpc::ServerContext* context, const v1::TaskDeploymentDescriptor* tdd,
                          v1::DeployTaskResponse*) override {
    WEIR_RPC_AUTHORIZE(context);
    if (absl::Status fenced = tm_->AdmitLeader(*context, "a deployment"); !fenced.ok()) {
      return rpc::ToGrpcStatus(fenced);
    }
    return rpc::ToGrpcStatus(tm_->Deploy(*tdd));
  }

  grpc::Status CancelJobTasks(grpc::ServerContext* context, const v1::CancelJobTasksRequest* request,
                              v1::CancelJobTasksResponse*) override {
    WEIR_RPC_AUTHORIZE(context);
    if (absl::Status fenced = tm_->AdmitLeader(*context, "a cancellation"); !fenced.ok()) {
      return rpc::ToGrpcStatus(fenced);
    }
    tm_->CancelJob(request->job_id(), request->attempt(), request->reason());
    return grpc::Status::OK;
  }

  grpc::Status TriggerCheckpoint(grpc::ServerContext* context, const v1::TriggerCheckpointRequest* request,
                                 v1::TriggerCheckpointResponse*) override {
    WEIR_RPC_AUTHORIZE(context);
    if (absl::Status fenced = tm_->AdmitLeader(*context, "a checkpoint trigger"); !fenced.ok()) {
      return rpc::ToGrpcStatus(fenced);
    }
    return rpc::ToGrpcStatus(tm_->TriggerCheckpoint(*request));
  }

  grpc::Status NotifyCheckpoint(grpc::ServerContext* context, const v1::NotifyCheckpointRequest* request,
                                v1::NotifyCheckpointResponse*) override {
    WEIR_RPC_AUTHORIZE(context);
    if (absl::Status fenced = tm_->AdmitLeader(*context, "a checkpoint notification"); !fenced.ok()) {
      return rpc::ToGrpcStatus(fenced);
    }
    tm_->NotifyCheckpoint(*request);
    return grpc::Status::OK;
  }

  grpc::Status DeployTasks(grpc::ServerContext* context, const v1::DeployTasksRequest* request,
                           v1::DeployTasksResponse* response) override {
    WEIR_RPC_AUTHORIZE(context);
    if (absl::Status fenced = tm_->AdmitLeader(*context, "a deployment"); !fenced.ok()) {
      return rpc::ToGrpcStatus(fenced);
    }
    if (absl::Status count = limits::CheckCount("tasks in one deployment", request->tasks_size(),
                                                limits::kMaxTasksPerJob);
        !count.ok()) {
      return rpc::ToGrpcStatus(count);
    }
    for (const v1::TaskDeploymentDescriptor& tdd : request->tasks()) {
      absl::Status deployed = tm_->Deploy(tdd);
      if (!deployed.ok()) {
        response->set_error_code(static_cast<int>(deployed.code()));
        response->set_error(std::string(deployed.message()));
        break;
      }
      response->set_deployed(response->deployed() + 1);
    }
    return grpc::Status::OK;
  }

  grpc::Status TriggerCheckpoints(grpc::ServerContext* context, const v1::TriggerCheckpointsRequest* request,
                                  v1::TriggerCheckpointsResponse* response) override {
    WEIR_RPC_AUTHORIZE(context);
    if (absl::Status fenced = tm_->AdmitLeader(*context, "a checkpoint trigger"); !fenced.ok()) {
      return rpc::ToGrpcStatus(fenced);
    }
    return rpc::ToGrpcStatus(tm_->TriggerCheckpoints(*request, response));
  }

 private:
  TaskManager* const tm_;
};

namespace {

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TaskManager>> TaskManager::Start(const config::Configuration& config) {
  namespace k = config::keys;
  std::unique_ptr<TaskManager> tm(new TaskManager());
  tm->log_ = logging::Get("taskmanager");
  tm->maintenance_tick_ms_ = absl::ToUnixMillis(absl::Now());  // alive from the start
  tm->release_code_pages_ = config.GetBool(k::kReleaseCodePages);
  if (const std::string drop = config.GetString(k::kTestDropFinalTaskReports); drop != "none") {
    tm->drop_final_reports_ = drop == "all" ? DropFinalReports::kAll : DropFinalReports::kStateReports;
    tm->log_->warn("TEST: this TaskManager drops the final state reports of its tasks{} "
                   "(test.drop-final-task-reports={}); never set it in production",
                   drop == "all" ? " and their final states in its metrics reports" : "", drop);
  }
  tm->slots_ = std::make_unique<SlotTable>(static_cast<int>(config.GetInt(k::kTaskManagerSlots)));
  tm->service_ = std::make_unique<Service>(tm.get());
  tm->partitions_ = std::make_unique<network::PartitionManager>();
  // The data exchange's threads are fixed in number, whatever the channels.
  auto network_threads = [&config](absl::string_view key, int slots) -> absl::StatusOr<int> {
    const int64_t configured = config.GetInt(key);
    if (configured == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " is 0; set it to at least 1, or to -1 for the number of slots (at most one per core)"));
    }
    if (configured > 0) return static_cast<int>(configured);
    return std::max(1, std::min(slots, static_cast<int>(std::thread::hardware_concurrency())));
  };
  ASSIGN_OR_RETURN(const int server_threads, network_threads(k::kNetworkServerThreads, tm->slots_->size()));
  ASSIGN_OR_RETURN(const int client_threads, network_threads(k::kNetworkClientThreads, tm->slots_->size()));
  network::DataExchangeServiceOptions exchange_options;
  exchange_options.max_waiting_streams = static_cast<int>(config.GetInt(k::kNetworkMaxWaitingSubscriptions));
  tm->data_exchange_ = std::make_unique<network::DataExchangeServiceImpl>(tm->partitions_.get(), exchange_options);
  tm->network_client_ = network::NetworkClient::Create(client_threads);

  std::string host = config.GetString(k::kTaskManagerHost);
  rpc::ServerOptions options;
  options.bind_host = config.GetString(k::kTaskManagerBindHost);
  if (options.bind_host.empty()) options.bind_host = host;
  options.port = static_cast<int>(config.GetInt(k::kTaskManagerRpcPort));
  RETURN_IF_ERROR(rpc::CheckExposure(
      options.bind_host, std::string(config.GetString(k::kTaskManagerBindHost).empty() ? k::kTaskManagerHost
                                                                                       : k::kTaskManagerBindHost)));
  options.services = {tm->service_.get(), tm->data_exchange_.get()};
  options.completion_queues = server_threads;
  // It receives deployments (a job's graph and handles) and subscriptions;
  // data buffers only leave it. Twice the JobManager's cap: a deployment
  // carries a submission's graph and a little more.
  options.max_receive_message_bytes = 2 * rpc::kControlPlaneMaxMessageBytes;
  // A bound on what gRPC holds for the endpoint in all (docs/operations.md,
  // "Bounds on the gRPC endpoints"). No bound on streams per connection:
  // every channel from another TaskManager is a stream of its one
  // connection to this one, as many as the jobs' parallelism makes, and a
  // gRPC client would queue those beyond a bound for as long as the
  // streams before them run, i.e. for ever.
  options.memory_quota_bytes = config.GetMemorySize(k::kTaskManagerRpcMemoryQuota);
  std::string id = config.GetString(k::kTaskManagerResourceId);
  tm->info_.set_taskmanager_id(id.empty() ? RandomId("tm-") : id);
  tm->info_.set_slots_total(tm->slots_->size());
  tm->info_.set_hostname(HostName());
  tm->info_.set_pid(getpid());
  tm->info_.set_version(kWeirVersion);

  ConnectionOptions connection;
  connection.jobmanager_address = rpc::JoinHostPort(config.GetString(k::kJobManagerRpcAddress),
                                                    static_cast<int>(config.GetInt(k::kJobManagerRpcPort)));
  if (config.GetString(k::kHaType) == "etcd") {
    // The leader's address from etcd before every registration; the
    // configured address is tried while etcd cannot be asked.
    ASSIGN_OR_RETURN(std::shared_ptr<etcd::EtcdLeaderRetrieval> retrieval,
                     etcd::EtcdLeaderRetrieval::FromConfig(config));
    connection.find_leader = [retrieval] { return retrieval->LeaderAddress(absl::Seconds(2)); };
    tm->log_->info("TaskManager {} finds the leading JobManager of cluster {} in etcd ({})", tm->id(),
                   retrieval->cluster_id(), config.GetString(k::kHaEtcdEndpoints));
  }
  auto jm_channel = rpc::CreateChannel(connection.jobmanager_address);
  {
    absl::MutexLock lock(&tm->job_master_mu_);
    tm->job_master_ = v1::JobMasterService::NewStub(jm_channel);
    tm->job_master_address_ = connection.jobmanager_address;
  }
  // io.tmp.dirs is a list, as in Flink; the first directory is used (an
  // empty list means /tmp).
  const std::vector<std::string> tmp_dirs = config::SplitPathList(config.GetString(k::kIoTmpDirs));
  const std::string tmp_dir = tmp_dirs.empty() ? std::string("/tmp") : tmp_dirs.front();
  // Job binaries come from the leader (any JobManager serves them; the
  // leader is the one known to be alive).
  tm->find_leader_ = connection.find_leader;
  tm->artifacts_ = std::make_unique<JobArtifacts>(absl::StrCat(tmp_dir, "/weir-", tm->id()),
                                                  [raw = tm.get()] { return raw->ArtifactServerNow(); },
                                                  config.GetMemorySize(k::kArtifactMaxSize));
  // Checkpoints and savepoints in an object store: the s3.* settings of
  // this TaskManager (its own keys, environment and files).
  fs::ConfigureFileSystems(config);
  tm->task_env_.taskmanager_id = tm->id();
  tm->task_env_.artifacts = tm->artifacts_.get();
  tm->task_env_.partitions = tm->partitions_.get();
  tm->task_env_.network = tm->network_client_;
  tm->task_env_.listener = tm.get();
  tm->uploader_ = std::make_unique<SnapshotUploader>([raw = tm.get()] { raw->SendAcknowledgements(); });
  tm->task_env_.uploader = tm->uploader_.get();
  tm->task_env_.checkpoint_responder = tm.get();
  tm->task_env_.buffers_per_channel = static_cast<int>(config.GetInt(k::kBuffersPerChannel));
  const int64_t max_buffers_per_channel = config.GetInt(k::kMaxBuffersPerChannel);
  tm->task_env_.max_buffers_per_channel = max_buffers_per_channel > 0 ? static_cast<int>(max_buffers_per_channel)
                                                                      : tm->task_env_.buffers_per_channel;
  tm->task_env_.segment_size = static_cast<int>(config.GetMemorySize(k::kSegmentSize));
  tm->task_env_.buffer_timeout = config.GetDuration(k::kBufferTimeout);
  tm->task_env_.watermark_interval = config.GetDuration(k::kAutoWatermarkInterval);
  tm->task_env_.event_time_stall_warning = config.GetDuration(k::kWatermarkStallWarning);
  tm->task_env_.max_parallelism = static_cast<int>(config.GetInt(k::kMaxParallelism));
  ASSIGN_OR_RETURN(const std::string connector_memory, connectors::DescribeConnectorMemory(config));
  tm->log_->info("{}", connector_memory);
  tm->task_env_.connectors =
      std::make_shared<const connectors::ConnectorRegistry>(connectors::BuiltinConnectors(config));
  tm->task_env_.state_backend = config.GetString(k::kStateBackendType);
  tm->cancel_timeout_ = config.GetDuration(k::kCancelTimeout);
  tm->task_env_.rocksdb_write_buffer_bytes = config.GetMemorySize(k::kRocksDbWriteBuffer);
  const std::vector<std::string> state_dirs = config::SplitPathList(config.GetString(k::kStateLocalRootDirs));
  std::string local_state =
      state_dirs.empty() ? absl::StrCat(tmp_dir, "/weir-state-", tm->id()) : state_dirs.front();
  ASSIGN_OR_RETURN(tm->local_state_, LocalStateDirectory::Acquire(local_state));
  tm->task_env_.local_state_dir = tm->local_state_->path();

  // Serve only once everything a call may reach is in place.
  auto started = rpc::StartServer(options);
  if (!started.ok()) return Annotate(started.status(), "starting the TaskManager's RPC server");
  tm->server_ = std::move(started->server);
  tm->data_exchange_->Start(std::move(started->completion_queues));
  tm->info_.set_address(rpc::JoinHostPort(host, started->port));
  http::HttpServerOptions http_options;
  http_options.name = "TaskManager HTTP";
  http_options.bind_host = options.bind_host;
  http_options.bind_key = "the address the TaskManager's RPCs bind";
  http_options.port = static_cast<int>(config.GetInt(k::kTaskManagerRestPort));
  RETURN_IF_ERROR(http::TlsFromConfig(config, &http_options));
  TaskManager* raw = tm.get();
  http_options.routes = {
      {.pattern = "/healthz", .handler = http::HealthHandler([raw] { return raw->Alive(); }), .probe = true},
      // Ready once registered with the JobManager (slots offered).
      {.pattern = "/readyz",
       .handler = http::ReadyHandler([raw] { return raw->Registered(); }, "not registered"),
       .probe = true},
      {.pattern = "/metrics", .handler = [raw](const http::Request&) {
         return http::Response{.content_type = http::kMetricsContentType, .body = raw->MetricsText()};
       }}};
  auto http = http::HttpServer::Start(std::move(http_options));
  if (!http.ok()) return Annotate(http.status(), "starting the TaskManager's HTTP endpoint (taskmanager.rest.port)");
  tm->http_ = *std::move(http);
  tm->info_.set_rest_port(tm->http_->port());
  tm->info_.set_rest_https(tm->http_->https());
  tm->log_->info("TaskManager {} listening on {} with {} slots ({} network server and {} client threads; gRPC "
                 "bounds: messages {} B, memory quota {} B, token checked {})",
                 tm->id(), rpc::JoinHostPort(options.bind_host, started->port), tm->slots_->size(), server_threads,
                 client_threads, options.max_receive_message_bytes, options.memory_quota_bytes,
                 rpc::AuthEnabled() ? "on every call's metadata" : "never (no token configured)");
  tm->maintenance_ = std::thread([raw = tm.get()] { raw->MaintenanceLoop(); });
  connection.heartbeat_interval = config.GetDuration(k::kHeartbeatInterval);
  connection.heartbeat_timeout = config.GetDuration(k::kHeartbeatTimeout);
  connection.initial_backoff = config.GetDuration(k::kRegistrationInitialTimeout);
  connection.max_backoff = config.GetDuration(k::kRegistrationMaxTimeout);
  SlotTable* slots = tm->slots_.get();
  ResourceManagerConnection::CheckpointMessageHandler on_checkpoint_message;
  if (config.GetBool(k::kCheckpointMessages)) {
    on_checkpoint_message = [raw = tm.get()](const v1::JobManagerMessage& message) {
      raw->OnCheckpointMessage(message);
    };
  }
  tm->connection_ = std::make_unique<ResourceManagerConnection>(
      std::move(connection), tm->info_, [slots] { return slots->Report(); },
      [raw = tm.get()](const std::string& session, int64_t epoch, const std::string& address) {
        raw->OnRegistered(session, epoch, address);
      },
      std::move(on_checkpoint_message));
  tm->connection_->Start();
  tm->probed_connection_ = tm->connection_.get();
  return tm;
}

TaskManager::~TaskManager() {
  Shutdown("shutdown");
  if (http_ != nullptr) http_->Stop();  // also when Start failed half-way
  StopRpcServer();
}

void TaskManager::StopRpcServer() {
  if (server_ == nullptr) return;
  data_exchange_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // The server's calls have ended: the data exchange's threads can stop.
  data_exchange_->Stop();
  server_.reset();
}

bool TaskManager::Alive() const {
  return absl::ToUnixMillis(absl::Now()) - maintenance_tick_ms_.load() < 30'000;
}

bool TaskManager::Registered() const {
  const ResourceManagerConnection* connection = probed_connection_.load();
  return connection != nullptr && !connection->jobmanager_session_id().empty();
}

void TaskManager::Shutdown(const std::string& reason) {
  // A TaskManager that failed to start has nothing to shut down.
  if (shut_down_ || connection_ == nullptr) return;
  shut_down_ = true;
  log_->info("TaskManager {} shutting down ({})", id(), reason);
  if (http_ != nullptr) http_->Stop();
  std::map<std::string, std::unique_ptr<Task>> tasks;
  {
    absl::MutexLock lock(&tasks_mu_);
    stopping_ = true;
    tasks.swap(tasks_);
  }
  for (auto& [id, task] : tasks) task->Cancel(reason);
  // A task stuck in user code would hold the process forever: past
  // task.cancellation.timeout it exits without it (systemd or Kubernetes
  // restarts it; its jobs restart elsewhere). 0: waits as long as it takes.
  const absl::Time deadline =
      cancel_timeout_ > absl::ZeroDuration() ? absl::Now() + cancel_timeout_ : absl::InfiniteFuture();
  std::vector<Task*> stuck;
  while (true) {
    stuck.clear();
    for (const auto& [id, task] : tasks) {
      if (!task->done()) stuck.push_back(task.get());
    }
    if (stuck.empty() || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (!stuck.empty()) ExitForStuckTasks(stuck);
  tasks.clear();  // joins the task threads
  uploader_->Stop();
  if (maintenance_.joinable()) maintenance_.join();
  connection_->Stop(reason);
  StopRpcServer();
  log_->info("TaskManager {} stopped", id());
}

absl::Status TaskManager::Deploy(const v1::TaskDeploymentDescriptor& tdd) {
  // The job id names a directory here: never take it on trust.
  if (!IsSafeId(tdd.job_id())) return absl::InvalidArgumentError(absl::StrCat("bad job id '", tdd.job_id(), "'"));
  if (tdd.slot_index() < 0 || tdd.slot_index() >= slots_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", tdd.slot_index(), " does not exist on TaskManager ", id()));
  }
  absl::MutexLock lock(&tasks_mu_);
  // Two attempts of one job never run side by side here: a task of an
  // earlier attempt still ending (canceled with the attempt, or when this
  // TaskManager registered anew) would read the same input as the new one
  // (an at-most-once source twice). Its end is no event under this lock:
  // looked at again every kEarlierAttemptPoll, up to kEarlierAttemptWait.
  auto earlier_ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tasks_mu_) {
    for (const auto& [task_id, task] : tasks_) {
      if (task->job_id() == tdd.job_id() && task->attempt() < tdd.attempt() && !task->done()) return false;
    }
    return true;
  };
  const absl::Time wait_until = absl::Now() + kEarlierAttemptWait;
  while (!earlier_ended() && !stopping_ && absl::Now() < wait_until) {
    tasks_mu_.AwaitWithTimeout(absl::Condition(&earlier_ended), kEarlierAttemptPoll);
  }
  if (!earlier_ended()) {
    return absl::UnavailableError(absl::StrCat("a task of an earlier attempt of job ", tdd.job_id(),
                                               " has not ended on TaskManager ", id(), " within ",
                                               absl::FormatDuration(kEarlierAttemptWait)));
  }
  if (stopping_) return absl::UnavailableError(absl::StrCat("TaskManager ", id(), " is shutting down"));
  if (tasks_.count(tdd.task_id()) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("task ", tdd.task_id(), " is already deployed"));
  }
  last_deploy_ = absl::Now();
  code_pages_due_ = true;
  setting_up_.insert(tdd.task_id());
  auto task = std::make_unique<Task>(tdd, task_env_);
  Task* raw = task.get();
  tasks_[tdd.task_id()] = std::move(task);
  UpdateSlotsLocked();
  raw->Start();
  return absl::OkStatus();
}

void TaskManager::CancelJob(const std::string& job_id, int attempt, const std::string& reason) {
  absl::MutexLock lock(&tasks_mu_);
  for (auto& [task_id, task] : tasks_) {
    if (task->job_id() == job_id && task->attempt() == attempt) task->Cancel(reason);
  }
}

absl::Status TaskManager::TriggerCheckpoint(const v1::TriggerCheckpointRequest& request) {
  absl::MutexLock lock(&tasks_mu_);
  auto it = tasks_.find(request.task_id());
  if (it == tasks_.end() || it->second->job_id() != request.job_id() || it->second->attempt() != request.attempt()) {
    return absl::NotFoundError(absl::StrCat("no task ", request.task_id(), " of job ", request.job_id(), " attempt ",
                                            request.attempt(), " runs on TaskManager ", id()));
  }
  return it->second->TriggerCheckpoint(request.checkpoint_id(), request.timestamp_unix_ms(), request.stop());
}

absl::Status TaskManager::TriggerCheckpoints(const v1::TriggerCheckpointsRequest& request,
                                             v1::TriggerCheckpointsResponse* response) {
  RETURN_IF_ERROR(limits::CheckCount("tasks in one checkpoint trigger", request.task_ids_size(),
                                     limits::kMaxTasksPerJob));
  absl::MutexLock lock(&tasks_mu_);
  for (const std::string& task_id : request.task_ids()) {
    auto it = tasks_.find(task_id);
    if (it == tasks_.end() || it->second->job_id() != request.job_id() ||
        it->second->attempt() != request.attempt() ||
        !it->second->TriggerCheckpoint(request.checkpoint_id(), request.timestamp_unix_ms(), request.stop()).ok()) {
      response->add_not_found_task_ids(task_id);
    }
  }
  return absl::OkStatus();
}

void TaskManager::NotifyCheckpoint(const v1::NotifyCheckpointRequest& request) {
  if (request.completed() && !request.finish_stop()) {
    fault::MaybeCrash(fault::Point::kTaskManagerBeforeCommit, request.checkpoint_id());
    if (fault::ShouldDrop(fault::Point::kTaskManagerDropNotify, request.checkpoint_id())) return;
  }
  absl::MutexLock lock(&tasks_mu_);
  for (auto& [task_id, task] : tasks_) {
    if (task->job_id() != request.job_id() || task->attempt() != request.attempt()) continue;
    if (request.finish_stop()) {
      task->FinishStop(request.checkpoint_id(), request.end_input());
    } else {
      task->NotifyCheckpoint(request.checkpoint_id(), request.completed());
    }
  }
}

void TaskManager::OnCheckpointMessage(const v1::JobManagerMessage& message) {
  if (message.has_notify_checkpoint()) {
    NotifyCheckpoint(message.notify_checkpoint());
    return;
  }
  if (!message.has_trigger_checkpoints()) return;
  const v1::TriggerCheckpointsRequest& request = message.trigger_checkpoints();
  v1::TriggerCheckpointsResponse response;
  if (absl::Status refused = TriggerCheckpoints(request, &response); !refused.ok()) {
    log_->warn("checkpoint {} of job {}: refusing its trigger: {}", request.checkpoint_id(), request.job_id(),
               refused.message());
    *response.mutable_not_found_task_ids() = request.task_ids();
  }
  if (response.not_found_task_ids_size() == 0) return;
  // One decline fails the checkpoint; more would only cost the maintenance
  // thread calls.
  const std::string& task_id = response.not_found_task_ids(0);
  v1::DeclineCheckpointRequest decline;
  decline.set_job_id(request.job_id());
  decline.set_attempt(request.attempt());
  decline.set_task_id(task_id);
  decline.set_checkpoint_id(request.checkpoint_id());
  decline.set_reason(absl::StrCat("triggering source task ", task_id, " at TaskManager ", id(),
                                  " failed: no such task runs there (any more)"));
  absl::MutexLock lock(&tasks_mu_);
  pending_declines_.push_back(std::move(decline));
}

namespace {

// The calls a TaskManager makes to the JobManager's JobMasterService
// (checkpoint messages, task states): up to `max_attempts` tries, 200 ms
// apart and doubling, each wait drawn from its upper half, since every
// TaskManager of a job sends these at the same moments (one checkpoint's
// acknowledgements) and a stalled JobManager would see them all come back
// together.
retry::RetryPolicy JobManagerCallPolicy(int max_attempts) {
  return {.backoff = {.initial = absl::Milliseconds(200), .multiplier = 2, .max = absl::Milliseconds(1600),
                      .jitter = 0.5},
          .max_attempts = max_attempts};
}

bool AnyError(const absl::Status&) { return true; }

// Sends a checkpoint message with a few retries: a lost acknowledgement
// costs the whole checkpoint.
template <typename Request, typename Call>
void SendWithRetries(const std::shared_ptr<spdlog::logger>& log, const Request& request, absl::string_view what,
                     Call call) {
  retry::Retry(
      JobManagerCallPolicy(3),
      [&] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        v1::CheckpointResponse response;
        grpc::Status status = call(&context, request, &response);
        if (!status.ok()) {
          log->warn("task {}: cannot send the {} of checkpoint {} to the JobManager: {}", request.task_id(), what,
                    request.checkpoint_id(), status.error_message());
        }
        return rpc::FromGrpcStatus(status);
      },
      AnyError);
}

}  // namespace

void TaskManager::Acknowledge(const v1::AcknowledgeCheckpointRequest& ack) {
  // Sent once the uploader has nothing else to do (SendAcknowledgements),
  // together with those of the other tasks whose snapshots were written
  // meanwhile: one call instead of one per task.
  pending_acks_.push_back(ack);
}

void TaskManager::SendAcknowledgements() {
  std::vector<v1::AcknowledgeCheckpointRequest> acks;
  acks.swap(pending_acks_);
  if (acks.empty()) return;
  if (!batched_acks_unsupported_) {
    // In pieces well below the JobManager's message limit.
    constexpr size_t kMaxBatchBytes = rpc::kControlPlaneMaxMessageBytes / 4;
    v1::AcknowledgeCheckpointsRequest batch;
    size_t batch_bytes = 0;
    size_t sent = 0;
    auto send = [&]() {
      if (batch.acks_size() == 0) return true;
      const absl::Time start = absl::Now();
      bool unimplemented = false;  // an older JobManager
      retry::Retry(
          JobManagerCallPolicy(3),
          [&] {
            grpc::ClientContext context;
            context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
            v1::CheckpointResponse response;
            grpc::Status status = JobMasterStub()->AcknowledgeCheckpoints(&context, batch, &response);
            if (status.ok()) {
              log_->debug("sent {} acknowledgements of checkpoint {} (task {} and others) in {} ms",
                          batch.acks_size(), batch.acks(0).checkpoint_id(), batch.acks(0).task_id(),
                          absl::ToInt64Milliseconds(absl::Now() - start));
            } else if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
              unimplemented = true;
            } else {
              log_->warn("cannot send {} acknowledgements of checkpoint {} (task {} and others) to the JobManager: {}",
                         batch.acks_size(), batch.acks(0).checkpoint_id(), batch.acks(0).task_id(),
                         status.error_message());
            }
            return rpc::FromGrpcStatus(status);
          },
          [&](const absl::Status&) { return !unimplemented; });
      if (unimplemented) return false;
      sent += batch.acks_size();
      batch.clear_acks();
      batch_bytes = 0;
      return true;
    };
    for (v1::AcknowledgeCheckpointRequest& ack : acks) {
      const size_t bytes = ack.ByteSizeLong();
      if (batch.acks_size() > 0 && batch_bytes + bytes > kMaxBatchBytes && !send()) break;
      batch_bytes += bytes;
      *batch.add_acks() = std::move(ack);
    }
    if (send()) return;
    batched_acks_unsupported_ = true;
    log_->info("the JobManager takes acknowledgements one by one (an older version); sending them so");
    // What was not sent, one by one below (the moved-from ones are in batch).
    std::vector<v1::AcknowledgeCheckpointRequest> rest(batch.acks().begin(), batch.acks().end());
    for (size_t i = sent + rest.size(); i < acks.size(); ++i) rest.push_back(std::move(acks[i]));
    acks.swap(rest);
  }
  for (const v1::AcknowledgeCheckpointRequest& ack : acks) {
    SendWithRetries(log_, ack, "acknowledgement", [this](grpc::ClientContext* c, const auto& r, auto* out) {
      return JobMasterStub()->AcknowledgeCheckpoint(c, r, out);
    });
  }
}

void TaskManager::Decline(const v1::DeclineCheckpointRequest& decline) {
  SendWithRetries(log_, decline, "decline", [this](grpc::ClientContext* c, const auto& r, auto* out) {
    return JobMasterStub()->DeclineCheckpoint(c, r, out);
  });
}

void TaskManager::UpdateSlotsLocked() {
  std::vector<std::string> jobs(slots_->size());
  for (const auto& [task_id, task] : tasks_) {
    if (task->slot_index() >= 0 && task->slot_index() < slots_->size()) jobs[task->slot_index()] = task->job_id();
  }
  slots_->SetOccupancy(jobs);
}

absl::Status TaskManager::AdmitLeader(const grpc::ServerContext& context, absl::string_view call) {
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(rpc::kLeaderEpochMetadata);
  absl::MutexLock lock(&tasks_mu_);
  if (found == metadata.end() && leader_epoch_ == 0) {
    // Registered with a JobManager of an older version, which has no epoch
    // to send (RegistrationAccepted said 0): nothing to fence with.
    return absl::OkStatus();
  }
  int64_t epoch = -1;
  if (found == metadata.end() ||
      !absl::SimpleAtoi(absl::string_view(found->second.data(), found->second.size()), &epoch) || epoch < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, " refused: it carries no valid leader epoch (metadata ", rpc::kLeaderEpochMetadata,
        "), and this TaskManager follows epoch ", leader_epoch_,
        "; only a JobManager makes this call, and every JobManager since epochs exist sends its own"));
  }
  if (epoch < leader_epoch_) {
    if (int64_t suppressed = 0; fence_log_limiter_.ShouldLog(&suppressed)) {
      log_->warn("refused {} from a JobManager with leader epoch {}: this TaskManager follows leader epoch {}, a "
                 "later JobManager ({} similar refusals suppressed)",
                 call, epoch, leader_epoch_, suppressed);
    }
    return absl::FailedPreconditionError(
        absl::StrCat(call, " refused: it comes from leader epoch ", epoch, ", and this TaskManager follows epoch ",
                     leader_epoch_, " (a later JobManager leads; this one was deposed)"));
  }
  leader_epoch_ = epoch;
  return absl::OkStatus();
}

ArtifactServer TaskManager::ArtifactServerNow() {
  std::string address;
  if (find_leader_) {
    absl::StatusOr<std::string> leader = find_leader_();
    if (leader.ok()) address = *std::move(leader);
  }
  absl::MutexLock lock(&job_master_mu_);
  if (address.empty()) address = job_master_address_;
  if (artifact_server_ == nullptr || address != artifact_server_address_) {
    artifact_server_ = v1::ArtifactService::NewStub(rpc::CreateChannel(address));
    artifact_server_address_ = address;
  }
  return ArtifactServer{address, artifact_server_};
}

std::shared_ptr<v1::JobMasterService::Stub> TaskManager::JobMasterStub() const {
  absl::MutexLock lock(&job_master_mu_);
  return job_master_;
}

void TaskManager::OnRegistered(const std::string& jobmanager_session_id, int64_t leader_epoch,
                               const std::string& jobmanager_address) {
  {
    absl::MutexLock lock(&job_master_mu_);
    if (jobmanager_address != job_master_address_) {
      log_->info("TaskManager {}: task reports go to the JobManager at {} from now on (was {})", id(),
                 jobmanager_address, job_master_address_);
      job_master_ = v1::JobMasterService::NewStub(rpc::CreateChannel(jobmanager_address));
      job_master_address_ = jobmanager_address;
    }
  }
  absl::MutexLock lock(&tasks_mu_);
  if (leader_epoch < leader_epoch_) {
    log_->warn("JobManager {} has leader epoch {}, below the {} this TaskManager followed; following it (its "
               "high-availability.storageDir is not the one before, or was reset)",
               jobmanager_session_id, leader_epoch, leader_epoch_);
  }
  leader_epoch_ = leader_epoch;
  // Between two registrations the JobManager declared us lost, or it
  // restarted (and resumes its jobs with new attempts): either way no task
  // of an earlier attempt may go on unsupervised.
  if (!jobmanager_session_.empty()) {
    for (auto& [task_id, task] : tasks_) {
      task->Cancel(absl::StrCat("this TaskManager registered anew with JobManager ", jobmanager_session_id,
                                ", which runs the job with a new attempt if it goes on"));
    }
  }
  jobmanager_session_ = jobmanager_session_id;
  batched_acks_unsupported_ = false;
}

void TaskManager::OnTaskState(const v1::TaskStateUpdate& update) {
  bool set_up = false;
  {
    absl::MutexLock lock(&tasks_mu_);
    set_up = setting_up_.erase(update.task_id()) > 0 && setting_up_.empty() && release_code_pages_ && !stopping_;
    if (set_up) {
      code_pages_follow_up_ = absl::Now() + kCodePagesFollowUp;
      follow_up_new_ = true;
    }
  }
  if (set_up) ReleaseCodePages("once the deployed tasks were set up");
  const bool terminal = update.state() == v1::TASK_FINISHED || update.state() == v1::TASK_FAILED ||
                        update.state() == v1::TASK_CANCELED;
  if (terminal && drop_final_reports_ != DropFinalReports::kNone) {
    log_->warn("TEST: dropping the final state report ({}) of task {} (test.drop-final-task-reports)",
               v1::TaskState_Name(update.state()), update.task_id());
    return;
  }
  bool stopping = false;
  {
    absl::MutexLock lock(&tasks_mu_);
    stopping = stopping_;
  }
  // While shutting down, one try: the JobManager may be gone for good.
  retry::Retry(
      JobManagerCallPolicy(stopping ? 1 : 5),
      [&] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1::TaskStateUpdateResponse response;
        grpc::Status status = JobMasterStub()->UpdateTaskState(&context, update, &response);
        if (!status.ok()) {
          log_->warn("task {}: cannot report state {} to the JobManager: {}", update.task_id(),
                     v1::TaskState_Name(update.state()), status.error_message());
        }
        return rpc::FromGrpcStatus(status);
      },
      AnyError);
}

void TaskManager::SweepLocalRecovery() {
  // A running subtask renames a new copy into its directory at every
  // checkpoint; one untouched this long belongs to a subtask that moved,
  // or to a job that ended.
  constexpr auto kLocalRecoveryKeep = std::chrono::minutes(10);
  namespace fs = std::filesystem;
  const fs::path root = fs::path(local_state_->path()) / kLocalRecoveryDirName;
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (fs::directory_iterator job(root, ec), end; !ec && job != end; job.increment(ec)) {
    bool any_left = false;
    std::error_code inner;
    for (fs::directory_iterator copy(job->path(), inner); !inner && copy != end; copy.increment(inner)) {
      std::error_code time_ec;
      const auto modified = fs::last_write_time(copy->path(), time_ec);
      if (time_ec || now - modified < kLocalRecoveryKeep) {
        any_left = true;
        continue;
      }
      std::error_code remove_ec;
      fs::remove_all(copy->path(), remove_ec);
      log_->info("local recovery copy {} deleted (unused for {} min)", copy->path().string(),
                 std::chrono::duration_cast<std::chrono::minutes>(kLocalRecoveryKeep).count());
    }
    if (!any_left && !inner) {
      std::error_code remove_ec;
      fs::remove(job->path(), remove_ec);  // only if empty
    }
  }
}

std::string TaskManager::MetricsText() {
  http::MetricFamilies out;
  const v1::SlotReport slots = slots_->Report();
  out.Gauge("weir_taskmanager_slots", "Task slots this TaskManager offers.", {}, slots.slots_total());
  out.Gauge("weir_taskmanager_slots_free", "Task slots of this TaskManager no job holds.", {}, slots.slots_free());
  out.Gauge("weir_taskmanager_registered", "1 while registered with the JobManager, else 0.", {},
            Registered() ? 1 : 0);
  out.Gauge("weir_taskmanager_network_threads", "Threads of the data exchange, by side.", {{"side", "server"}},
            data_exchange_->network_threads());
  out.Gauge("weir_taskmanager_network_threads", "Threads of the data exchange, by side.", {{"side", "client"}},
            network_client_->threads());
  out.Gauge("weir_taskmanager_network_streams_served",
            "Streams other TaskManagers' input channels have open to this TaskManager.", {},
            data_exchange_->active_streams());
  out.Gauge("weir_taskmanager_network_streams_waiting",
            "Of those, the ones waiting for their subscription or their partition "
            "(at most taskmanager.network.max-waiting-subscriptions).",
            {}, data_exchange_->waiting_streams());
  out.Gauge("weir_taskmanager_network_connections", "TaskManagers this one has a data connection to.", {},
            network_client_->connections());
  absl::MutexLock lock(&tasks_mu_);
  out.Gauge("weir_taskmanager_tasks", "Tasks this TaskManager runs (or has not yet reaped).", {}, tasks_.size());
  for (const auto& [task_id, task] : tasks_) {
    const v1::TaskMetrics m = task->Metrics();
    const http::MetricLabels labels = {{"job_id", task->job_id()},
                                       {"task", task->name()},
                                       {"subtask", absl::StrCat(task->subtask_index())},
                                       {"attempt", absl::StrCat(task->attempt())}};
    out.Counter("weir_task_records_in_total", "Records the task took in.", labels, m.records_in());
    out.Counter("weir_task_records_out_total", "Records the task emitted.", labels, m.records_out());
    out.Counter("weir_task_backpressured_seconds_total",
                "Time the task spent blocked on full output buffers; its rate is the fraction of time "
                "backpressured.",
                labels, m.backpressured_ms() / 1000.0);
    if (m.has_watermark_ms()) {
      out.Gauge("weir_task_watermark_ms", "Event time the task reached: the highest watermark through its chain "
                "(Unix ms; the end of event time is 9223372036854775807).", labels,
                static_cast<double>(m.watermark_ms()));
    }
    task->operator_metrics().Export(out, labels);
  }
  return out.Text();
}

void TaskManager::WatchCancelledTasksLocked() {
  if (cancel_timeout_ <= absl::ZeroDuration()) return;
  const absl::Time now = absl::Now();
  std::vector<Task*> stuck;
  std::set<std::string> still_ending;
  for (const auto& [task_id, task] : tasks_) {
    const std::optional<absl::Time> since = task->cancel_requested_at();
    if (!since.has_value() || task->done()) continue;
    still_ending.insert(task_id);
    const absl::Duration waited = now - *since;
    if (waited >= cancel_timeout_) {
      stuck.push_back(task.get());
    } else if (waited >= cancel_timeout_ / 2 && warned_slow_cancel_.insert(task_id).second) {
      log_->warn("TaskManager {}: task {} ({}) has not ended {} after its cancellation; its user code may not "
                 "return. At task.cancellation.timeout ({}) this TaskManager exits so that it is restarted",
                 id(), task_id, task->name(), config::FormatDuration(absl::Trunc(waited, absl::Seconds(1))),
                 config::FormatDuration(cancel_timeout_));
    }
  }
  std::erase_if(warned_slow_cancel_, [&](const std::string& id) { return !still_ending.contains(id); });
  if (!stuck.empty()) ExitForStuckTasks(stuck);
}

void TaskManager::ExitForStuckTasks(const std::vector<Task*>& stuck) {
  // Where each one hangs, for whoever reads the log: its thread's backtrace.
  std::vector<std::string> names;
  for (Task* task : stuck) {
    const bool written = task->WriteThreadBacktrace();
    names.push_back(absl::StrCat(task->task_id(), " (", task->name(), written ? "" : "; no backtrace", ")"));
  }
  log_->error("TaskManager {}: tasks {} did not stop within task.cancellation.timeout ({}) after they were "
              "cancelled: their user code does not return (backtraces above). Exiting (code 1) so that "
              "systemd or Kubernetes restarts this TaskManager; its jobs restart from their last checkpoint",
              id(), absl::StrJoin(names, ", "), config::FormatDuration(cancel_timeout_));
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& logger) { logger->flush(); });
  std::fflush(nullptr);
  std::_Exit(1);
}

void TaskManager::ReleaseCodePages(absl::string_view when) {
  absl::StatusOr<process::ReleasedCodePages> released = process::ReleaseCodePages();
  if (!released.ok()) {
    log_->warn("TaskManager {}: cannot release code pages from the resident set "
               "(taskmanager.memory.release-code-pages): {}",
               id(), released.status().message());
    return;
  }
  log_->info("TaskManager {}: released the code pages of {} objects ({} MiB of address space) {}; "
             "file-backed resident {:.1f} -> {:.1f} MiB, resident {:.1f} MiB",
             id(), released->objects, released->bytes_advised >> 20, when, released->rss_file_before_kib / 1024.0,
             released->rss_file_after_kib / 1024.0, process::ProcStatusField(0, "VmRSS") / 1024.0);
}

void TaskManager::MaintenanceLoop() {
  while (true) {
    maintenance_tick_ms_ = absl::ToUnixMillis(absl::Now());
    std::vector<std::unique_ptr<Task>> finished;
    v1::ReportTaskMetricsRequest report;
    report.set_taskmanager_id(id());
    std::vector<v1::DeclineCheckpointRequest> declines;
    bool release_code_pages = false;
    bool follow_up = false;
    {
      absl::MutexLock lock(&tasks_mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tasks_mu_) {
        return stopping_ || !pending_declines_.empty() || follow_up_new_;
      };
      const absl::Duration wait =
          std::clamp(code_pages_follow_up_ - absl::Now(), absl::ZeroDuration(), absl::Seconds(1));
      tasks_mu_.AwaitWithTimeout(absl::Condition(&wake), wait);
      if (stopping_) return;
      declines.swap(pending_declines_);
      if (follow_up_new_) {
        follow_up_new_ = false;
        if (declines.empty()) continue;  // only to take the new time
      }
      if (absl::Now() >= code_pages_follow_up_) {
        code_pages_follow_up_ = absl::InfiniteFuture();
        follow_up = true;
      }
    }
    if (follow_up) {
      ReleaseCodePages(absl::StrCat(config::FormatDuration(kCodePagesFollowUp),
                                    " after the deployed tasks were set up (their clients opened)"));
    }
    for (const v1::DeclineCheckpointRequest& decline : declines) Decline(decline);
    {
      absl::MutexLock lock(&tasks_mu_);
      for (auto it = tasks_.begin(); it != tasks_.end();) {
        // Done before Metrics: then the metrics carry its final state.
        const bool done = it->second->done();
        if (done) {
          // Reported until a report with it was delivered.
          unconfirmed_endings_[it->first] = {it->second->Metrics(), 0};
          finished.push_back(std::move(it->second));
          it = tasks_.erase(it);
        } else {
          *report.add_tasks() = it->second->Metrics();
          ++it;
        }
      }
      UpdateSlotsLocked();
      WatchCancelledTasksLocked();
      release_code_pages = release_code_pages_ && code_pages_due_ && absl::Now() - last_deploy_ >= kCodePagesQuietPeriod;
      if (release_code_pages) code_pages_due_ = false;
    }
    if (release_code_pages) {
      ReleaseCodePages(absl::StrCat("after ", config::FormatDuration(kCodePagesQuietPeriod),
                                    " without deployments"));
    }
    for (const auto& [task_id, ending] : unconfirmed_endings_) *report.add_tasks() = ending.first;
    if (drop_final_reports_ == DropFinalReports::kAll) {
      for (v1::TaskMetrics& metrics : *report.mutable_tasks()) {
        metrics.clear_final_state();
        metrics.clear_error();
        metrics.clear_unrecoverable();
      }
    }
    finished.clear();  // joins
    if (absl::Now() - last_sweep_ > absl::Seconds(30)) {
      SweepLocalRecovery();
      last_sweep_ = absl::Now();
    }
    {  // also when empty: the JobManager reconciles against it
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      v1::TaskStateUpdateResponse response;
      if (JobMasterStub()->ReportTaskMetrics(&context, report, &response).ok()) {
        unconfirmed_endings_.clear();
      } else {
        for (auto it = unconfirmed_endings_.begin(); it != unconfirmed_endings_.end();) {
          if (++it->second.second >= kEndingReportTries) {
            log_->warn("task {}: how it ended ({}) could not be reported to the JobManager in {} tries; giving up",
                       it->first, v1::TaskState_Name(it->second.first.final_state()), kEndingReportTries);
            it = unconfirmed_endings_.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
  }
}

}  // namespace weir::taskmanager
