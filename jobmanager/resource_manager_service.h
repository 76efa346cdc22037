// gRPC front ends of the JobManager's cluster membership:
// ResourceManagerService (the TaskManagers' membership sessions) and
// ClusterService (the client's view of the cluster).
//
// ResourceManagerService runs on gRPC's callback API: a session holds no
// thread while it waits, and what the JobManager sends on it (heartbeat
// acknowledgements, checkpoint triggers and notifications) is queued and
// written one message at a time, so a sender never waits for a TaskManager.
//
// Thread-safety: gRPC calls the handlers and reactions from its own thread
// pool; both delegate all state to the thread-safe ResourceManager.
#pragma once

#include "jobmanager/resource_manager.h"
#include "weir/v1/cluster.grpc.pb.h"

namespace weir::jobmanager {

class ResourceManagerServiceImpl final : public v1::ResourceManagerService::CallbackService {
 public:
  ResourceManagerServiceImpl(ResourceManager* resource_manager, absl::Duration heartbeat_interval);

  grpc::ServerBidiReactor<v1::TaskManagerMessage, v1::JobManagerMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  ResourceManager* const resource_manager_;
  const absl::Duration heartbeat_interval_;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  explicit ClusterServiceImpl(ResourceManager* resource_manager) : resource_manager_(resource_manager) {}

  grpc::Status ListTaskManagers(grpc::ServerContext* context, const v1::ListTaskManagersRequest* request,
                                v1::ListTaskManagersResponse* response) override;

 private:
  ResourceManager* const resource_manager_;
};

}  // namespace weir::jobmanager
