#include "taskmanager/job_artifacts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"
#include "common/io/private_directory.h"
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

absl::StatusOr<std::string> JobArtifacts::Fetch(const std::string& sha256, const std::string& job_id,
                                                Cancellation* cancel) {
  if (!crypto::IsSha256Hex(sha256)) return absl::InvalidArgumentError(absl::StrCat("bad artifact id '", sha256, "'"));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir_).parent_path(), ec);
  RETURN_IF_ERROR(io::EnsurePrivateDirectory(dir_, "io.tmp.dirs"));
  std::string artifacts = absl::StrCat(dir_, "/artifacts");
  RETURN_IF_ERROR(io::EnsurePrivateDirectory(artifacts, "io.tmp.dirs"));
  std::string path = absl::StrCat(artifacts, "/", sha256, ".so");
  // A cached copy is used only if it still hashes to its name.
  if (std::filesystem::exists(path, ec)) {
    absl::StatusOr<std::string> cached = crypto::Sha256OfFile(path);
    if (cached.ok() && *cached == sha256) return path;
    logging::Get("taskmanager")->warn("job {}: the cached job binary {} does not match its hash; downloading it again",
                                      job_id, path);
    std::filesystem::remove(path, ec);
  }
  // Two jobs may fetch the same binary at once: each into its own file,
  // created new (never an existing file or a link planted in its place).
  std::string temp = absl::StrCat(path, ".", job_id, ".part");
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  auto remove_temp = [&] { std::filesystem::remove(temp, ec); };
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    // gRPC cancels a call whose context was cancelled before it started.
    Cancellation::Registration cancel_download;
    if (cancel != nullptr) cancel_download = cancel->OnCancel([&context] { context.TryCancel(); });
    v1::DownloadArtifactRequest request;
    request.set_sha256(sha256);
    auto reader = jobmanager_->Download(&context, request);
    v1::ArtifactChunk chunk;
    bool written = true;
    while (reader->Read(&chunk)) {
      const std::string& data = chunk.data();
      for (size_t done = 0; written && done < data.size();) {
        const ssize_t n = write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          written = false;
          break;
        }
        done += static_cast<size_t>(n);
      }
    }
    grpc::Status status = reader->Finish();
    cancel_download.Reset();
    const bool closed = close(fd) == 0;
    if (cancel != nullptr && cancel->cancelled()) {
      remove_temp();
      return absl::CancelledError(absl::StrCat("the download of job binary ", sha256, " was cancelled with the task"));
    }
    if (!status.ok()) {
      remove_temp();
      return Annotate(rpc::FromGrpcStatus(status), absl::StrCat("downloading job binary ", sha256));
    }
    if (!written || !closed) {
      remove_temp();
      return absl::UnavailableError(absl::StrCat("writing ", temp, ": ", std::strerror(errno)));
    }
  }
  ASSIGN_OR_RETURN(std::string actual, crypto::Sha256OfFile(temp));
  if (actual != sha256) {
    remove_temp();
    return absl::DataLossError(absl::StrCat("downloaded job binary has SHA-256 ", actual, ", expected ", sha256));
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot move ", temp, ": ", ec.message()));
  return path;
}

absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> JobArtifacts::Acquire(const std::string& job_id,
                                                                           const std::string& sha256,
                                                                           const std::vector<std::string>& args,
                                                                           const std::string& expected_graph_sha256,
                                                                           Cancellation* cancel) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Entry>& slot = jobs_[job_id];
    if (slot == nullptr) slot = std::make_shared<Entry>();
    ++slot->refs;
    entry = slot;
  }
  absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> result;
  bool load_here = false;
  {
    // Another caller may be loading this job: wait for it, or for `cancel`
    // (its callback touches the mutex, so that the condition is evaluated
    // again). Registered outside the lock, which the callback takes.
    Cancellation::Registration wake;
    if (cancel != nullptr) wake = cancel->OnCancel([e = entry.get()] { absl::MutexLock touch(&e->mu); });
    absl::MutexLock lock(&entry->mu);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(entry->mu) {
      return !entry->loading || (cancel != nullptr && cancel->cancelled());
    };
    entry->mu.Await(absl::Condition(&ready));
    if (entry->job != nullptr) {
      result = entry->job;
    } else if (cancel != nullptr && cancel->cancelled()) {
      result = absl::CancelledError(absl::StrCat("job ", job_id, ": the task was cancelled while its binary loaded"));
    } else {
      entry->loading = true;
      load_here = true;
    }
  }
  if (load_here) {
    // `loading` ends however Load does (an exception included), or the
    // job's other tasks would wait for it forever.
    absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> loaded;
    try {
      loaded = Load(job_id, sha256, args, expected_graph_sha256, cancel);
    } catch (...) {
      {
        absl::MutexLock lock(&entry->mu);
        entry->loading = false;
      }
      Release(job_id);
      throw;
    }
    {
      absl::MutexLock lock(&entry->mu);
      if (loaded.ok()) entry->job = *loaded;
      entry->loading = false;
    }
    result = std::move(loaded);
  }
  if (!result.ok()) Release(job_id);
  return result;
}

absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> JobArtifacts::Load(const std::string& job_id,
                                                                        const std::string& sha256,
                                                                        const std::vector<std::string>& args,
                                                                        const std::string& expected_graph_sha256,
                                                                        Cancellation* cancel) {
  ASSIGN_OR_RETURN(std::string artifact, Fetch(sha256, job_id, cancel));
  // A private copy per job: dlopen of one path twice would share one instance.
  std::string jobs_dir = absl::StrCat(dir_, "/jobs");
  RETURN_IF_ERROR(io::EnsurePrivateDirectory(jobs_dir, "io.tmp.dirs"));
  std::string job_dir = absl::StrCat(jobs_dir, "/", job_id);
  std::string job_path = absl::StrCat(job_dir, "/job.so");
  std::error_code ec;
  std::filesystem::remove_all(job_dir, ec);
  RETURN_IF_ERROR(io::EnsurePrivateDirectory(job_dir, "io.tmp.dirs"));
  std::filesystem::copy_file(artifact, job_path, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot copy the job binary to ", job_path, ": ", ec.message()));
  // What is loaded is what was verified: the copy, hashed again.
  ASSIGN_OR_RETURN(std::string copied, crypto::Sha256OfFile(job_path));
  if (copied != sha256) {
    return absl::DataLossError(absl::StrCat("the job binary copied to ", job_path, " has SHA-256 ", copied,
                                            ", expected ", sha256));
  }
  ASSIGN_OR_RETURN(auto job, jobgraph::LoadJob(job_path, args));
  if (expected_graph_sha256.empty()) {
    return absl::FailedPreconditionError(
        "the deployment carries no fingerprint of the job's graph: the JobManager runs an older Weir than this "
        "TaskManager; run one version on every daemon of the cluster");
  }
  if (jobgraph::GraphFingerprint(jobgraph::ToSpec(job->graph)) != expected_graph_sha256) {
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
