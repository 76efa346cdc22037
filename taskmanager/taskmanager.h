// TaskManager: the process-level object of weir-taskmanager. Owns the slots,
// the gRPC server other processes call (TaskExecutorService), and the
// connection that keeps it registered with the JobManager. Task threads, the
// network stack and the state backend join it in later versions.
//
// Lifecycle: Start -> Shutdown (deregisters). Owned by the daemon's main
// thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/config/configuration.h"
#include "taskmanager/resource_manager_connection.h"
#include "taskmanager/slot_table.h"
#include "weir/v1/cluster.grpc.pb.h"

namespace weir::taskmanager {

class TaskManager {
 public:
  static absl::StatusOr<std::unique_ptr<TaskManager>> Start(const config::Configuration& config);
  ~TaskManager();

  void Shutdown(const std::string& reason);

  const std::string& id() const { return info_.taskmanager_id(); }
  const std::string& address() const { return info_.address(); }

 private:
  class Service;
  TaskManager() = default;

  std::shared_ptr<spdlog::logger> log_;
  v1::TaskManagerInfo info_;
  std::unique_ptr<SlotTable> slots_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ResourceManagerConnection> connection_;
  bool shut_down_ = false;
};

}  // namespace weir::taskmanager
