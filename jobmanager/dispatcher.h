// Dispatcher: accepts jobs and keeps their JobMasters. Submission validates
// the graph (structure and connector settings), checks that the binary was
// uploaded, builds the execution graph, allocates slots (failing at once,
// with numbers, when there are too few) and starts a JobMaster.
//
// Finished jobs stay listed (weir list / status) for the life of the
// JobManager process; persistence across JobManager restarts comes with
// checkpoints.
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/configuration.h"
#include "connectors/kafka/kafka_properties.h"
#include "jobmanager/artifact_store.h"
#include "jobmanager/job_master.h"
#include "jobmanager/resource_manager.h"

namespace weir::jobmanager {

struct DispatcherOptions {
  int default_parallelism = 1;
  int max_parallelism = 128;
  absl::Duration cancel_timeout = absl::Seconds(30);
  // Which kafka.<name> connector properties jobs may set.
  connectors::KafkaPropertyPolicy kafka_policy;
  // The JobManager's configuration: the defaults of every job's settings
  // (checkpoints, restart strategy), which a submission may override with -D.
  config::Configuration cluster_config;
};

class Dispatcher {
 public:
  Dispatcher(DispatcherOptions options, ResourceManager* resource_manager, ArtifactStore* artifacts);
  ~Dispatcher();

  absl::StatusOr<std::string> Submit(const v1::SubmitJobRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::JobStatus> List() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Cancel(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  void OnTaskStateUpdate(const v1::TaskStateUpdate& update) ABSL_LOCKS_EXCLUDED(mu_);
  void OnTaskMetrics(const v1::TaskMetrics& metrics) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCheckpointAcknowledged(const v1::AcknowledgeCheckpointRequest& ack) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCheckpointDeclined(const v1::DeclineCheckpointRequest& decline) ABSL_LOCKS_EXCLUDED(mu_);
  // Recent checkpoints of a job, newest first; kNotFound for an unknown job.
  absl::StatusOr<v1::ListCheckpointsResponse> Checkpoints(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // kFailedPrecondition when a job that has not ended writes exactly-once
  // with one of the transactional id prefixes of `graph`.
  absl::Status CheckPrefixesUnused(const v1::JobGraphSpec& graph) const ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<JobMaster> Find(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);

  const DispatcherOptions options_;
  ResourceManager* const resource_manager_;
  ArtifactStore* const artifacts_;
  std::shared_ptr<spdlog::logger> log_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<JobMaster>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::jobmanager
