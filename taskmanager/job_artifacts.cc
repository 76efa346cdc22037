#include "taskmanager/job_artifacts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/crypto/sha256.h"
#include "common/io/private_directory.h"
#include "common/logging/logging.h"
#include "common/retry/backoff.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "jobgraph/graph_spec.h"

namespace weir::taskmanager {

namespace {

// The waits between a download's tries.
constexpr retry::BackoffOptions kDownloadBackoff{
    .initial = absl::Milliseconds(200), .multiplier = 2.0, .max = absl::Seconds(2), .jitter = 0.5};

// The wall clock, whose waits end when the task is cancelled.
class CancellableRetryClock final : public retry::RetryClock {
 public:
  explicit CancellableRetryClock(Cancellation* cancel) : cancel_(cancel) {}
  absl::Time Now() override { return absl::Now(); }
  bool Sleep(absl::Duration duration) override {
    if (cancel_ == nullptr) {
      absl::SleepFor(duration);
      return true;
    }
    absl::Notification cancelled;
    Cancellation::Registration wake = cancel_->OnCancel([&cancelled] { cancelled.Notify(); });
    return !cancelled.WaitForNotificationWithTimeout(duration);
  }

 private:
  Cancellation* const cancel_;
};

// Errors another try (on the JobManager named then) may not meet: the
// JobManager was unreachable or died on the way, or could not read its
// storage for a moment.
bool WorthAnotherTry(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsAborted(status) ||
         absl::IsInternal(status);
}

}  // namespace

JobArtifacts::JobArtifacts(std::string dir, ArtifactServerFinder find_server, int64_t max_bytes,
                           absl::Duration retry_for)
    : dir_(std::move(dir)), find_server_(std::move(find_server)), max_bytes_(max_bytes), retry_for_(retry_for) {}

JobArtifacts::JobArtifacts(std::string dir, std::shared_ptr<v1::ArtifactService::Stub> jobmanager)
    : JobArtifacts(
          std::move(dir), [jobmanager] { return ArtifactServer{"the JobManager", jobmanager}; },
          std::numeric_limits<int64_t>::max(), absl::ZeroDuration()) {}

JobArtifacts::~JobArtifacts() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status JobArtifacts::Download(const ArtifactServer& server, const std::string& sha256, const std::string& temp,
                                    Cancellation* cancel) {
  // Created new: never an existing file or a link planted in its place.
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  // gRPC cancels a call whose context was cancelled before it started.
  Cancellation::Registration cancel_download;
  if (cancel != nullptr) cancel_download = cancel->OnCancel([&context] { context.TryCancel(); });
  v1::DownloadArtifactRequest request;
  request.set_sha256(sha256);
  auto reader = server.stub->Download(&context, request);
  v1::ArtifactChunk chunk;
  absl::Status local;  // what went wrong on this side
  int64_t received = 0;
  while (local.ok() && reader->Read(&chunk)) {
    const std::string& data = chunk.data();
    received += static_cast<int64_t>(data.size());
    if (received > max_bytes_) {
      local = absl::DataLossError(absl::StrCat("job binary ", sha256, " from the JobManager at ", server.address,
                                               " is larger than the limit of ", max_bytes_,
                                               " bytes (jobmanager.artifact.max-size)"));
      context.TryCancel();
      break;
    }
    for (size_t done = 0; done < data.size();) {
      const ssize_t n = write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        local = absl::FailedPreconditionError(absl::StrCat("writing ", temp, ": ", std::strerror(errno)));
        context.TryCancel();
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  grpc::Status status = reader->Finish();
  cancel_download.Reset();
  const bool closed = close(fd) == 0;
  if (cancel != nullptr && cancel->cancelled()) {
    return absl::CancelledError(absl::StrCat("the download of job binary ", sha256, " was cancelled with the task"));
  }
  if (!local.ok()) return local;
  if (!status.ok()) {
    return Annotate(rpc::FromGrpcStatus(status),
                    absl::StrCat("downloading job binary ", sha256, " from the JobManager at ", server.address));
  }
  if (!closed) return absl::FailedPreconditionError(absl::StrCat("writing ", temp, ": ", std::strerror(errno)));
  return absl::OkStatus();
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
  // Two jobs may fetch the same binary at once: each into its own file.
  const std::string temp = absl::StrCat(path, ".", job_id, ".part");
  auto remove_temp = [&] { std::filesystem::remove(temp, ec); };
  CancellableRetryClock clock(cancel);
  retry::RetryPolicy policy;
  policy.backoff = kDownloadBackoff;
  policy.deadline = absl::Now() + retry_for_;
  policy.clock = &clock;
  std::string served_by;
  retry::RetryOutcome outcome = retry::Retry(
      policy,
      [&]() -> absl::Status {
        remove_temp();
        const ArtifactServer server = find_server_();
        served_by = server.address;
        absl::Status downloaded = Download(server, sha256, temp, cancel);
        if (downloaded.ok()) {
          // A corrupt or cut-off object in the cluster's storage ends here,
          // naming the binary; asking another JobManager reads the same.
          ASSIGN_OR_RETURN(std::string actual, crypto::Sha256OfFile(temp));
          if (actual != sha256) {
            return absl::DataLossError(absl::StrCat("job binary ", sha256, " as the JobManager at ", server.address,
                                                    " served it has SHA-256 ", actual,
                                                    ": the stored copy is damaged; submit the job again"));
          }
        }
        return downloaded;
      },
      [&](const absl::Status& status) { return WorthAnotherTry(status) && (cancel == nullptr || !cancel->cancelled()); },
      [&](const absl::Status& status, absl::Duration wait) {
        logging::Get("taskmanager")
            ->warn("job {}: the download of job binary {} failed ({}); trying again in {}", job_id, sha256,
                   status.ToString(), absl::FormatDuration(wait));
      });
  if (!outcome.status.ok()) {
    remove_temp();
    if (cancel != nullptr && cancel->cancelled()) {
      return absl::CancelledError(absl::StrCat("the download of job binary ", sha256, " was cancelled with the task"));
    }
    if (outcome.attempts > 1) return Annotate(outcome.status, outcome.Summary());
    return outcome.status;
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot move ", temp, ": ", ec.message()));
  logging::Get("taskmanager")
      ->info("job {}: downloaded job binary {} from the JobManager at {} ({})", job_id, sha256, served_by,
             outcome.Summary());
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
