#include "taskmanager/job_artifacts.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "jobgraph/graph_spec.h"

namespace weir::taskmanager {

JobArtifacts::JobArtifacts(std::string dir, std::shared_ptr<v1::ArtifactService::Stub> jobmanager)
    : dir_(std::move(dir)), jobmanager_(std::move(jobmanager)) {}

JobArtifacts::~JobArtifacts() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::StatusOr<std::string> JobArtifacts::Fetch(const std::string& sha256, const std::string& job_id) {
  if (!crypto::IsSha256Hex(sha256)) return absl::InvalidArgumentError(absl::StrCat("bad artifact id '", sha256, "'"));
  std::string artifacts = absl::StrCat(dir_, "/artifacts");
  std::string path = absl::StrCat(artifacts, "/", sha256, ".so");
  if (std::filesystem::exists(path)) return path;
  std::error_code ec;
  std::filesystem::create_directories(artifacts, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", artifacts, ": ", ec.message()));
  // Two jobs may fetch the same binary at once: each into its own file.
  std::string temp = absl::StrCat(path, ".", job_id, ".part");
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", temp));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    v1::DownloadArtifactRequest request;
    request.set_sha256(sha256);
    auto reader = jobmanager_->Download(&context, request);
    v1::ArtifactChunk chunk;
    while (reader->Read(&chunk)) out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    grpc::Status status = reader->Finish();
    if (!status.ok()) {
      return Annotate(rpc::FromGrpcStatus(status), absl::StrCat("downloading job binary ", sha256));
    }
    if (!out.flush()) return absl::UnavailableError(absl::StrCat("writing ", temp));
  }
  ASSIGN_OR_RETURN(std::string actual, crypto::Sha256OfFile(temp));
  if (actual != sha256) {
    std::filesystem::remove(temp, ec);
    return absl::DataLossError(absl::StrCat("downloaded job binary has SHA-256 ", actual, ", expected ", sha256));
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot move ", temp, ": ", ec.message()));
  return path;
}

absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> JobArtifacts::Acquire(const std::string& job_id,
                                                                           const std::string& sha256,
                                                                           const std::vector<std::string>& args,
                                                                           const v1::JobGraphSpec& expected) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Entry>& slot = jobs_[job_id];
    if (slot == nullptr) slot = std::make_shared<Entry>();
    ++slot->refs;
    entry = slot;
  }
  absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> result;
  {
    absl::MutexLock lock(&entry->mu);
    if (entry->job == nullptr) {
      auto loaded = Load(job_id, sha256, args, expected);
      if (loaded.ok()) entry->job = *loaded;
      result = loaded;
    } else {
      result = entry->job;
    }
  }
  if (!result.ok()) Release(job_id);
  return result;
}

absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> JobArtifacts::Load(const std::string& job_id,
                                                                        const std::string& sha256,
                                                                        const std::vector<std::string>& args,
                                                                        const v1::JobGraphSpec& expected) {
  ASSIGN_OR_RETURN(std::string artifact, Fetch(sha256, job_id));
  // A private copy per job: dlopen of one path twice would share one instance.
  std::string job_dir = absl::StrCat(dir_, "/jobs/", job_id);
  std::string job_path = absl::StrCat(job_dir, "/job.so");
  std::error_code ec;
  std::filesystem::create_directories(job_dir, ec);
  std::filesystem::copy_file(artifact, job_path, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot copy the job binary to ", job_path, ": ", ec.message()));
  ASSIGN_OR_RETURN(auto job, jobgraph::LoadJob(job_path, args));
  if (!jobgraph::SameGraph(jobgraph::ToSpec(job->graph), expected)) {
    return absl::FailedPreconditionError(
        "the job binary builds a different graph here than at submission: its build function must be "
        "deterministic (same graph for the same arguments)");
  }
  logging::Get("taskmanager")->info("job {}: loaded job binary {} ({} vertices)", job_id, sha256,
                                    job->graph.vertices.size());
  return job;
}

void JobArtifacts::Release(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || --it->second->refs > 0) return;
  jobs_.erase(it);
  // The library stays mapped while some shared_ptr holds it; removing its
  // file does not unmap it.
  std::error_code ec;
  std::filesystem::remove_all(absl::StrCat(dir_, "/jobs/", job_id), ec);
}

}  // namespace weir::taskmanager
