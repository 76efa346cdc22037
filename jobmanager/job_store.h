// JobStore: what a JobManager must not forget when it restarts, kept in
// high-availability.storageDir:
//
//   <dir>/jobmanager.lock          held (flock) by the one JobManager using <dir>
//   <dir>/leader-epoch             the epoch the last JobManager on <dir> took
//   <dir>/jobs/<job id>/submission the SubmitJobRequest (graph, binary hash,
//                                  arguments, -D settings), as submitted
//   <dir>/jobs/<job id>/attempt    the last attempt number started
//   <dir>/jobs/<job id>/final      the job's status once it ended
//
// Every file is written atomically (write, fsync, rename, fsync the
// directory). The pointer to a job's latest completed checkpoint needs no
// file of its own: the checkpoint storage under state.checkpoints.dir/<job
// id> is itself written that way and is read back on recovery.
//
// Two JobManagers pointed at one directory must not both act on it. With
// high-availability.type none, Open takes an exclusive lock and refuses,
// naming the directory, when another process holds it. With etcd the
// election decides who acts (OpenShared, no lock), and the store is fenced
// while this JobManager does not lead: every write is refused, and Fence
// returns only once no write is under way, so that nothing is written for a
// leadership after it was revoked.
//
// Thread-safety: thread-safe (each call touches its own files; the fence
// is taken shared by every write).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager {

struct StoredJob {
  std::string job_id;
  v1::SubmitJobRequest request;
  int last_attempt = 0;                     // 0: none started
  std::optional<v1::JobStatus> final_status;  // set once the job ended
};

class JobStore {
 public:
  // Opens (creating) <ha_dir>/jobs and takes <ha_dir>/jobmanager.lock;
  // kFailedPrecondition when another process holds it.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& ha_dir);
  // Opens (creating) <ha_dir>/jobs without the lock, fenced (see Unfence):
  // for JobManagers that an election keeps from acting at once.
  static absl::StatusOr<std::unique_ptr<JobStore>> OpenShared(const std::string& ha_dir);
  ~JobStore();

  // Fence refuses every write from now on (kFailedPrecondition), once the
  // writes under way have ended; Unfence lets them through again.
  void Fence() ABSL_LOCKS_EXCLUDED(fence_mu_);
  void Unfence() ABSL_LOCKS_EXCLUDED(fence_mu_);

  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // The next leader epoch: one past the last one taken on this directory
  // (1 on a new one), written before it is returned, so every JobManager
  // that starts on the directory has a higher epoch than any before it.
  // TaskManagers refuse requests from a lower epoch than the one they
  // registered with (the fencing token). A corrupt file is an error naming
  // it, not a reset: a reset would let an earlier JobManager's requests in.
  absl::StatusOr<int64_t> TakeLeaderEpoch();

  absl::Status SaveSubmission(const std::string& job_id, const v1::SubmitJobRequest& request);
  absl::Status SaveAttempt(const std::string& job_id, int attempt);
  absl::Status SaveFinal(const std::string& job_id, const v1::JobStatus& status);
  // Forgets a job (its directory goes).
  absl::Status Remove(const std::string& job_id);

  // Every stored job, oldest directory name first. A job whose files cannot
  // be read is left out and described in `problems`.
  std::vector<StoredJob> Load(std::vector<std::string>* problems) const;

  const std::string& jobs_dir() const { return jobs_dir_; }

 private:
  JobStore(std::string ha_dir, std::string jobs_dir, int lock_fd, bool fenced)
      : ha_dir_(std::move(ha_dir)), jobs_dir_(std::move(jobs_dir)), lock_fd_(lock_fd), fenced_(fenced) {}
  // Creates <ha_dir>/jobs.
  static absl::StatusOr<std::string> MakeJobsDir(const std::string& ha_dir);
  absl::Status Write(const std::string& job_id, const char* name, const std::string& bytes)
      ABSL_LOCKS_EXCLUDED(fence_mu_);
  // kFailedPrecondition while fenced. REQUIRES: fence_mu_ held (shared).
  absl::Status CheckNotFencedLocked(absl::string_view what) const ABSL_SHARED_LOCKS_REQUIRED(fence_mu_);

  const std::string ha_dir_;
  const std::string jobs_dir_;
  const int lock_fd_;  // -1: OpenShared
  mutable absl::Mutex fence_mu_;
  bool fenced_ ABSL_GUARDED_BY(fence_mu_);
};

}  // namespace weir::jobmanager
