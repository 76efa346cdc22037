// FencedJobStore: the job store of JobManagers under an election
// (high-availability.type etcd), where a deposed leader's write fails at the
// coordination service even before its own lease check revokes it.
//
// Layout:
//   etcd  /weir/<cluster id>/store/jobs/<job id>
//         a StoredJobRecord (job.proto): the last attempt, the final status,
//         and the name, SHA-256 and size of the submission's file. Written
//         only with LeaderElection::FencedPut / FencedDelete for the epoch
//         Unfence gave.
//   files <high-availability.storageDir>/submissions/<job id>/<epoch>-<sha256>
//         the SubmitJobRequest (it may be large), through the FileSystem
//         (a local directory or s3://bucket/prefix), written with kCreateNew
//         before the record that names it.
//
// A submission file is referenced only once it is whole. Files no record
// names are collected: a job's at its removal (after the record's fenced
// delete succeeded), and at Load (when a JobManager takes over) those of
// earlier epochs. A file of an epoch below the reader's, named by no record
// the reader sees, can never be named by one later: records naming it could
// only be written while that epoch led. So a deposed leader's collection
// cannot take a file its successors use.
//
// Load reads the records (one prefix read) and then their files; a record
// that cannot be parsed, or whose file is missing, of the wrong size or
// hash, is left out and described, never a crash. What is read is bounded:
// kMaxJobs records of kMaxRecordBytes each, files of kMaxSubmissionBytes.
//
// Thread-safety: thread-safe. Writes of one store are serialized (a record
// is read, changed and written back); Fence waits for them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/fs/file_system.h"
#include "jobmanager/ha/leader_election.h"
#include "jobmanager/job_store.h"

namespace weir::jobmanager {

class FencedJobStore final : public JobStore {
 public:
  // Bounds on what Load and the writes read.
  static constexpr size_t kMaxJobs = 100000;
  static constexpr int64_t kMaxRecordBytes = 256 << 10;
  static constexpr int64_t kMaxSubmissionBytes = 16 << 20;

  // The store with submissions under `root` of `files` ("" for its root),
  // described as `uri` in logs and errors. Fenced until Unfence(epoch);
  // `election` must be set (SetElection) before that.
  FencedJobStore(std::shared_ptr<fs::FileSystem> files, std::string root, std::string uri,
                 ha::LeaderElection* election = nullptr);

  // The election whose fenced writes the store uses; set once, before the
  // election starts (the JobManager creates it after the store).
  void SetElection(ha::LeaderElection* election) ABSL_LOCKS_EXCLUDED(write_mu_);

  std::string location() const override;

  // The file path of `job_id`'s submissions' directory and the etcd store
  // key of its record (for tests and operators).
  static std::string RecordKey(absl::string_view job_id);
  std::string SubmissionDir(absl::string_view job_id) const;

 protected:
  absl::Status DoSaveSubmission(int64_t epoch, const std::string& job_id,
                                const v1::SubmitJobRequest& request) override ABSL_LOCKS_EXCLUDED(write_mu_);
  absl::Status DoSaveAttempt(int64_t epoch, const std::string& job_id, int attempt) override
      ABSL_LOCKS_EXCLUDED(write_mu_);
  absl::Status DoSaveFinal(int64_t epoch, const std::string& job_id, const v1::JobStatus& status) override
      ABSL_LOCKS_EXCLUDED(write_mu_);
  absl::Status DoRemove(int64_t epoch, const std::string& job_id) override ABSL_LOCKS_EXCLUDED(write_mu_);
  std::vector<StoredJob> DoLoad(std::optional<int64_t> epoch, std::vector<std::string>* problems) override
      ABSL_LOCKS_EXCLUDED(write_mu_);

 private:
  // `relative` under root_.
  std::string Path(absl::string_view relative) const;
  // Reads `job_id`'s record, changes it with `change` and writes it back
  // for `epoch`; kNotFound when the job has no record.
  absl::Status UpdateLocked(int64_t epoch, const std::string& job_id, const char* what,
                            const std::function<void(v1::StoredJobRecord*)>& change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::Status PutLocked(int64_t epoch, const std::string& job_id, const char* what,
                         v1::StoredJobRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Deletes the submission files of earlier epochs than `epoch` that no
  // record in `referenced` names (see the class comment).
  void CollectLocked(int64_t epoch, const std::vector<std::string>& referenced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  ha::LeaderElection* election() const ABSL_LOCKS_EXCLUDED(write_mu_);

  const std::shared_ptr<fs::FileSystem> files_;
  const std::string root_;
  const std::string uri_;

  mutable absl::Mutex write_mu_;
  ha::LeaderElection* election_ ABSL_GUARDED_BY(write_mu_);
};

}  // namespace weir::jobmanager
