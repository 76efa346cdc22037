// JobManager: the process-level object of weir-jobmanager. Owns the gRPC
// server, the cluster membership (ResourceManager), the Dispatcher with the
// job masters, and the leader election.
//
// high-availability.type none: the JobManager leads from its start; it holds
// the lock of high-availability.storageDir and takes its leader epoch from
// the directory. etcd: it starts as a standby (serving, but refusing what
// only the leader serves, with the leader's address; /readyz 503) and
// campaigns. Granted: it takes the epoch the election gives, accepts
// TaskManagers, recovers the stored jobs and is ready. Revoked: it stops
// being ready, refuses calls, fences the job store, stops every JobMaster
// (their jobs stay in the store, unended), closes every TaskManager's
// session, and campaigns again.
//
// Lifecycle: Start (validates config, binds the port) -> Shutdown. The
// daemon's main thread owns it; Shutdown may be called from any one thread.
// Granted and Revoked run on the election's thread, one at a time.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/config/configuration.h"
#include "common/http/http_server.h"
#include "common/process/liveness.h"
#include "common/rpc/rpc.h"
#include "jobmanager/artifact_store.h"
#include "common/etcd/etcd_client.h"
#include "jobmanager/dispatcher.h"
#include "jobmanager/fenced_job_store.h"
#include "jobmanager/ha/leader_election.h"
#include "jobmanager/job_services.h"
#include "jobmanager/job_store.h"
#include "jobmanager/leadership_gate.h"
#include "jobmanager/resource_manager.h"
#include "jobmanager/resource_manager_service.h"

namespace weir::jobmanager {

class JobManager : private ha::LeadershipListener {
 public:
  // Starts serving on jobmanager.bind-host (or jobmanager.rpc.address) and
  // jobmanager.rpc.port.
  static absl::StatusOr<std::unique_ptr<JobManager>> Start(const config::Configuration& config);

  ~JobManager() override;

  // Stops accepting calls, closes all sessions and stops background threads.
  void Shutdown();

  int port() const { return port_; }
  // False when one of the JobManager's loops has not come round for
  // kStuckAfter (the membership loop, each job's master and checkpoint
  // coordinator), or the dispatcher's lock has not been free for that long:
  // something holds them. Logs which, once per change. From any thread.
  bool Alive() const;
  static constexpr absl::Duration kStuckAfter = absl::Seconds(60);
  // Port of the HTTP endpoint (rest.port, or the free one picked for 0).
  int rest_port() const { return http_ == nullptr ? 0 : http_->port(); }
  const std::string& session_id() const { return resource_manager_->session_id(); }
  // False while a standby (high-availability.type etcd).
  bool leading() const { return gate_ == nullptr || gate_->leading(); }

 private:
  JobManager() = default;

  // ha::LeadershipListener (the election's thread).
  void Granted(ha::Epoch epoch) override;
  void Revoked() override;
  // Starts the election (high-availability.type etcd), announcing `address`.
  absl::Status StartElection(const config::Configuration& config, const std::string& address);

  std::shared_ptr<spdlog::logger> log_;
  // high-availability.type etcd only (null with none). Declared before the
  // services, which use the gate; the election is stopped by Shutdown.
  std::unique_ptr<LeadershipGate> gate_;
  std::shared_ptr<etcd::EtcdClient> etcd_;
  std::unique_ptr<ha::LeaderElection> election_;
  std::string cluster_id_;
  std::unique_ptr<ResourceManager> resource_manager_;
  std::unique_ptr<ResourceManagerServiceImpl> resource_manager_service_;
  std::unique_ptr<ClusterServiceImpl> cluster_service_;
  // Declared before the dispatcher, which uses them: destroyed after it.
  Liveness liveness_;
  std::unique_ptr<JobStore> store_;
  // store_ with high-availability.type etcd (null with none).
  FencedJobStore* fenced_store_ = nullptr;
  std::unique_ptr<ArtifactStore> artifacts_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<ArtifactServiceImpl> artifact_service_;
  std::unique_ptr<JobMasterServiceImpl> job_master_service_;
  std::unique_ptr<grpc::Server> server_;
  // Uses the dispatcher and the resource manager: stopped before them.
  std::unique_ptr<http::HttpServer> http_;
  // /readyz: true once the RPCs are served and the stored jobs taken back
  // (and, under an election, while leading).
  std::atomic<bool> ready_{false};
  int port_ = 0;
  bool shut_down_ = false;
  // What Alive last logged as stuck.
  mutable absl::Mutex alive_mu_;
  mutable std::string last_stuck_ ABSL_GUARDED_BY(alive_mu_);
};

}  // namespace weir::jobmanager
