// gRPC front ends of the JobManager's job handling: JobService (clients),
// ArtifactService (clients upload, TaskManagers download job binaries) and
// JobMasterService (TaskManagers report task states and metrics).
//
// With a LeadershipGate (high-availability.type etcd), a standby refuses
// every call but a TaskManager's download of a job binary with the leader's
// address: every JobManager serves the binaries of the cluster's storage
// (high-availability.storageDir), whoever stored them.
//
// Thread-safety: called from gRPC's threads; state lives in the thread-safe
// Dispatcher, ArtifactStore and LeadershipGate.
#pragma once

#include "jobmanager/artifact_store.h"
#include "jobmanager/dispatcher.h"
#include "jobmanager/leadership_gate.h"
#include "weir/v1/job.grpc.pb.h"

namespace weir::jobmanager {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `gate`: null without an election.
  JobServiceImpl(Dispatcher* dispatcher, LeadershipGate* gate) : dispatcher_(dispatcher), gate_(gate) {}
  grpc::Status Submit(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status List(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetJobRequest*, v1::JobStatus*) override;
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelJobRequest*, v1::CancelJobResponse*) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* context, const v1::GetJobRequest* request,
                               v1::ListCheckpointsResponse* response) override;
  grpc::Status TriggerSavepoint(grpc::ServerContext* context, const v1::TriggerSavepointRequest* request,
                                v1::TriggerSavepointResponse* response) override;
  grpc::Status StopJob(grpc::ServerContext* context, const v1::TriggerSavepointRequest* request,
                       v1::TriggerSavepointResponse* response) override;

 private:
  Dispatcher* const dispatcher_;
  LeadershipGate* const gate_;
};

class ArtifactServiceImpl final : public v1::ArtifactService::Service {
 public:
  ArtifactServiceImpl(ArtifactStore* store, LeadershipGate* gate) : store_(store), gate_(gate) {}
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<v1::ArtifactChunk>*, v1::UploadArtifactResponse*) override;
  grpc::Status Download(grpc::ServerContext*, const v1::DownloadArtifactRequest*,
                        grpc::ServerWriter<v1::ArtifactChunk>*) override;

 private:
  ArtifactStore* const store_;
  LeadershipGate* const gate_;
};

class JobMasterServiceImpl final : public v1::JobMasterService::Service {
 public:
  JobMasterServiceImpl(Dispatcher* dispatcher, LeadershipGate* gate) : dispatcher_(dispatcher), gate_(gate) {}
  grpc::Status UpdateTaskState(grpc::ServerContext*, const v1::TaskStateUpdate*, v1::TaskStateUpdateResponse*) override;
  grpc::Status ReportTaskMetrics(grpc::ServerContext*, const v1::ReportTaskMetricsRequest*,
                                 v1::TaskStateUpdateResponse*) override;
  grpc::Status AcknowledgeCheckpoint(grpc::ServerContext*, const v1::AcknowledgeCheckpointRequest*,
                                     v1::CheckpointResponse*) override;
  grpc::Status AcknowledgeCheckpoints(grpc::ServerContext*, const v1::AcknowledgeCheckpointsRequest*,
                                      v1::CheckpointResponse*) override;
  grpc::Status DeclineCheckpoint(grpc::ServerContext*, const v1::DeclineCheckpointRequest*,
                                 v1::CheckpointResponse*) override;

 private:
  Dispatcher* const dispatcher_;
  LeadershipGate* const gate_;
};

}  // namespace weir::jobmanager
