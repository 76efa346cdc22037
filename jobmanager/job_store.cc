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
#include "common/io/atomic_file.h"
#include "common/status_macros.h"

namespace weir::jobmanager {
namespace {

namespace fs = std::filesystem;

constexpr char kSubmission[] = "submission";
constexpr char kAttempt[] = "attempt";
constexpr char kFinal[] = "final";

// A job id as the Dispatcher makes them: it names a directory.
bool IsJobId(const std::string& id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace

absl::StatusOr<int64_t> JobStore::TakeLeaderEpoch() {
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

absl::StatusOr<std::string> JobStore::MakeJobsDir(const std::string& ha_dir) {
  std::error_code ec;
  std::string jobs = absl::StrCat(ha_dir, "/jobs");
  fs::create_directories(jobs, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", jobs, ": ", ec.message(), " (high-availability.storageDir)"));
  }
  return jobs;
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::OpenShared(const std::string& ha_dir) {
  ASSIGN_OR_RETURN(std::string jobs, MakeJobsDir(ha_dir));
  return std::unique_ptr<JobStore>(new JobStore(ha_dir, std::move(jobs), -1, /*fenced=*/true));
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& ha_dir) {
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
  return std::unique_ptr<JobStore>(new JobStore(ha_dir, jobs, fd, /*fenced=*/false));
}

JobStore::~JobStore() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

void JobStore::Fence() {
  absl::MutexLock lock(&fence_mu_);  // exclusive: waits for the writes under way
  fenced_ = true;
}

void JobStore::Unfence() {
  absl::MutexLock lock(&fence_mu_);
  fenced_ = false;
}

absl::Status JobStore::CheckNotFencedLocked(absl::string_view what) const {
  if (!fenced_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "not writing ", what, " to ", jobs_dir_, ": this JobManager does not lead the cluster (any more)"));
}

absl::Status JobStore::Write(const std::string& job_id, const char* name, const std::string& bytes) {
  if (!IsJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("bad job id '", job_id, "'"));
  absl::ReaderMutexLock fence(&fence_mu_);
  RETURN_IF_ERROR(CheckNotFencedLocked(absl::StrCat("job ", job_id, "'s ", name)));
  const std::string dir = absl::StrCat(jobs_dir_, "/", job_id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return io::WriteFileAtomically(absl::StrCat(dir, "/", name), bytes);
}

absl::Status JobStore::SaveSubmission(const std::string& job_id, const v1::SubmitJobRequest& request) {
  return Write(job_id, kSubmission, request.SerializeAsString());
}

absl::Status JobStore::SaveAttempt(const std::string& job_id, int attempt) {
  return Write(job_id, kAttempt, absl::StrCat(attempt, "\n"));
}

absl::Status JobStore::SaveFinal(const std::string& job_id, const v1::JobStatus& status) {
  return Write(job_id, kFinal, status.SerializeAsString());
}

absl::Status JobStore::Remove(const std::string& job_id) {
  if (!IsJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("bad job id '", job_id, "'"));
  absl::ReaderMutexLock fence(&fence_mu_);
  RETURN_IF_ERROR(CheckNotFencedLocked(absl::StrCat("the removal of job ", job_id)));
  std::error_code ec;
  fs::remove_all(absl::StrCat(jobs_dir_, "/", job_id), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot remove job ", job_id, ": ", ec.message()));
  return absl::OkStatus();
}

std::vector<StoredJob> JobStore::Load(std::vector<std::string>* problems) const {
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
