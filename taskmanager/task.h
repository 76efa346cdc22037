// Task: one subtask of one chain of a job, running on its own thread.
//
// It loads the job (once per job per TaskManager, through JobArtifacts),
// instantiates the chained operators, wires them — in-chain as direct calls
// with C++ objects, to other tasks through RecordWriters into result
// partitions, from other tasks through an InputGate — and runs until its
// input ends (bounded jobs), it is canceled, or it fails. An exception from
// user code fails the task with its message; the TaskManager goes on.
//
// Records in: records that entered the chain (from the input channels, or
// produced by the source). Records out: records that left the chain (to
// the output partitions, or into the sink).
//
// Thread-safety: Start, Cancel, state() and Metrics() from any thread; the
// rest runs on the task thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/logging/logging.h"
#include "connectors/kafka/kafka_properties.h"
#include "taskmanager/job_artifacts.h"
#include "taskmanager/network/result_partition.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

// Where a Task reports its state changes (the JobManager).
class TaskStateListener {
 public:
  virtual ~TaskStateListener() = default;
  virtual void OnTaskState(const v1::TaskStateUpdate& update) = 0;
};

struct TaskEnvironment {
  std::string taskmanager_id;
  JobArtifacts* artifacts = nullptr;
  network::PartitionManager* partitions = nullptr;
  TaskStateListener* listener = nullptr;
  int buffers_per_channel = 4;
  int segment_size = 32 * 1024;
  absl::Duration buffer_timeout = absl::Milliseconds(100);
  int max_parallelism = 128;
  // Which kafka.<name> connector properties jobs may set.
  connectors::KafkaPropertyPolicy kafka_policy;
};

class Task {
 public:
  Task(v1::TaskDeploymentDescriptor tdd, TaskEnvironment env);
  ~Task();  // joins the task thread

  void Start();
  // Asks the task to stop; it ends CANCELED soon after.
  void Cancel(const std::string& reason);

  bool done() const { return done_.HasBeenNotified(); }
  const std::string& task_id() const { return tdd_.task_id(); }
  const std::string& job_id() const { return tdd_.job_id(); }
  int attempt() const { return tdd_.attempt(); }
  int slot_index() const { return tdd_.slot_index(); }
  v1::TaskMetrics Metrics() const;

 private:
  class Execution;
  void Run();
  void Report(v1::TaskState state, const std::string& error);

  const v1::TaskDeploymentDescriptor tdd_;
  const TaskEnvironment env_;
  std::shared_ptr<spdlog::logger> log_;
  std::thread thread_;
  absl::Notification done_;
  absl::Notification cancel_requested_;
  std::atomic<int64_t> records_in_{0};
  std::atomic<int64_t> records_out_{0};
  // The partitions this task produces; released on cancel to unblock it.
  absl::Mutex partitions_mu_;
  std::vector<std::shared_ptr<network::ResultPartition>> partitions_ ABSL_GUARDED_BY(partitions_mu_);
};

}  // namespace weir::taskmanager
