#include "taskmanager/taskmanager.h"

#include <unistd.h>

#include <random>

#include "absl/strings/str_format.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "common/version.h"

namespace weir::taskmanager {

class TaskManager::Service final : public v1::TaskExecutorService::Service {
 public:
  explicit Service(TaskManager* tm) : tm_(tm) {}

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetTaskManagerStatusRequest*,
                         v1::GetTaskManagerStatusResponse* response) override {
    *response->mutable_info() = tm_->info_;
    *response->mutable_slots() = tm_->slots_->Report();
    if (tm_->connection_) response->set_jobmanager_session_id(tm_->connection_->jobmanager_session_id());
    return grpc::Status::OK;
  }

 private:
  TaskManager* const tm_;
};

namespace {

std::string NewResourceId() {
  std::random_device rd;
  return absl::StrFormat("tm-%08x", rd());
}

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
  tm->slots_ = std::make_unique<SlotTable>(static_cast<int>(config.GetInt(k::kTaskManagerSlots)));
  tm->service_ = std::make_unique<Service>(tm.get());

  std::string host = config.GetString(k::kTaskManagerHost);
  rpc::ServerOptions options;
  options.bind_host = config.GetString(k::kTaskManagerBindHost);
  if (options.bind_host.empty()) options.bind_host = host;
  options.port = static_cast<int>(config.GetInt(k::kTaskManagerRpcPort));
  options.services = {tm->service_.get()};
  auto started = rpc::StartServer(options);
  if (!started.ok()) return Annotate(started.status(), "starting the TaskManager's RPC server");
  tm->server_ = std::move(started->server);

  std::string id = config.GetString(k::kTaskManagerResourceId);
  tm->info_.set_taskmanager_id(id.empty() ? NewResourceId() : id);
  tm->info_.set_address(rpc::JoinHostPort(host, started->port));
  tm->info_.set_slots_total(tm->slots_->size());
  tm->info_.set_hostname(HostName());
  tm->info_.set_pid(getpid());
  tm->info_.set_version(kWeirVersion);
  tm->log_->info("TaskManager {} listening on {} with {} slots", tm->id(),
                 rpc::JoinHostPort(options.bind_host, started->port), tm->slots_->size());

  ConnectionOptions connection;
  connection.jobmanager_address = rpc::JoinHostPort(config.GetString(k::kJobManagerRpcAddress),
                                                    static_cast<int>(config.GetInt(k::kJobManagerRpcPort)));
  connection.heartbeat_interval = config.GetDuration(k::kHeartbeatInterval);
  connection.heartbeat_timeout = config.GetDuration(k::kHeartbeatTimeout);
  connection.initial_backoff = config.GetDuration(k::kRegistrationInitialTimeout);
  connection.max_backoff = config.GetDuration(k::kRegistrationMaxTimeout);
  SlotTable* slots = tm->slots_.get();
  tm->connection_ = std::make_unique<ResourceManagerConnection>(std::move(connection), tm->info_,
                                                                [slots] { return slots->Report(); });
  tm->connection_->Start();
  return tm;
}

TaskManager::~TaskManager() { Shutdown("shutdown"); }

void TaskManager::Shutdown(const std::string& reason) {
  // A TaskManager that failed to start has nothing to shut down.
  if (shut_down_ || connection_ == nullptr) return;
  shut_down_ = true;
  log_->info("TaskManager {} shutting down ({})", id(), reason);
  connection_->Stop(reason);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  log_->info("TaskManager {} stopped", id());
}

}  // namespace weir::taskmanager
