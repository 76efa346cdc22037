// JobStore: what a JobManager must not forget when it restarts or when
// another JobManager takes over: each job's submission (graph, binary hash,
// arguments, -D settings), the last attempt started, and the final status
// once it ended. The pointer to a job's latest completed checkpoint needs no
// entry of its own: the checkpoint storage under state.checkpoints.dir/<job
// id> is itself written atomically and is read back on recovery.
//
// Two implementations:
//   DirectoryJobStore  high-availability.type none: files in a local
//                      directory, locked by one JobManager (below).
//   FencedJobStore     high-availability.type etcd: records written through
//                      the election's fenced transactions, submissions in a
//                      FileSystem (fenced_job_store.h).
//
// Both are fenced inside the process too: while this JobManager does not
// lead, every write is refused, and Fence returns only once no write is
// under way, so that nothing is written for a leadership after it was
// revoked.
//
// Thread-safety: thread-safe (the fence is taken shared by every write and
// by Load, exclusively by Fence and Unfence).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  virtual ~JobStore() = default;
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Fence refuses every write from now on (kFailedPrecondition), once the
  // writes under way have ended. Unfence lets them through again, for the
  // leadership `epoch` (the election's; 0 without an election).
  void Fence() ABSL_LOCKS_EXCLUDED(fence_mu_);
  void Unfence(int64_t epoch = 0) ABSL_LOCKS_EXCLUDED(fence_mu_);

  absl::Status SaveSubmission(const std::string& job_id, const v1::SubmitJobRequest& request)
      ABSL_LOCKS_EXCLUDED(fence_mu_);
  absl::Status SaveAttempt(const std::string& job_id, int attempt) ABSL_LOCKS_EXCLUDED(fence_mu_);
  absl::Status SaveFinal(const std::string& job_id, const v1::JobStatus& status) ABSL_LOCKS_EXCLUDED(fence_mu_);
  // Forgets a job.
  absl::Status Remove(const std::string& job_id) ABSL_LOCKS_EXCLUDED(fence_mu_);

  // Every stored job, by job id. A job that cannot be read is left out and
  // described in `problems`.
  std::vector<StoredJob> Load(std::vector<std::string>* problems) ABSL_LOCKS_EXCLUDED(fence_mu_);

  // Where the store is, for logs.
  virtual std::string location() const = 0;

 protected:
  explicit JobStore(bool fenced) : fenced_(fenced) {}

  // The writes and the read, called with the fence held shared and (for
  // the writes) open; `epoch` is the one Unfence gave. Job ids are checked.
  virtual absl::Status DoSaveSubmission(int64_t epoch, const std::string& job_id,
                                        const v1::SubmitJobRequest& request) = 0;
  virtual absl::Status DoSaveAttempt(int64_t epoch, const std::string& job_id, int attempt) = 0;
  virtual absl::Status DoSaveFinal(int64_t epoch, const std::string& job_id, const v1::JobStatus& status) = 0;
  virtual absl::Status DoRemove(int64_t epoch, const std::string& job_id) = 0;
  // `epoch`: the leadership's while unfenced, nullopt while fenced.
  virtual std::vector<StoredJob> DoLoad(std::optional<int64_t> epoch, std::vector<std::string>* problems) = 0;

 private:
  // The epoch to write for; kFailedPrecondition while fenced.
  absl::StatusOr<int64_t> CheckNotFencedLocked(absl::string_view what) const ABSL_SHARED_LOCKS_REQUIRED(fence_mu_);

  mutable absl::Mutex fence_mu_;
  bool fenced_ ABSL_GUARDED_BY(fence_mu_);
  int64_t epoch_ ABSL_GUARDED_BY(fence_mu_) = 0;
};

// A job id as the Dispatcher makes them (it names a directory and a key).
bool IsJobId(absl::string_view id);

// The job store of high-availability.type none, in high-availability.storageDir:
//
//   <dir>/jobmanager.lock          held (flock) by the one JobManager using <dir>
//   <dir>/leader-epoch             the epoch the last JobManager on <dir> took
//   <dir>/jobs/<job id>/submission the SubmitJobRequest, as submitted
//   <dir>/jobs/<job id>/attempt    the last attempt number started
//   <dir>/jobs/<job id>/final      the job's status once it ended
//
// Every file is written atomically (write, fsync, rename, fsync the
// directory). Open takes an exclusive lock and refuses, naming the
// directory, when another process holds it, so that two JobManagers never
// both act on one directory.
class DirectoryJobStore final : public JobStore {
 public:
  // Opens (creating) <ha_dir>/jobs and takes <ha_dir>/jobmanager.lock;
  // kFailedPrecondition when another process holds it, and for an object
  // store URI (s3://: the lock needs a local directory).
  static absl::StatusOr<std::unique_ptr<DirectoryJobStore>> Open(const std::string& ha_dir);
  ~DirectoryJobStore() override;

  // The next leader epoch: one past the last one taken on this directory
  // (1 on a new one), written before it is returned, so every JobManager
  // that starts on the directory has a higher epoch than any before it.
  // TaskManagers refuse requests from a lower epoch than the one they
  // registered with (the fencing token). A corrupt file is an error naming
  // it, not a reset: a reset would let an earlier JobManager's requests in.
  absl::StatusOr<int64_t> TakeLeaderEpoch();

  std::string location() const override { return jobs_dir_; }

 protected:
  absl::Status DoSaveSubmission(int64_t epoch, const std::string& job_id,
                                const v1::SubmitJobRequest& request) override;
  absl::Status DoSaveAttempt(int64_t epoch, const std::string& job_id, int attempt) override;
  absl::Status DoSaveFinal(int64_t epoch, const std::string& job_id, const v1::JobStatus& status) override;
  absl::Status DoRemove(int64_t epoch, const std::string& job_id) override;
  std::vector<StoredJob> DoLoad(std::optional<int64_t> epoch, std::vector<std::string>* problems) override;

 private:
  DirectoryJobStore(std::string ha_dir, std::string jobs_dir, int lock_fd)
      : JobStore(/*fenced=*/false), ha_dir_(std::move(ha_dir)), jobs_dir_(std::move(jobs_dir)), lock_fd_(lock_fd) {}
  absl::Status Write(const std::string& job_id, const char* name, const std::string& bytes);

  const std::string ha_dir_;
  const std::string jobs_dir_;
  const int lock_fd_;
};

}  // namespace weir::jobmanager
