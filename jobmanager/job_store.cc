#include "jobmanager/job_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/fs/file_system_registry.h"
#include "common/io/atomic_file.h"
#include "common/status_macros.h"

namespace weir::jobmanager {
namespace {

namespace fs = std::filesystem;

constexpr char kSubmission[] = "submission";
constexpr char kAttempt[] = "attempt";
constexpr char kFinal[] = "final";

}  // namespace

bool IsJobId(absl::string_view id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}

void JobStore::Fence() {
  absl::MutexLock lock(&fence_mu_);  // exclusive: waits for the writes under way
  fenced_ = true;
}

void JobStore::Unfence(int64_t epoch) {
  absl::MutexLock lock(&fence_mu_);
  fenced_ = false;
  epoch_ = epoch;
}

absl::StatusOr<int64_t> JobStore::CheckNotFencedLocked(absl::string_view what) const {
  if (!fenced_) return epoch_;
  return absl::FailedPreconditionError(absl::StrCat("not writing ", what, " to ", location(),
                                                    ": this JobManager does not lead the cluster (any more)"));
}

absl::Status JobStore::SaveSubmission(const std::string& job_id, const v1::SubmitJobRequest& request) {
  if (!IsJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("bad job id '", job_id, "'"));
  absl::ReaderMutexLock fence(&fence_mu_);
  ASSIGN_OR_RETURN(int64_t epoch, CheckNotFencedLocked(absl::StrCat("job ", job_id, "'s submission")));
  return DoSaveSubmission(epoch, job_id, request);
}

absl::Status JobStore::SaveAttempt(const std::string& job_id, int attempt) {
  if (!IsJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("bad job id '", job_id, "'"));
  absl::ReaderMutexLock fence(&fence_mu_);
  ASSIGN_OR_RETURN(int64_t epoch, CheckNotFencedLocked(absl::StrCat("job ", job_id, "'s attempt")));
  return DoSaveAttempt(epoch, job_id, attempt);
}

absl::Status JobStore::SaveFinal(const std::string& job_id, const v1::JobStatus& status) {
  if (!IsJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("bad job id '", job_id, "'"));
  absl::ReaderMutexLock fence(&fence_mu_);
  ASSIGN_OR_RETURN(int64_t epoch, CheckNotFencedLocked(absl::StrCat("job ", job_id, "'s final status")));
  return DoSaveFinal(epoch, job_id, status);
}

absl::Status JobStore::Remove(const std::string& job_id) {
  if (!IsJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("bad job id '", job_id, "'"));
  absl::ReaderMutexLock fence(&fence_mu_);
  ASSIGN_OR_RETURN(int64_t epoch, CheckNotFencedLocked(absl::StrCat("the removal of job ", job_id)));
  return DoRemove(epoch, job_id);
}

std::vector<StoredJob> JobStore::Load(std::vector<std::string>* problems) {
  absl::ReaderMutexLock fence(&fence_mu_);
  return DoLoad(fenced_ ? std::nullopt : std::optional<int64_t>(epoch_), problems);
}

absl::StatusOr<int64_t> DirectoryJobStore::TakeLeaderEpoch() {
  const std::string path = absl::StrCat(ha_dir_, "/leader-epoch");
  int64_t last = 0;
  if (std::error_code ec; fs::exists(path, ec)) {
    absl::StatusOr<std::string> text = io::ReadWholeFile(path);
    if (!text.ok()) return text.status();
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &last) || last < 0 || last == INT64_MAX) {
      return absl::DataLossError(absl::StrCat(
          path, " does not hold a leader epoch (a number); restore it from a backup, or write a number higher "
          "than any JobManager on this directory used (their logs say 'leader epoch N')"));
    }
  }
  const int64_t next = last + 1;
  RETURN_IF_ERROR(io::WriteFileAtomically(path, absl::StrCat(next, "\n")));
  return next;
}

namespace {

// Creates <ha_dir>/jobs.
absl::StatusOr<std::string> MakeJobsDir(const std::string& ha_dir) {
  std::error_code ec;
  std::string jobs = absl::StrCat(ha_dir, "/jobs");
  fs::create_directories(jobs, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", jobs, ": ", ec.message(), " (high-availability.storageDir)"));
  }
  return jobs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DirectoryJobStore>> DirectoryJobStore::Open(const std::string& ha_dir) {
  if (::weir::fs::IsObjectStoreUri(ha_dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "high-availability.storageDir ", ha_dir, " is in an object store, but with high-availability.type none "
        "the JobManager locks its directory (flock), which needs a local directory: give a local "
        "high-availability.storageDir, or use high-availability.type etcd"));
  }
  ASSIGN_OR_RETURN(std::string jobs, MakeJobsDir(ha_dir));
  const std::string lock = absl::StrCat(ha_dir, "/jobmanager.lock");
  const int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", lock, ": ", std::strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another JobManager uses high-availability.storageDir ", ha_dir, " (it holds ", lock,
          "); two JobManagers on one directory would both run its jobs. Stop the other one, or give this one "
          "its own high-availability.storageDir"));
    }
    return absl::UnavailableError(absl::StrCat("cannot lock ", lock, ": ", std::strerror(err)));
  }
  // The holder's pid, for whoever wonders who holds it.
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) == 0) (void)!write(fd, pid.data(), pid.size());
  return std::unique_ptr<DirectoryJobStore>(new DirectoryJobStore(ha_dir, jobs, fd));
}

DirectoryJobStore::~DirectoryJobStore() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

absl::Status DirectoryJobStore::Write(const std::string& job_id, const char* name, const std::string& bytes) {
  const std::string dir = absl::StrCat(jobs_dir_, "/", job_id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return io::WriteFileAtomically(absl::StrCat(dir, "/", name), bytes);
}

absl::Status DirectoryJobStore::DoSaveSubmission(int64_t, const std::string& job_id,
                                                 const v1::SubmitJobRequest& request) {
  return Write(job_id, kSubmission, request.SerializeAsString());
}

absl::Status DirectoryJobStore::DoSaveAttempt(int64_t, const std::string& job_id, int attempt) {
  return Write(job_id, kAttempt, absl::StrCat(attempt, "\n"));
}

absl::Status DirectoryJobStore::DoSaveFinal(int64_t, const std::string& job_id, const v1::JobStatus& status) {
  return Write(job_id, kFinal, status.SerializeAsString());
}

absl::Status DirectoryJobStore::DoRemove(int64_t, const std::string& job_id) {
  std::error_code ec;
  fs::remove_all(absl::StrCat(jobs_dir_, "/", job_id), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot remove job ", job_id, ": ", ec.message()));
  return absl::OkStatus();
}

std::vector<StoredJob> DirectoryJobStore::DoLoad(std::optional<int64_t>, std::vector<std::string>* problems) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(jobs_dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && IsJobId(name)) ids.push_back(name);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<StoredJob> jobs;
  for (const std::string& id : ids) {
    const std::string dir = absl::StrCat(jobs_dir_, "/", id);
    StoredJob job;
    job.job_id = id;
    absl::StatusOr<std::string> submission = io::ReadWholeFile(absl::StrCat(dir, "/", kSubmission));
    if (!submission.ok() || !job.request.ParseFromString(*submission)) {
      problems->push_back(absl::StrCat("job ", id, ": its submission in ", dir, " cannot be read (",
                                       submission.ok() ? "not a submission" : submission.status().message(), ")"));
      continue;
    }
    if (absl::StatusOr<std::string> attempt = io::ReadWholeFile(absl::StrCat(dir, "/", kAttempt)); attempt.ok()) {
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*attempt), &job.last_attempt) || job.last_attempt < 0) {
        job.last_attempt = 0;
      }
    }
    if (absl::StatusOr<std::string> final = io::ReadWholeFile(absl::StrCat(dir, "/", kFinal)); final.ok()) {
      v1::JobStatus status;
      if (status.ParseFromString(*final)) {
        job.final_status = std::move(status);
      } else {
        problems->push_back(absl::StrCat("job ", id, ": its final status in ", dir, " cannot be read"));
      }
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace weir::jobmanager
