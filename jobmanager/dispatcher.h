// Dispatcher: accepts jobs and keeps their JobMasters. Submission validates
// the graph (structure, and connector settings through the connector
// registry: each connector's own checks, the job's checkpointing, names that
// only one vertex and one running job may hold), checks that the binary was
// uploaded, builds the execution graph, allocates slots (failing at once,
// with numbers, when there are too few) and starts a JobMaster.
//
// With a JobStore, every submission is persisted before it starts, and a
// restarted JobManager takes its jobs back (Recover): the ones still running
// go on from their newest checkpoint once enough TaskManagers re-registered,
// the ended ones stay listed (weir list / status).
//
// Under an election (high-availability.type etcd) a JobManager that loses
// its leadership calls StepDown, and Recover again once it leads again.
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/configuration.h"
#include "connectors/registry.h"
#include "jobmanager/artifact_store.h"
#include "jobmanager/job_master.h"
#include "jobmanager/job_store.h"
#include "jobmanager/resource_manager.h"

namespace weir::jobmanager {

struct DispatcherOptions {
  int default_parallelism = 1;
  int max_parallelism = 128;
  absl::Duration cancel_timeout = absl::Minutes(3);
  // The connectors that jobs name (connectors/builtin.h): submissions are
  // validated against them. Null: none.
  std::shared_ptr<const connectors::ConnectorRegistry> connectors;
  // The JobManager's configuration: the defaults of every job's settings
  // (checkpoints, restart strategy), which a submission may override with -D.
  config::Configuration cluster_config;
  // Where jobs are persisted; null keeps them in memory only (tests).
  JobStore* store = nullptr;
  // Ended jobs stay listed this long (jobstore.expiration-time), at most
  // this many of them (jobstore.max-capacity).
  absl::Duration ended_job_expiration = absl::Hours(1);
  int max_ended_jobs = 1000;
  // state.savepoints.dir: where savepoints are written, and the only place
  // submissions may start from.
  std::string savepoints_dir;
  // state.checkpoints.dir (or <storage>/checkpoints): -s may also name a
  // retained checkpoint there.
  std::string checkpoints_dir;
  // Where job masters and checkpoint coordinators show their loops are
  // alive; null: nowhere.
  Liveness* liveness = nullptr;
  // Whether this JobManager surely still leads (CheckpointCoordinator-
  // Options::leading); null: always.
  std::function<bool()> leading;
  // Job binaries no job uses go this long after their upload
  // (jobmanager.artifact.retention).
  absl::Duration artifact_retention = absl::Hours(1);
};

class Dispatcher {
 public:
  Dispatcher(DispatcherOptions options, ResourceManager* resource_manager, ArtifactStore* artifacts);
  ~Dispatcher();

  // `notices`, when set, receives what the submission should know (state
  // of a savepoint dropped or missing).
  absl::StatusOr<std::string> Submit(const v1::SubmitJobRequest& request, std::vector<std::string>* notices = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // How long the dispatcher's lock has been seen taken: tries it now
  // (without waiting); zero when free, else the time since the first of the
  // tries in a row that found it taken. For the watchdog: a lock held for a
  // minute means a call that never returns.
  absl::Duration LockHeldFor() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes back the jobs of options.store (at start, and at every leadership
  // after a StepDown): restarts those that had not ended, lists those that
  // had. Problems with single jobs are logged; the others go on.
  void Recover() ABSL_LOCKS_EXCLUDED(mu_);
  // Leadership lost: stops every JobMaster (all at once, each on a thread of
  // its own, and returns once all have stopped) and forgets every job,
  // without marking any ended: the store keeps them for the next leader, as
  // after a JobManager's shutdown. The caller fences the store first, so
  // that a JobMaster stopping now writes nothing. Until Recover, no job
  // starts (kUnavailable).
  void StepDown() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins retired JobMasters' threads and forgets ended jobs past their
  // retention. Called on the RPC threads; cheap when there is nothing to do.
  void Housekeep() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::JobStatus> List() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Cancel(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // weir savepoint: the savepoint's path once written.
  absl::StatusOr<std::string> TriggerSavepoint(const std::string& job_id, const std::string& target_directory)
      ABSL_LOCKS_EXCLUDED(mu_);
  // weir stop: stop-with-savepoint; the savepoint's path once the job has
  // finished.
  absl::StatusOr<std::string> StopJob(const std::string& job_id, const std::string& target_directory)
      ABSL_LOCKS_EXCLUDED(mu_);

  void OnTaskStateUpdate(const v1::TaskStateUpdate& update) ABSL_LOCKS_EXCLUDED(mu_);
  // A TaskManager's report of every task it holds, to every job.
  void OnTaskManagerReport(const v1::ReportTaskMetricsRequest& report) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCheckpointAcknowledged(const v1::AcknowledgeCheckpointRequest& ack) ABSL_LOCKS_EXCLUDED(mu_);
  // A TaskManager's batch: one job lookup per job in it.
  void OnCheckpointsAcknowledged(const v1::AcknowledgeCheckpointsRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCheckpointDeclined(const v1::DeclineCheckpointRequest& decline) ABSL_LOCKS_EXCLUDED(mu_);
  // Recent checkpoints of a job, newest first; kNotFound for an unknown job.
  absl::StatusOr<v1::ListCheckpointsResponse> Checkpoints(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Checks every connector vertex of `graph` against the job's settings:
  // an exactly-once sink needs aligned checkpoints, each connector's
  // ValidateForJob, and no two vertices may claim one exclusive name.
  absl::Status CheckConnectorsForJob(const v1::JobGraphSpec& graph, const JobSettings& settings) const;
  // kFailedPrecondition when a job that has not ended holds one of the
  // exclusive names of `graph` (e.g. a transactional id prefix).
  absl::Status CheckExclusiveNamesUnused(const v1::JobGraphSpec& graph) const ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<JobMaster> Find(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Builds the JobMaster of `job_id` and starts it.
  absl::Status StartJob(const std::string& job_id, const v1::SubmitJobRequest& request, ExecutionGraph graph,
                        std::vector<SlotAssignment> slots, JobSettings settings) ABSL_LOCKS_EXCLUDED(mu_);
  // A job ended (on its JobMaster's worker thread): keeps its final status
  // and checkpoints, persists the status, and retires the JobMaster.
  void OnJobEnded(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the savepoint a submission names and checks that it fits
  // `graph`; fills settings->savepoint and savepoint_checkpoint_dir.
  absl::Status ApplySavepoint(const v1::SubmitJobRequest& request, const ExecutionGraph& graph,
                              JobSettings* settings) const;

  struct EndedJob {
    v1::JobStatus status;
    v1::ListCheckpointsResponse checkpoints;
    absl::Time ended_at;
  };

  const DispatcherOptions options_;
  // options_.connectors, or an empty registry.
  const std::shared_ptr<const connectors::ConnectorRegistry> connectors_;
  ResourceManager* const resource_manager_;
  ArtifactStore* const artifacts_;
  std::shared_ptr<spdlog::logger> log_;

  mutable absl::Mutex mu_;
  // The first of the tries in a row that found mu_ taken (Unix ms); 0: the
  // last try found it free.
  std::atomic<int64_t> taken_since_ms_{0};
  // When Housekeep last collected unused job binaries; it does not before
  // Recover has run.
  absl::Time last_collect_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool recovered_ ABSL_GUARDED_BY(mu_) = false;
  // False from StepDown until the next Recover.
  bool leading_ ABSL_GUARDED_BY(mu_) = true;
  std::map<std::string, std::shared_ptr<JobMaster>> jobs_ ABSL_GUARDED_BY(mu_);
  // Jobs that ended (here or under a previous JobManager), for listing.
  std::map<std::string, EndedJob> ended_ ABSL_GUARDED_BY(mu_);
  // JobMasters whose job ended; destroyed (their worker joined) by
  // Housekeep, never on their own worker thread.
  std::vector<std::shared_ptr<JobMaster>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::jobmanager
