#include "jobmanager/job_services.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"
#include "common/wire_limits.h"
#include "jobmanager/leadership_gate.h"

namespace weir::jobmanager {

grpc::Status JobServiceImpl::Submit(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                                    v1::SubmitJobResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "job submission");
  dispatcher_->Housekeep();
  std::vector<std::string> notices;
  auto job_id = dispatcher_->Submit(*request, &notices);
  if (!job_id.ok()) return rpc::ToGrpcStatus(job_id.status());
  response->set_job_id(*job_id);
  for (std::string& notice : notices) response->add_notices(std::move(notice));
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::List(grpc::ServerContext* context, const v1::ListJobsRequest*, v1::ListJobsResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "listing jobs");
  dispatcher_->Housekeep();
  for (v1::JobStatus& job : dispatcher_->List()) *response->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Get(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::JobStatus* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a job status request");
  dispatcher_->Housekeep();
  auto status = dispatcher_->Get(request->job_id());
  if (!status.ok()) return rpc::ToGrpcStatus(status.status());
  *response = std::move(*status);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Cancel(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                                    v1::CancelJobResponse*) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "cancellation");
  dispatcher_->Housekeep();
  return rpc::ToGrpcStatus(dispatcher_->Cancel(request->job_id()));
}

grpc::Status JobServiceImpl::TriggerSavepoint(grpc::ServerContext* context, const v1::TriggerSavepointRequest* request,
                                              v1::TriggerSavepointResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a savepoint");
  auto path = dispatcher_->TriggerSavepoint(request->job_id(), request->target_directory());
  if (!path.ok()) return rpc::ToGrpcStatus(path.status());
  response->set_savepoint_path(*path);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::StopJob(grpc::ServerContext* context, const v1::TriggerSavepointRequest* request,
                                     v1::TriggerSavepointResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "stop-with-savepoint");
  auto path = dispatcher_->StopJob(request->job_id(), request->target_directory());
  if (!path.ok()) return rpc::ToGrpcStatus(path.status());
  response->set_savepoint_path(*path);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListCheckpoints(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                             v1::ListCheckpointsResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "listing checkpoints");
  dispatcher_->Housekeep();
  auto checkpoints = dispatcher_->Checkpoints(request->job_id());
  if (!checkpoints.ok()) return rpc::ToGrpcStatus(checkpoints.status());
  *response = std::move(*checkpoints);
  return grpc::Status::OK;
}

grpc::Status ArtifactServiceImpl::Upload(grpc::ServerContext* context, grpc::ServerReader<v1::ArtifactChunk>* reader,
                                         v1::UploadArtifactResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a job binary upload");
  auto upload = store_->BeginUpload();
  if (!upload.ok()) return rpc::ToGrpcStatus(upload.status());
  v1::ArtifactChunk chunk;
  std::string expected_sha256;
  int64_t expected_size = -1;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) {
      // What the whole will be, announced up front: only a complete,
      // matching upload is stored (a cut-off one would otherwise be stored
      // under the hash of its prefix).
      expected_sha256 = chunk.expected_sha256();
      expected_size = chunk.expected_size();
      if (!crypto::IsSha256Hex(expected_sha256) || expected_size <= 0) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "the upload does not announce its SHA-256 and size; use a weir client of this version");
      }
      if (expected_size > store_->max_bytes()) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("the job binary (", expected_size, " bytes) is larger than the limit of ",
                                         store_->max_bytes(), " bytes (jobmanager.artifact.max-size)"));
      }
      first = false;
    }
    absl::Status appended = (*upload)->Append(chunk.data());
    if (!appended.ok()) return rpc::ToGrpcStatus(appended);
  }
  if (context->IsCancelled() || first || (*upload)->size() != expected_size) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        absl::StrCat("the upload ended after ", (*upload)->size(), " of ", expected_size,
                                     " bytes; nothing was stored"));
  }
  auto sha = (*upload)->Commit(expected_sha256);
  if (!sha.ok()) return rpc::ToGrpcStatus(sha.status());
  response->set_sha256(*sha);
  response->set_size((*upload)->size());
  return grpc::Status::OK;
}

grpc::Status ArtifactServiceImpl::Download(grpc::ServerContext* context, const v1::DownloadArtifactRequest* request,
                                           grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  WEIR_RPC_AUTHORIZE(context);
  // Any JobManager serves, a standby too: the binaries are in the cluster's
  // storage. One chunk in memory at a time, read from the store as it goes.
  absl::StatusOr<int64_t> size = store_->SizeOf(request->sha256());
  if (!size.ok()) return rpc::ToGrpcStatus(size.status());
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t offset = 0; offset < *size;) {
    absl::StatusOr<std::string> data = store_->Read(request->sha256(), offset, std::min(kChunk, *size - offset));
    if (!data.ok()) return rpc::ToGrpcStatus(data.status());
    // A stored object shorter than its listing: the TaskManager's hash
    // check names it; end the stream here rather than loop.
    if (data->empty()) break;
    offset += static_cast<int64_t>(data->size());
    v1::ArtifactChunk chunk;
    chunk.set_data(std::move(*data));
    if (!writer->Write(chunk) || context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "download canceled");
    }
  }
  return grpc::Status::OK;
}

grpc::Status JobMasterServiceImpl::UpdateTaskState(grpc::ServerContext* context, const v1::TaskStateUpdate* request,
                                                   v1::TaskStateUpdateResponse*) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a task state update");
  dispatcher_->Housekeep();
  dispatcher_->OnTaskStateUpdate(*request);
  return grpc::Status::OK;
}

grpc::Status JobMasterServiceImpl::AcknowledgeCheckpoint(grpc::ServerContext* context,
                                                         const v1::AcknowledgeCheckpointRequest* request,
                                                         v1::CheckpointResponse*) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a checkpoint acknowledgement");
  dispatcher_->OnCheckpointAcknowledged(*request);
  return grpc::Status::OK;
}

grpc::Status JobMasterServiceImpl::AcknowledgeCheckpoints(grpc::ServerContext* context,
                                                          const v1::AcknowledgeCheckpointsRequest* request,
                                                          v1::CheckpointResponse*) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a checkpoint acknowledgement");
  if (absl::Status count = limits::CheckCount("acknowledgements in one call", request->acks_size(),
                                              limits::kMaxTasksPerJob);
      !count.ok()) {
    return rpc::ToGrpcStatus(count);
  }
  dispatcher_->OnCheckpointsAcknowledged(*request);
  return grpc::Status::OK;
}

grpc::Status JobMasterServiceImpl::DeclineCheckpoint(grpc::ServerContext* context,
                                                     const v1::DeclineCheckpointRequest* request,
                                                     v1::CheckpointResponse*) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a checkpoint decline");
  dispatcher_->OnCheckpointDeclined(*request);
  return grpc::Status::OK;
}

grpc::Status JobMasterServiceImpl::ReportTaskMetrics(grpc::ServerContext* context, const v1::ReportTaskMetricsRequest* request,
                                                     v1::TaskStateUpdateResponse*) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "a task report");
  dispatcher_->OnTaskManagerReport(*request);
  return grpc::Status::OK;
}

}  // namespace weir::jobmanager
