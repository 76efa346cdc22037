// MiniCluster: one job's JobMaster and N TaskManager stand-ins in one
// process, so that failover — restarts, lost TaskManagers, failed
// deployments, checkpoint timeouts, restores — is tested in well under a
// second, with no ports and no processes.
//
// The JobManager side is the daemon's own code: the JobMaster with its
// CheckpointCoordinator, and a ResourceManager the stand-ins register with,
// which hands out their slots and reports their loss and slots that came
// free to the JobMaster as the Dispatcher wires it. What would cross the
// network goes through an InMemoryTaskManagerGateway, and time is a
// SimulatedClock (or the real clock, for tests that want it).
//
// A TaskManager stand-in is not a process: it is an id (tm-<n>), an address
// nobody dials (127.0.0.1:<n>) and slots in the ResourceManager. The test
// says what each one does: how it answers deployments (through the
// gateway's answers), which states its tasks report, whether they
// acknowledge or decline checkpoints, and when it is lost.
//
// Not yet here (design/jobmanager-leadership.md, step 5): a JobManager with
// its job store and leader election; today's JobMaster takes neither.
//
// Thread-safety: the methods are called from the test's thread only. The
// JobMaster's own threads reach the cluster through the gateway and the slot
// provider, which are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/time/simulated_clock.h"
#include "jobmanager/job_master.h"
#include "jobmanager/resource_manager.h"
#include "tests/testing/in_memory_taskmanager_gateway.h"
#include "weir/v1/cluster.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::testing {

struct MiniClusterOptions {
  // Stand-ins registered at construction, tm-1 to tm-<taskmanagers>.
  int taskmanagers = 2;
  int slots_per_taskmanager = 1;
  // Whether the JobMaster goes by the cluster's SimulatedClock (unless the
  // job's settings name a clock); false: by the real one.
  bool simulated_time = true;
};

class MiniCluster {
 public:
  // The one job's id.
  static constexpr char kJobId[] = "minicluster-job";
  // How long a test waits, in real time, for something that should happen
  // at once. Generous: a deadline, never a measurement.
  static constexpr absl::Duration kPatience = absl::Seconds(60);

  explicit MiniCluster(MiniClusterOptions options = {});
  // Stops the JobMaster before anything it uses goes.
  ~MiniCluster();

  MiniCluster(const MiniCluster&) = delete;
  MiniCluster& operator=(const MiniCluster&) = delete;

  // A source of `parallelism` hash-partitioned into a sink of `parallelism`:
  // chain 0 (the source) and chain 1 (the sink), `parallelism` slots.
  static v1::SubmitJobRequest SourceToSinkJob(int parallelism = 2);

  static std::string TaskManagerId(int n);
  static std::string TaskManagerAddress(int n);
  static std::string TaskId(int attempt, int chain, int subtask);

  // Registers one more stand-in with `slots` slots; returns its number.
  int AddTaskManager(int slots);
  // The ResourceManager ends stand-in `n`'s registration for `reason`, and
  // so reports it lost to the JobMaster.
  void LoseTaskManager(int n, jobmanager::LossReason reason = jobmanager::LossReason::kConnectionClosed);

  // Allocates the job's slots from the ResourceManager, as the Dispatcher
  // does, then creates and starts its JobMaster. When the settings have a
  // checkpoint interval and no checkpoint directory, checkpoints go into a
  // temporary directory of the cluster's.
  absl::Status StartJob(v1::SubmitJobRequest request, jobmanager::JobSettings settings);
  jobmanager::JobMaster& job() { return *master_; }

  // What the stand-ins tell the JobMaster. Each task speaks from the
  // TaskManager its attempt was deployed to.
  void Report(int attempt, int chain, int subtask, v1::TaskState state, const std::string& error = "");
  // Every task of `attempt` that was deployed (to stand-in `n` only, for
  // ReportAllOn) reports `state`.
  void ReportAll(int attempt, v1::TaskState state);
  void ReportAllOn(int n, int attempt, v1::TaskState state);
  // The task writes a snapshot file into checkpoint `id`'s directory and
  // acknowledges it, with the identity its deployment descriptor gave it.
  void Acknowledge(int attempt, int chain, int subtask, int64_t id);
  void AcknowledgeAll(int attempt, int64_t id);
  void Decline(int attempt, int chain, int subtask, int64_t id, const std::string& reason);
  // The file Acknowledge writes for a task.
  static std::string SnapshotFile(int attempt, int chain, int subtask);

  // The task ids of the deployment calls [from, to), by address.
  std::map<std::string, std::set<std::string>> DeployedTasks(size_t from, size_t to) const;
  // The descriptor `task_id` was last deployed with.
  std::optional<v1::TaskDeploymentDescriptor> Descriptor(const std::string& task_id) const;
  // The checkpoint notifications sent so far about checkpoint `id`.
  std::vector<InMemoryTaskManagerGateway::NotifyCall> NotificationsAbout(int64_t id) const;

  // Waits (real time, up to kPatience) for the job to be in `state`.
  bool AwaitState(v1::JobState state) const;
  // The terminal callback's calls so far; AwaitTerminal waits for one first
  // (the JobMaster makes it after its state shows the end).
  std::vector<v1::JobState> terminal() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::JobState> AwaitTerminal() const ABSL_LOCKS_EXCLUDED(mu_);
  // Calls of the slot provider: allocations that succeeded and failed (only
  // those of restarts; StartJob's own is not counted), and releases.
  int allocations() const ABSL_LOCKS_EXCLUDED(mu_);
  int failed_allocations() const ABSL_LOCKS_EXCLUDED(mu_);
  int releases() const ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitFailedAllocations(int count) const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until `threads` threads wait on the clock for a time ahead, then
  // advances it by `step`, until `done` holds (checked before each step,
  // and for up to kPatience of real time after the last); at most
  // `max_steps` steps. For what the code under test starts counting at a
  // moment the test cannot see (a checkpoint interval counts from when the
  // JobMaster handed the coordinator the attempt's tasks).
  bool AdvanceUntil(const std::function<bool()>& done, absl::Duration step, int max_steps, int threads);

  time::SimulatedClock& clock() { return clock_; }
  InMemoryTaskManagerGateway& gateway() { return *gateway_; }
  jobmanager::ResourceManager& resource_manager() { return resource_manager_; }
  // The job's checkpoint directory (<dir>/<job id>), once StartJob made one.
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }

 private:
  struct StandIn {
    std::string id;
    std::string address;
    uint64_t epoch = 0;  // of its registration
  };

  // The TaskManager that `task_id`'s latest deployment went to.
  std::string TaskManagerOf(const std::string& task_id) const;

  const MiniClusterOptions options_;
  // Declared before everything that uses them, so that they go last.
  time::SimulatedClock clock_;
  const std::shared_ptr<InMemoryTaskManagerGateway> gateway_ = std::make_shared<InMemoryTaskManagerGateway>();
  jobmanager::ResourceManager resource_manager_;
  std::vector<StandIn> taskmanagers_;  // stand-in n at index n - 1
  std::string temp_dir_;
  std::string checkpoint_dir_;

  mutable absl::Mutex mu_;
  std::vector<v1::JobState> terminal_ ABSL_GUARDED_BY(mu_);
  int allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int releases_ ABSL_GUARDED_BY(mu_) = 0;

  // The JobMaster the slots listener tells (null once it is going).
  absl::Mutex offer_mu_;
  jobmanager::JobMaster* offer_to_ ABSL_GUARDED_BY(offer_mu_) = nullptr;

  // Last: the loss listener reads it, and it goes first.
  std::shared_ptr<jobmanager::JobMaster> master_;
};

}  // namespace weir::testing
