// gRPC front ends of the JobManager's cluster membership:
// ResourceManagerService (the TaskManagers' membership sessions) and
// ClusterService (the client's view of the cluster).
//
// ResourceManagerService runs on gRPC's callback API: a session holds no
// thread while it waits, and what the JobManager sends on it (heartbeat
// acknowledgements, checkpoint triggers and notifications) is queued and
// written one message at a time, so a sender never waits for a TaskManager.
//
// With a LeadershipGate (high-availability.type etcd), a standby refuses
// registrations and the cluster listing with the leader's address.
//
// Thread-safety: gRPC calls the handlers and reactions from its own thread
// pool; both delegate all state to the thread-safe ResourceManager and
// LeadershipGate.
#pragma once

#include "jobmanager/leadership_gate.h"
#include "jobmanager/resource_manager.h"
#include "weir/v1/cluster.grpc.pb.h"

namespace weir::jobmanager {

class ResourceManagerServiceImpl final : public v1::ResourceManagerService::CallbackService {
 public:
  // `gate`: null without an election.
  ResourceManagerServiceImpl(ResourceManager* resource_manager, absl::Duration heartbeat_interval,
                             LeadershipGate* gate);

  grpc::ServerBidiReactor<v1::TaskManagerMessage, v1::JobManagerMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  ResourceManager* const resource_manager_;
  const absl::Duration heartbeat_interval_;
  LeadershipGate* const gate_;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(ResourceManager* resource_manager, LeadershipGate* gate)
      : resource_manager_(resource_manager), gate_(gate) {}

  grpc::Status ListTaskManagers(grpc::ServerContext* context, const v1::ListTaskManagersRequest* request,
                                v1::ListTaskManagersResponse* response) override;

 private:
  ResourceManager* const resource_manager_;
  LeadershipGate* const gate_;
};

}  // namespace weir::jobmanager
